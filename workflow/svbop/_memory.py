"""Handing freed memory back to the operating system.

glibc's ``malloc`` keeps freed blocks below its mmap threshold (which grows to 32 MB as large arrays
are freed) inside the process heap for reuse.  After a step that made and freed many such blocks (the
LIBSVM reader's per-block arrays, the 2-means tree's per-node copies, the node classifiers' weights
as they arrive) gigabytes of freed memory can stay resident: they count in the process's RSS, and a
forked worker inherits them.  :func:`release_free_memory` asks glibc to return them
(``malloc_trim(0)``, as Dask's workers do); elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import mmap

_TRIM = None


def _malloc_trim():
    global _TRIM
    if _TRIM is None:
        try:  # the C library already loaded (ctypes.util.find_library would fork a helper process)
            _TRIM = ctypes.CDLL(None).malloc_trim
            _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to ask
            _TRIM = False
    return _TRIM


def release_free_memory() -> bool:
    """Return the heap's free memory to the operating system; True when the C library did."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim else False


class FileMapping(mmap.mmap):
    """A private (copy-on-write) mapping of a file that svbop made to read arrays in place: the only
    kind of memory :func:`release_file_pages` lets go of (its pages can always be read again)."""


def _releasable(arr) -> FileMapping | None:
    """The :class:`FileMapping` under a read-only array (a writable one may hold writes that dropping
    its pages would undo), else None."""
    if getattr(getattr(arr, "flags", None), "writeable", True):
        return None
    base = arr
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    return base if isinstance(base, FileMapping) and not base.closed else None


def file_mapped(*arrays) -> bool:
    """Whether some of ``arrays`` are read-only arrays over a :class:`FileMapping` (pages that
    :func:`release_file_pages` can let go of)."""
    return any(_releasable(arr) is not None for arr in arrays)


def release_file_pages(*arrays) -> int:
    """Drop from this process the pages it has read of the files behind ``arrays`` (arrays over a
    :class:`FileMapping`, or views of them; others are left alone): they stay in the system's page
    cache and are read back on the next access, but no longer count in this process's resident
    memory.  Returns how many mappings were released.

    Only read-only arrays are considered (``arr.flags.writeable`` False, as :meth:`svbop.trees.TreeModel.load`
    leaves a model's weights): dropping a written page of a private mapping would give the file's
    bytes back.
    """
    mappings = {id(m): m for m in map(_releasable, arrays) if m is not None}
    for mapping in mappings.values():
        mapping.madvise(mmap.MADV_DONTNEED)
    return len(mappings)
