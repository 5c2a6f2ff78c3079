"""An opt-in for processes that send MiB-sized tensors: keep the process's freed
buffers for reuse instead of handing them back to the system after every call
(glibc only). Nothing calls it unless asked: layerserve_client.keep_freed_buffers()
or Client(..., keep_freed_buffers=True). It changes malloc for the whole process,
which a library must not do behind its user's back.

Why: a call with a [128, 4096] float32 tensor moves 2 MiB each way, through several
buffers of that size (gRPC's message, the protobuf bytes, the numpy array). glibc
serves each from fresh pages and trims them off again when freed, so every call
faults them all in anew, which is slow where a page fault is expensive (a virtual
machine). The effect measured: docs/clients/python.md, "Large tensors". The cost is
memory: the process keeps up to TRIM_THRESHOLD of freed memory at the top of its
heaps, and the settings cannot be undone.
"""
import ctypes
import ctypes.util
import platform
import threading
from typing import Optional

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
_done: Optional[bool] = None  # None: not asked yet.


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
