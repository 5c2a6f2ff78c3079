// The server binary's memory allocator. Release builds link jemalloc
// (-DLAYERSERVE_ALLOCATOR=jemalloc, the default): under requests of many sizes
// glibc's heap fragments and resident memory creeps up for as long as the server
// runs, where jemalloc's stays flat (bench/soak.py; docs/perf/2026-12-02-allocator.md).
// Sanitizer builds bring their own allocator and use glibc's settings below.
#ifndef LAYERSERVE_SERVER_RPC_ALLOCATOR_H_
#define LAYERSERVE_SERVER_RPC_ALLOCATOR_H_

#include <string>

namespace layerserve {

// Settings that must be made before the first threads start.
void TuneAllocator();

// "jemalloc VERSION" or "glibc malloc", for the start-up log.
std::string AllocatorName();

}  // namespace layerserve

#endif  // LAYERSERVE_SERVER_RPC_ALLOCATOR_H_
