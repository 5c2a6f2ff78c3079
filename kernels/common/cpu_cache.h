// The size of the cache a worker's data falls back to before memory: a fact of the
// hardware the server's policies read (whether decode batches gather,
// server/ops/block_forward.h). Every function here is thread-safe, reads no input
// beyond its arguments and sysfs, and reports what it cannot read as 0 (never throws
// for a missing or malformed file).
#ifndef LAYERSERVE_KERNELS_CPU_CACHE_H_
#define LAYERSERVE_KERNELS_CPU_CACHE_H_

#include <cstdint>

namespace layerserve::kernels {

// At most this much last-level cache is counted per CPU that shares it: more than
// any x86 server core has to itself (1.9-5 MiB on Intel Xeons, 4 MiB on AMD EPYC,
// 12 MiB on its 3D V-Cache parts).
inline constexpr int64_t kMaxCacheBytesPerCpu = int64_t{16} << 20;

// Bytes of the last-level cache CPU 0 shares with the CPUs next to it (Linux sysfs:
// the highest cache level of cpu0), at most kMaxCacheBytesPerCpu per CPU its
// shared_cpu_list names; 0 if unknown. Read once, on the first call; later calls
// return the same value. Not sysconf's _SC_LEVEL3_CACHE_SIZE: on AMD EPYC that
// reports every core complex's L3 of the socket together. The cap is for virtual
// machines, whose sysfs shows the host's whole L3 with only the guest's CPUs sharing
// it (what that read on the 2-CPU Xeon VM: docs/perf/2026-12-06-kernel-choices.md).
int64_t LastLevelCacheBytes();

// Parses a sysfs cache size ("32768K", "1M", "512"); 0 if malformed.
int64_t ParseCacheSize(const char* text);

// The number of CPUs in a sysfs CPU list ("0-1", "0,2-5\n"); 0 if malformed.
int64_t CountCpuList(const char* text);

}  // namespace layerserve::kernels

#endif  // LAYERSERVE_KERNELS_CPU_CACHE_H_
