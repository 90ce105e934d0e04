"""Compiled kernel of :func:`svbop.conformal.pvalues.online_p_values`: for each row of a stream,
how many earlier rows have a larger score and how many an equal one (a Fenwick tree over the
scores' dense ranks, ``O(n log n)``)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def online_counts(rank, m):
    """``gt[t] = #{i < t : rank[i] > rank[t]}`` and ``eq[t] = #{i < t : rank[i] == rank[t]}``
    for dense ranks ``0 <= rank < m``."""
    n = rank.size
    tree = np.zeros(m + 1, dtype=np.int64)  # counts of the ranks seen, 1-based
    seen = np.zeros(m, dtype=np.int64)
    gt = np.empty(n, dtype=np.float64)
    eq = np.empty(n, dtype=np.float64)
    for t in range(n):
        r = rank[t]
        le = 0  # earlier rows of rank <= r
        i = r + 1
        while i > 0:
            le += tree[i]
            i -= i & (-i)
        gt[t] = t - le
        eq[t] = seen[r]
        seen[r] += 1
        i = r + 1
        while i <= m:
            tree[i] += 1
            i += i & (-i)
    return gt, eq
