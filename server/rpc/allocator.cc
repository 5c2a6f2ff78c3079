// The allocator the server binary runs on, and its settings (allocator.h).
#include "server/rpc/allocator.h"

#include <malloc.h>

#include <string>

#ifdef LAYERSERVE_JEMALLOC
#include <jemalloc/jemalloc.h>

// Read by jemalloc at its first allocation (jemalloc.h declares it with C linkage).
// Freed pages go back to the system 10 s (the default dirty_decay_ms) after their
// last use, by jemalloc's own background thread: memory also shrinks while the
// server is idle, and no request thread pays for the purge. Until then a freed
// buffer is reused without page faults.
// oversize_threshold:0: by default jemalloc serves requests of 8 MiB and more from a
// dedicated arena that gives their pages back at once, so every call with an 8 MiB
// tensor (T = 512 at hidden 4096, in float32) faulted its message buffers in again:
// at this VM's 4 KiB fault cost, 105 ms of an 8 MiB RMSNorm's 108 ms p50, 11-25 ms
// without it (docs/perf/2026-12-02-large-messages.md). Off, they decay like the rest.
const char* malloc_conf = "background_thread:true,oversize_threshold:0";
#endif

namespace layerserve {

void TuneAllocator() {
#ifndef LAYERSERVE_JEMALLOC
  // glibc (sanitizer builds, -DLAYERSERVE_ALLOCATOR=system): large buffers are
  // served with mmap and given back on free, so each one pays first-touch page
  // faults again (measured: a 1 MiB echo ~7 ms instead of ~1 ms). Keep freed memory
  // in the process instead. Its heap then fragments and creeps up under requests of
  // many sizes (docs/perf/2026-11-30-soak.md); jemalloc does not.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

std::string AllocatorName() {
#ifdef LAYERSERVE_JEMALLOC
  const char* version = nullptr;
  size_t size = sizeof version;
  if (mallctl("version", &version, &size, nullptr, 0) == 0 && version != nullptr)
    return std::string("jemalloc ") + version;
  return "jemalloc";
#else
  return "glibc malloc";
#endif
}

}  // namespace layerserve
