"""Class-conditional (Mondrian by the label) calibration: one threshold ``q_c`` per class, and the
filter that keeps, of each ranked prefix, the classes within their own class's threshold."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .scores import _ranked_scores


def _class_quantiles(s: np.ndarray, y: np.ndarray, K: int, eps: Fraction) -> np.ndarray:
    """``q_c``: the conformal quantile of the scores ``s`` of the calibration rows with ``y == c``,
    for ``c < K`` (``inf`` for a class with too few rows).  One sort of all the scores by class,
    whatever ``K`` (also the per-group quantiles of Mondrian calibration: 10^5 groups cost one sort)."""
    counts = np.bincount(y, minlength=K)
    order = np.lexsort((s, y))  # by class, then by score
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    sizes, inverse = np.unique(counts, return_inverse=True)
    # k = ceil((n+1)(1-eps)) in exact arithmetic, once per distinct class size
    k = np.array([math.ceil((n + 1) * (1 - eps)) for n in sizes.tolist()], dtype=np.int64)[inverse.reshape(-1)]
    q = np.full(K, np.inf)
    finite = k <= counts
    q[finite] = s[order[starts[finite] + k[finite] - 1]]
    return q


def _filter_per_class(Xn, ind, ptr, q, score, k_reg, lam, empty):
    """Keep the classes of each ranked prefix whose score is within their own class's threshold."""
    r = Xn.shape[0]
    size = np.diff(ptr)
    W = int(size.max()) if r else 0
    pad = np.arange(W) < size[:, None]
    C = np.zeros((r, W), dtype=np.int64)
    C[pad] = ind
    V = np.where(pad, Xn[np.arange(r)[:, None], C], 0.0)
    keep = pad & (_ranked_scores(V, score, k_reg, lam) <= q[C])
    if empty == "top1":
        none = ~keep.any(axis=1)
        if none.any():  # the most probable class (lowest index among ties), whatever its threshold
            top = np.argmax(Xn[none], axis=1)
            if W == 0:
                C, keep = np.zeros((r, 1), dtype=np.int64), np.zeros((r, 1), dtype=bool)
            C[none, 0] = top
            keep[none, 0] = True
    new_size = keep.sum(axis=1)
    return C[keep], np.concatenate([[0], np.cumsum(new_size)])
