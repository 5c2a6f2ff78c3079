"""Keeps the process's freed tensor buffers for reuse instead of handing them back to
the system after every call (glibc only; Client calls this unless told not to).

Why: a call with a [128, 4096] float32 tensor moves 2 MiB each way, through several
buffers of that size (gRPC's message, the protobuf bytes, the numpy array). glibc
serves each from fresh pages and trims them off again when freed, so every call
faults them all in anew; on a virtual machine, where a page fault is expensive,
that took 15-23 ms of a 2 MiB round trip to a bare echo server against 5-6 ms with
the settings below (docs/perf/2026-12-02-large-messages.md). The cost is memory:
the process keeps up to TRIM_THRESHOLD of freed memory at the top of its heaps.
"""
import ctypes
import ctypes.util
import platform
import threading

# mallopt(3) parameters.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Allocations below this come from the heap (whose freed memory is reused), not from
# mmap (whose freed memory is unmapped): glibc's own ceiling for it, 32 MiB on
# 64-bit systems (it grows its threshold up to this by itself, but only after a
# large buffer was freed, and then trims on the next large free).
MMAP_THRESHOLD = 32 << 20
# Free memory kept at the top of a heap before glibc gives it back.
TRIM_THRESHOLD = 256 << 20

_lock = threading.Lock()
_done = None


def keep_freed_buffers() -> bool:
    """Sets glibc's malloc to reuse freed large buffers (once per process). Returns
    whether the settings are in effect: False on other C libraries, where nothing
    is changed."""
    global _done
    with _lock:
        if _done is None:
            _done = _set_glibc_options()
        return _done


def _set_glibc_options() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success.
    return (mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and
            mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
