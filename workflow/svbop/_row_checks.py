"""Per-row side information given beside the scores: likelihood-ratio weights (weighted conformal
sets under covariate shift) and group indicator columns (coverage over overlapping groups).

A low layer (imports only :mod:`svbop._arrays`): the datasets' containers check these arrays when a
dataset is made, and the conformal predictors when they are fitted, with the same one-line errors.
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_group_columns", "check_labels", "check_weights"]


def check_weights(weights, n: int, name: str = "weights", rows_of: str = "P") -> np.ndarray:
    """``weights`` as ``n`` finite, non-negative float64 likelihood ratios, or a one-line ValueError."""
    from ._arrays import as_host_array

    w = as_host_array(weights, name, what="weights (one non-negative likelihood ratio per row)")
    if w.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of weights (one per row), got shape {w.shape}")
    if w.size != n:
        raise ValueError(f"{name} has {w.size} weights but {rows_of} has {n} rows")
    if w.dtype.kind not in "iuf" or w.dtype == bool:
        raise ValueError(f"{name} must hold numbers (likelihood ratios), got dtype {w.dtype}")
    w = w.astype(np.float64)
    bad = np.flatnonzero(~(np.isfinite(w) & (w >= 0)))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] = {float(w[bad[0]])!r}: a weight must be finite and >= 0")
    return w


def check_group_columns(Phi, n: int, name: str = "Phi", rows_of: str = "P") -> np.ndarray:
    """``Phi`` as an ``(n, d)`` boolean array of group indicators (0/1 or booleans), or a one-line
    ValueError naming ``name``."""
    from ._arrays import as_host_array

    A = as_host_array(Phi, name, what="group indicator columns")
    if A.ndim == 1:
        A = A[:, None]
    if A.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of group indicators (one column per group), got shape {A.shape}")
    if A.shape[0] != n:
        raise ValueError(f"{name} has {A.shape[0]} rows but {rows_of} has {n}")
    if A.dtype != bool:
        if A.dtype.kind not in "iuf" or not np.all((A == 0) | (A == 1)):
            bad = np.argwhere(~((A == 0) | (A == 1))) if A.dtype.kind in "iuf" else None
            where = (f" (row {bad[0][0]}, column {bad[0][1]}: {A[tuple(bad[0])].item()!r})"
                     if bad is not None and bad.size else f" (dtype {A.dtype})")
            raise ValueError(f"{name} must hold group indicators, 0 or 1{where}")
        A = A.astype(bool)
    return A


def check_labels(y, shape: tuple[int, int] | None = None, name: str = "y") -> np.ndarray:
    """Validate integer class labels; ``shape`` is ``(n_samples, n_classes)`` to match.

    ``y`` may be a numpy array, a torch tensor (any device), a pandas Series, or anything else
    :func:`svbop._arrays.as_host_array` reads; integral floats are accepted.
    """
    from ._arrays import as_host_array

    arr = as_host_array(y, name, what="integer class indices")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of class indices, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name} must hold integer class indices, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if shape is not None:
        n, K = shape
        if arr.size != n:
            raise ValueError(f"{name} has {arr.size} labels but there are {n} samples")
        bad = np.flatnonzero((arr < 0) | (arr >= K))
        if bad.size:
            raise ValueError(f"{name}[{bad[0]}] = {arr[bad[0]]} is not a class index in 0..{K - 1}")
    return arr
