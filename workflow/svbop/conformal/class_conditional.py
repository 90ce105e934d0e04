"""Class-conditional (Mondrian by the label) calibration: one threshold ``q_c`` per class (the
filter that keeps, of each ranked prefix, the classes within their own class's threshold is
:func:`svbop.conformal.scores._filter_per_class`, beside the sets it filters)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


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


