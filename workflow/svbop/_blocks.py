"""Passes over matrices larger than memory, in blocks of rows, with resident memory bounded by a block.

A memory-mapped matrix (``np.load(path, mmap_mode="r")``, ``np.memmap``, or the mapped members of
:class:`svbop.io.NpzReader` and :func:`svbop.io.load_npy`) costs no memory until it is read, but
every page read stays mapped in the process, and counts in its resident set (RSS), until the
mapping is closed: one pass over a 4 GB file leaves 4 GB resident although the data sit in the
page cache.  The passes of the library and the pipeline over the rows of a score matrix therefore
go through :func:`row_blocks`, which hands out one block of rows at a time and afterwards gives its
pages back to the kernel (:func:`release_rows`): the process then holds about one block of the
matrix, whatever its number of rows.

Pages are given back without losing a write: ``MADV_DONTNEED`` for read-only and shared mappings
(the next read of a page finds it in the page cache, or the file); for private copy-on-write ones
(mode ``"c"``, the library's own readers) only for the pages never written, which
``/proc/self/pagemap`` tells apart (a written page is the process's own copy and stays), else
``MADV_PAGEOUT`` (which never drops a written page without swap).  Arrays that are not mapped are
left alone.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator

import numpy as np

__all__ = ["BLOCK_BYTES", "GATHER_IN_MEMORY_BYTES", "block_rows", "gather_rows", "mapping_of", "release_rows", "resident_bytes", "row_blocks"]

#: Bytes of the input matrix a pass holds at once (its blocks of rows).
BLOCK_BYTES = 64 * 1024 * 1024
_MADV_PAGEOUT = getattr(mmap, "MADV_PAGEOUT", 21)  # Linux >= 5.4; Python defines it from 3.12 only
_PAGE = mmap.PAGESIZE


def block_rows(n_cols: int, itemsize: int, block_bytes: int | None = None) -> int:
    """Rows per block: about ``block_bytes`` (default :data:`BLOCK_BYTES`) of a row-major matrix."""
    budget = BLOCK_BYTES if block_bytes is None else int(block_bytes)
    return max(1, budget // max(1, int(n_cols) * int(itemsize)))


def mapping_of(arr) -> tuple[mmap.mmap, int, bool] | None:
    """``(mapping, address of its first byte, private)`` of the memory map under ``arr``, or None.

    ``private`` is True for a copy-on-write mapping (``np.memmap`` mode ``"c"``, the library's own
    readers), False for a read-only or shared one.
    """
    mode = None
    base = arr
    for _ in range(64):  # views of views of a memmap: a short chain
        if isinstance(base, np.memmap) and mode is None:
            mode = base.mode
        if isinstance(base, mmap.mmap):
            break
        base = getattr(base, "base", None)
        if base is None:
            return None
    else:
        return None
    try:
        if len(base) == 0:
            return None
        view = memoryview(base)
        readonly = view.readonly
        start = np.frombuffer(view, dtype=np.uint8, count=1).ctypes.data
        view.release()
    except (ValueError, TypeError, BufferError):  # a closed mapping
        return None
    private = mode in ("c", "copyonwrite") or (mode is None and not readonly)
    return base, int(start), bool(private)


def release_rows(arr: np.ndarray, lo: int = 0, hi: int | None = None) -> None:
    """Give back to the kernel the resident pages of rows ``lo:hi`` of a mapped array (all its
    rows by default); nothing for an array that is not mapped.  No data are lost (module docstring)."""
    found = mapping_of(arr)
    if found is None or not isinstance(arr, np.ndarray) or arr.size == 0:
        return
    mm, start, private = found
    n = arr.shape[0] if arr.ndim else 1
    hi = n if hi is None else min(int(hi), n)
    lo = max(0, int(lo))
    if hi <= lo:
        return
    row_bytes = arr.strides[0] if arr.ndim else arr.itemsize
    first = arr.ctypes.data + lo * row_bytes - start
    last = arr.ctypes.data + (hi - 1) * row_bytes + (arr[0].nbytes if arr.ndim > 1 else arr.itemsize) - start
    if row_bytes < 0:
        first, last = last - row_bytes, first + row_bytes
    first = max(0, first // _PAGE * _PAGE)  # whole pages: the first page may hold the row before (no data lost)
    last = min(len(mm), -(-last // _PAGE) * _PAGE)
    if last <= first:
        return
    try:
        if not private:
            mm.madvise(mmap.MADV_DONTNEED, first, last - first)
            return
        runs = _unwritten_runs(start + first, (last - first) // _PAGE)
        if runs is None:  # no page map to read: pages out what the kernel can (never a written page)
            mm.madvise(_MADV_PAGEOUT, first, last - first)
            return
        for a, b in runs:  # a copy-on-write map: only the pages never written (still the file's)
            mm.madvise(mmap.MADV_DONTNEED, first + a * _PAGE, (b - a) * _PAGE)
    except (OSError, ValueError):  # an old kernel without MADV_PAGEOUT: the pages stay, as before
        pass


_PM_PRESENT, _PM_FILE = np.uint64(1 << 63), np.uint64(1 << 61)


def _unwritten_runs(address: int, pages: int) -> list[tuple[int, int]] | None:
    """Runs ``(first, end)`` of the ``pages`` pages from ``address`` that hold no private copy (not
    resident, or still the file's page), from ``/proc/self/pagemap``; None where it cannot be read."""
    try:
        with open("/proc/self/pagemap", "rb") as fh:
            fh.seek(address // _PAGE * 8)
            raw = fh.read(pages * 8)
    except OSError:
        return None
    if len(raw) != pages * 8:
        return None
    entries = np.frombuffer(raw, dtype=np.uint64)
    written = (entries & _PM_PRESENT).astype(bool) & ~(entries & _PM_FILE).astype(bool)
    if not written.any():
        return [(0, pages)]
    edges = np.flatnonzero(np.diff(np.concatenate([[True], written, [True]]).astype(np.int8)))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]) if b > a]


def row_blocks(arr, rows: int | None = None, *, block_bytes: int | None = None,
               index: np.ndarray | None = None) -> Iterator[tuple[int, int, np.ndarray]]:
    """``(lo, hi, block)`` over the rows of ``arr``, ``block`` being rows ``lo:hi`` (a view when
    ``arr`` is an array), each block's mapped pages given back once the caller asks for the next.

    With ``index`` (sorted row numbers), the blocks are ``arr[index[lo:hi]]`` (copies) and
    ``lo:hi`` count positions in ``index``.  ``rows`` fixes the rows per block (else
    :func:`block_rows` of ``block_bytes``).
    """
    n = arr.shape[0] if index is None else len(index)
    K = int(np.prod(arr.shape[1:])) if len(arr.shape) > 1 else 1
    step = int(rows) if rows is not None else block_rows(K, np.dtype(arr.dtype).itemsize, block_bytes)
    step = max(1, step)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        if index is None:
            yield lo, hi, arr[lo:hi]
            release_rows(arr, lo, hi)
        else:
            idx = index[lo:hi]
            yield lo, hi, arr[idx]
            if idx.size:
                release_rows(arr, int(idx[0]), int(idx[-1]) + 1)


def resident_bytes() -> int:
    """This process's resident set now (VmRSS), in bytes; 0 where ``/proc`` is absent."""
    try:
        with open(f"/proc/{os.getpid()}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


#: Rows gathered by :func:`gather_rows` up to this many bytes are copied into memory; beyond, into a
#: temporary file that is mapped.
GATHER_IN_MEMORY_BYTES = 256 * 1024 * 1024


def gather_rows(arr, index) -> np.ndarray:
    """``arr[index]`` for sorted row numbers ``index``, without holding more than a block of ``arr``.

    A run of consecutive rows is a view (no copy); otherwise a copy in memory up to
    :data:`GATHER_IN_MEMORY_BYTES`, beyond it a read-only map of a temporary file (removed from its
    folder at once) written block by block.
    """
    import tempfile

    index = np.asarray(index, dtype=np.int64)
    if index.size == 0:
        return np.asarray(arr[0:0])
    if index[-1] - index[0] + 1 == index.size and np.all(np.diff(index) == 1):
        return arr[int(index[0]): int(index[-1]) + 1]
    row_bytes = int(np.prod(arr.shape[1:])) * np.dtype(arr.dtype).itemsize
    if index.size * row_bytes <= GATHER_IN_MEMORY_BYTES:
        out = np.empty((index.size, *arr.shape[1:]), dtype=arr.dtype)
        for lo, hi, block in row_blocks(arr, index=index):
            out[lo:hi] = block
        return out
    with tempfile.TemporaryFile(prefix="svbop_rows_") as fh:
        for _, _, block in row_blocks(arr, index=index):
            fh.write(memoryview(np.ascontiguousarray(block).reshape(-1)).cast("B"))
        fh.flush()
        return np.memmap(fh, dtype=arr.dtype, mode="r", shape=(index.size, *arr.shape[1:]))
