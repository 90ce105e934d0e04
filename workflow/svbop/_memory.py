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
import ctypes.util
import logging

logger = logging.getLogger(__name__)

_TRIM = None


def _malloc_trim():
    global _TRIM
    if _TRIM is None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _TRIM = libc.malloc_trim
            _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to ask
            _TRIM = False
    return _TRIM


def release_free_memory() -> bool:
    """Return the heap's free memory to the operating system; True when the C library did."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim else False
