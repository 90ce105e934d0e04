"""svbop._memory: freed heap memory and pages read from mapped files are handed back (issue 49)."""

import mmap
import sys

import numpy as np
import pytest

from svbop._memory import FileMapping, file_mapped, release_file_pages, release_free_memory

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps (Linux)")


def _rss_kb_of_mapping(address: int) -> int:
    """Resident kB of the mapping of this process that starts at ``address`` (/proc/self/smaps)."""
    with open("/proc/self/smaps") as fh:
        lines = fh.read().splitlines()
    for i, line in enumerate(lines):
        head = line.split()[0]
        if "-" in head and int(head.split("-")[0], 16) == address:
            for follow in lines[i + 1:]:
                if follow.startswith("Rss:"):
                    return int(follow.split()[1])
    raise AssertionError(f"no mapping at {address:#x}")


@linux
def test_pages_read_from_a_read_only_file_mapping_are_let_go_and_read_again(tmp_path):
    path = tmp_path / "w.bin"
    values = np.arange(4 << 20, dtype=np.float64)  # 32 MB
    values.tofile(path)
    with open(path, "rb") as fh:
        buffer = FileMapping(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    arr = np.ndarray(values.shape, dtype=values.dtype, buffer=buffer)
    address = arr.ctypes.data
    assert arr.sum() == values.sum()  # every page read
    assert _rss_kb_of_mapping(address) > 30_000
    assert release_file_pages(arr) == 0  # writable: it may hold writes, so it is left alone
    arr.flags.writeable = False
    assert file_mapped(arr[10:]) and release_file_pages(arr[10:], arr) == 1  # views find it; once
    assert _rss_kb_of_mapping(address) < 1_000
    np.testing.assert_array_equal(arr[::4096], values[::4096])  # read again from the file


def test_anonymous_memory_is_never_released():
    anonymous = mmap.mmap(-1, 1 << 20)
    arr = np.frombuffer(anonymous, dtype=np.uint8)
    arr.flags.writeable = False
    assert not file_mapped(arr, np.zeros(3))
    assert release_file_pages(arr, np.zeros(3)) == 0


def _vm_rss_kb() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


@linux
def test_free_heap_memory_is_returned_on_glibc():
    """Freed blocks below malloc's mmap threshold stay in the heap (resident) until trimmed."""
    import platform
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("malloc_trim is glibc's")
    release_free_memory()
    blocks = [np.ones(8000) for _ in range(4000)]  # 64 kB each, from the heap: 256 MB
    del blocks[::2]  # holes between live blocks: free() cannot give them back by itself
    before = _vm_rss_kb()
    assert release_free_memory()
    assert before - _vm_rss_kb() > 60_000  # most of the 128 MB of holes
    assert sum(b.sum() for b in blocks) == 8000 * 2000  # the live blocks are intact
