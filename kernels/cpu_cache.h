// The size of the cache a worker's data falls back to before memory: a fact of the
// hardware the server's policies read (whether decode batches gather,
// server/ops/block_forward.h). Thread-safe.
#ifndef LAYERSERVE_KERNELS_CPU_CACHE_H_
#define LAYERSERVE_KERNELS_CPU_CACHE_H_

#include <cstdint>

namespace layerserve::kernels {

// Bytes of the last-level cache CPU 0 shares with the CPUs next to it (Linux sysfs:
// the highest cache level of cpu0), or 0 if unknown. Not sysconf's
// _SC_LEVEL3_CACHE_SIZE: on the AMD EPYC machines this runs on, that reports every
// core complex's L3 of the socket together (320 MiB where one complex has 32).
int64_t LastLevelCacheBytes();

// Parses a sysfs cache size ("32768K", "1M", "512"); 0 if malformed.
int64_t ParseCacheSize(const char* text);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_CPU_CACHE_H_
