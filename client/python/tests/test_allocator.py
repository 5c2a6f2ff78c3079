"""keep_freed_buffers, the opt-in: freed MiB-sized buffers are reused, not faulted in
anew at every call, once asked for (layerserve_client.keep_freed_buffers() or
Client(keep_freed_buffers=True)); a Client made without it leaves the process's
malloc settings alone. Each case runs in a fresh interpreter: the settings are
process-wide and cannot be undone."""
import os
import platform
import subprocess
import sys

import pytest

GLIBC = platform.libc_ver()[0] == "glibc"

# Page faults per round of two 4 MiB buffers allocated, filled and freed (what a
# call with a 2 MiB tensor each way does to its message buffers), after the way
# argv[1] says the package was used. Prints the faults per round, then whether the
# settings were made (allocator._done: None = never asked).
ROUNDS = """
import resource, sys
import layerserve_client
from layerserve_client import allocator
how = sys.argv[1]
if how == "function":
    assert layerserve_client.keep_freed_buffers() == (allocator._done is True)
elif how != "import":
    layerserve_client.Client("127.0.0.1:1", **eval(how)).close()
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
print(allocator._done)
"""


def run(how):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", ROUNDS, how], env=env, check=True,
                         capture_output=True, text=True, timeout=60).stdout.split()
    return float(out[0]), out[1]


PAGES = (4 << 20) // 4096


@pytest.mark.parametrize("how", ["import", "{}", "dict(keep_freed_buffers=False)"])
def test_malloc_is_left_alone_unless_asked(how):
    faults, done = run(how)
    assert done == "None"
    if GLIBC:
        # glibc trims the freed buffers and faults them in again at every round: the
        # cost the opt-in removes (and proof that the test below can fail).
        assert faults > PAGES


@pytest.mark.parametrize("how", ["function", "dict(keep_freed_buffers=True)"])
def test_opt_in_reuses_freed_buffers(how):
    faults, done = run(how)
    # On other C libraries keep_freed_buffers() changes nothing and says so.
    assert done == str(GLIBC)
    if GLIBC:
        assert faults < PAGES / 20
