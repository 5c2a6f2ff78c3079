"""allocator.keep_freed_buffers: freed MiB-sized buffers are reused, not faulted in
anew at every call, and Client applies it unless told not to. Each case runs in a
fresh interpreter: the malloc settings are process-wide and cannot be undone."""
import os
import platform
import subprocess
import sys

import pytest

GLIBC = platform.libc_ver()[0] == "glibc"

# Page faults per round of two 4 MiB buffers allocated, filled and freed: what a
# call with a 2 MiB tensor each way does to its message buffers.
ROUNDS = """
import resource, sys
from layerserve_client import allocator
if sys.argv[1] == "keep":
    assert allocator.keep_freed_buffers()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def round_():
    a = bytearray(b"x" * (4 << 20))
    b = bytearray(b"y" * (4 << 20))
    del b, a
for _ in range(3):
    round_()
start = faults()
for _ in range(20):
    round_()
print((faults() - start) / 20)
"""

CLIENT = """
import sys
from layerserve_client import Client, allocator
Client("127.0.0.1:1", keep_freed_buffers=sys.argv[1] == "keep").close()
print(allocator._done)
"""


def run(script, arg):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", script, arg], env=env, check=True,
                          capture_output=True, text=True, timeout=60).stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="the settings are glibc's; elsewhere none are made")
def test_freed_buffers_are_reused_without_page_faults():
    pages = (4 << 20) // 4096
    # Without the settings glibc trims the freed buffers and faults them in again
    # (so the test can fail); with them the rounds reuse the same pages.
    assert float(run(ROUNDS, "default")) > pages
    assert float(run(ROUNDS, "keep")) < pages / 20


def test_client_keeps_freed_buffers_unless_told_not_to():
    # On other C libraries keep_freed_buffers() changes nothing and says so.
    assert run(CLIENT, "keep") == str(GLIBC)
    assert run(CLIENT, "leave") == "None"
