"""Structural checks of sparse feature matrices: the bottom layer (imports nothing of svbop).

scipy accepts a CSR matrix whose column indices run past its width (it checks them only in
``check_format(full_check=True)``), and its own kernels, like svbop's compiled ones, index with
them unchecked: a column just past ``D`` reads the next row's weights (a silently wrong score),
one far past it reads or writes outside the array (a crash).  :func:`check_sparse_structure` is
the one O(nnz) check every public entry that takes sparse feature rows runs, through
:func:`svbop.linear._as_features` / :func:`svbop.linear._as_sorted_csr` or directly
(:meth:`svbop.index.HNSWIndex.query`), before any kernel or scipy conversion sees the matrix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_sparse_structure"]


def _bad_index(name: str, what: str, values: np.ndarray, bound: int) -> ValueError:
    values = np.asarray(values)
    outside = (values < 0) | (values >= bound)
    where = int(np.flatnonzero(outside)[0])
    return ValueError(f"{name}: {what} {int(values[where])} at position {where} is outside 0..{bound - 1} "
                      f"(the matrix has {bound} {'columns' if what.startswith('column') else 'rows'}); "
                      f"{int(np.count_nonzero(outside))} indices are out of range")


def _check_compressed(X: Any, name: str, n_major: int, n_minor: int, minor: str) -> None:
    indptr, indices = np.asarray(X.indptr), np.asarray(X.indices)
    n_data = len(X.data)
    for what, arr in (("indptr", indptr), ("indices", indices)):
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name}: its {what} must be a 1-d integer array, got {arr.dtype} of shape {arr.shape}")
    if indptr.size != n_major + 1:
        raise ValueError(f"{name}: indptr has {indptr.size} entries, expected {n_major + 1} for shape {X.shape}")
    if indptr.size and indptr[0] != 0:
        raise ValueError(f"{name}: indptr starts at {int(indptr[0])}, not 0")
    if indptr.size > 1 and (np.diff(indptr) < 0).any():
        raise ValueError(f"{name}: indptr decreases (a row of negative length)")
    end = int(indptr[-1]) if indptr.size else 0
    if end > indices.size or end > n_data:
        raise ValueError(f"{name}: indptr ends at {end}, past its {indices.size} indices and {n_data} values")
    used = indices[:end]
    if used.size and (int(used.min()) < 0 or int(used.max()) >= n_minor):
        raise _bad_index(name, minor, used, n_minor)


def check_sparse_structure(X: Any, name: str = "X") -> None:
    """Raise ValueError naming ``name`` unless the sparse matrix ``X`` is structurally sound.

    For CSR (and CSC, BSR): ``indptr`` of length ``rows + 1`` starting at 0 and non-decreasing,
    ending within ``indices`` and ``data``, and every used index in ``0..width - 1`` (sorted or
    not, duplicates allowed); for COO: every row and column index inside the shape.  O(nnz);
    other formats (DOK, LIL, DIA) are kept in bounds by scipy itself.  Nothing is copied.

    Parameters
    ----------
    X : scipy sparse matrix or array
    name : str
        The argument's name for the message.
    """
    n_rows, n_cols = X.shape
    fmt = X.format
    if fmt == "csr":
        _check_compressed(X, name, n_rows, n_cols, "column index")
    elif fmt == "csc":
        _check_compressed(X, name, n_cols, n_rows, "row index")
    elif fmt == "bsr":
        r, c = X.blocksize
        if r < 1 or c < 1 or n_rows % r or n_cols % c:
            raise ValueError(f"{name}: block size {X.blocksize} does not divide its shape {X.shape}")
        _check_compressed(X, name, n_rows // r, n_cols // c, "column index")
    elif fmt == "coo":
        coords = getattr(X, "coords", None) or (X.row, X.col)
        for what, arr, bound in (("row index", coords[0], n_rows), ("column index", coords[1], n_cols)):
            arr = np.asarray(arr)
            if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= bound):
                raise _bad_index(name, what, arr, bound)
