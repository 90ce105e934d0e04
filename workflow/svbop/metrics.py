"""Evaluation of set-valued predictions: utility, recall, set size, top-1 accuracy.

Per-sample functions return arrays of shape (n,); :func:`mean_scores` returns the means the way
the paper's tables report them (percentages, mean set size).
"""

from __future__ import annotations

import numpy as np

from .sets import SetPredictions
from .utilities import Utility, utility

__all__ = ["check_labels", "set_utility", "recall", "set_sizes", "top1_accuracy", "mean_scores", "set_agreement"]


def check_labels(y, shape: tuple[int, int] | None = None, name: str = "y") -> np.ndarray:
    """Validate integer class labels; ``shape`` is ``(n_samples, n_classes)`` to match."""
    arr = np.asarray(y)
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


def _as_sets(sets, n_classes: int | None = None) -> SetPredictions:
    if isinstance(sets, SetPredictions):
        return sets
    sets = list(sets)
    if n_classes is None:
        n_classes = 1 + max((int(np.max(s)) for s in sets if len(s)), default=0)
    return SetPredictions.from_sets(sets, n_classes)


def set_utility(sets, y, u: Utility | str) -> np.ndarray:
    """Per-sample utility ``u(y_i, Y_i) = g(|Y_i|) [y_i in Y_i]`` (0 for an empty set)."""
    sets = _as_sets(sets)
    y = check_labels(y, (len(sets), sets.n_classes))
    g = utility(u).values(sets.n_classes)
    sizes = sets.sizes
    gs = np.where(sizes > 0, g[np.maximum(sizes, 1) - 1], 0.0)
    return np.where(sets.contains(y), gs, 0.0)


def recall(sets, y) -> np.ndarray:
    """Per-sample recall indicator ``[y_i in Y_i]``."""
    sets = _as_sets(sets)
    return sets.contains(check_labels(y, (len(sets), sets.n_classes)))


def set_sizes(sets) -> np.ndarray:
    """Per-sample set size ``|Y_i|``."""
    return _as_sets(sets).sizes


def set_agreement(a, b) -> float:
    """Fraction of rows whose two sets hold the same classes (in any order).

    Parameters
    ----------
    a, b : SetPredictions or sequence of int arrays
        Sets for the same rows, e.g. SVBOP-HSG's and SVBOP-Full's under one utility.

    Returns
    -------
    float
        In [0, 1]; 1.0 for zero rows.

    Raises
    ------
    ValueError
        The two hold different numbers of rows, or are SetPredictions over different ``K``.
    """
    if isinstance(a, SetPredictions) and isinstance(b, SetPredictions) and a.n_classes != b.n_classes:
        raise ValueError(f"the two set predictions are over {a.n_classes} and {b.n_classes} classes")
    a, b = _as_sets(a), _as_sets(b)
    if len(a) != len(b):
        raise ValueError(f"the two set predictions have {len(a)} and {len(b)} rows")
    if len(a) == 0:
        return 1.0
    same_size = a.sizes == b.sizes
    # Sort each row's classes (rows as the primary key) and compare entry by entry, on the rows of
    # equal size only, so that the entries of a row line up in both.
    rows = np.flatnonzero(same_size)
    a, b = a.take(rows), b.take(rows)
    row_ids = a.row_ids
    sorted_a = a.indices[np.lexsort((a.indices, row_ids))]
    sorted_b = b.indices[np.lexsort((b.indices, row_ids))]
    mismatched = np.unique(row_ids[sorted_a != sorted_b])
    return float((rows.size - mismatched.size) / same_size.size)


def top1_accuracy(P, y) -> float:
    """Fraction of rows whose most probable class (lowest index among ties) is ``y``."""
    P = np.asarray(P)
    if P.ndim != 2:
        raise ValueError(f"P must be 2-D (n_samples, n_classes), got shape {P.shape}")
    y = check_labels(y, P.shape)
    return float(np.mean(P.argmax(axis=1) == y))


def mean_scores(sets, y, utilities=(), P=None) -> dict[str, float]:
    """Means as in the paper's tables.

    Parameters
    ----------
    sets : SetPredictions or sequence of int arrays
    y : array of int, shape (n,)
    utilities : iterable of Utility or str
        Each adds ``"<label>_pct"``: mean utility in percent (labels as in the paper's CSVs,
        e.g. ``fbeta_1``, ``credal_2.2_1.2``).
    P : array, optional
        Probabilities, for ``top1_pct``; without it top-1 is the first class of each set.

    Returns
    -------
    dict
        ``recall_pct``, ``mean_size``, ``top1_pct``, ``n``, and one ``<label>_pct`` per utility.
    """
    sets = _as_sets(sets)
    y = check_labels(y, (len(sets), sets.n_classes))
    out: dict[str, float] = {"n": float(len(sets))}
    out["recall_pct"] = 100.0 * float(recall(sets, y).mean())
    out["mean_size"] = float(sets.sizes.mean())
    if P is not None:
        out["top1_pct"] = 100.0 * top1_accuracy(P, y)
    else:
        first = np.full(len(sets), -1)  # an empty set has no top-1 class
        nonempty = sets.sizes > 0
        first[nonempty] = sets.indices[sets.indptr[:-1][nonempty]]
        out["top1_pct"] = 100.0 * float(np.mean(first == y))
    for spec in utilities:
        u = utility(spec)
        out[f"{u.label}_pct"] = 100.0 * float(set_utility(sets, y, u).mean())
    return out
