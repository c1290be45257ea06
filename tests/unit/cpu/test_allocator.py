"""The trainer's allocator setting (quadrants/cpu/allocator.py), on the real glibc.

Each case runs in a fresh interpreter (mallopt changes the whole process). What is measured: the
page faults of allocating a 48 MiB block with glibc's malloc, writing every byte and freeing it,
three times. A 4 KiB page is faulted on its first write, so a fresh block costs 12,288 faults and a
reused one none. 48 MiB is over the 32 MiB up to which glibc's own mmap threshold adapts, so by
default every such block is mapped afresh.
"""

import json
import platform
import subprocess
import sys

import pytest

from quadrants.cpu.allocator import MAX_RETAIN_MB, retain_freed_memory

PROBE = """
import ctypes, json, resource, sys
from quadrants.cpu.allocator import retain_freed_memory
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
taken = retain_freed_memory(int(sys.argv[1]))
size = 48 << 20
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = libc.malloc(size)
    libc.memset(block, 1, size)
    libc.free(block)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"taken": taken, "faults": faults}))
"""

glibc_only = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's"
)


def _probe(retain_mb: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(retain_mb)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.subprocess
@glibc_only
def test_a_freed_block_is_reused_without_new_page_faults():
    """48 MiB = 12,288 pages: the first write faults them in (at least 12,000), the second and
    third reuse them (a few faults at most, for the interpreter's own small allocations)."""
    out = _probe(64)
    assert out["taken"] is True
    first, second, third = out["faults"]
    assert first >= 12000
    assert second < 100 and third < 100


@pytest.mark.subprocess
@glibc_only
def test_off_leaves_glibc_defaults_which_fault_every_time():
    """The contrast that makes the setting worth having: at 0 nothing is changed, and each fresh
    48 MiB block is mapped anew and faulted in again."""
    out = _probe(0)
    assert out["taken"] is False
    assert all(faults >= 12000 for faults in out["faults"])


def test_zero_changes_nothing_and_too_large_is_refused():
    assert retain_freed_memory(0) is False
    with pytest.raises(ValueError, match=str(MAX_RETAIN_MB)):
        retain_freed_memory(MAX_RETAIN_MB + 1)
