"""Compiled kernels of the ranked scores: the set of a row as a boolean mask, and a mask as sets in
ranked order.

Every score of :data:`svbop.conformal.scores.RANKED_SCORES` is non-decreasing along the ranking of
a row (classes by decreasing normalised probability, ties by class index), so the set
``{c : s(x, c) <= q_c}`` lies within the prefix of ranks whose score is at most ``max_c q_c``.  The
kernel walks the ranking only that far: the first ranks by selection (one pass over the row per
rank, no sort: sets are usually a few classes), and the rest, if the walk goes on, after one
stable sort of the row.  Scores are the same float64 operations, in the same order, as
:func:`svbop.conformal.scores._ranked_scores` (a sequential cumulative sum along the ranking).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_JIT = {"nogil": True, "cache": True}

#: Integer codes of the scores in the kernels.
LAC, APS, RAPS, SAPS, TOPK, MARGIN = range(6)
CODES = {"lac": LAC, "aps": APS, "raps": RAPS, "saps": SAPS, "topk": TOPK, "margin": MARGIN}

#: Ranks found by selection before the row is sorted once.
_SELECT = 16


@njit(**_JIT)
def _score(code, o, v, cum, v1, v2, u, k_reg, lam):
    """The score of the class of rank ``o`` (1-based) of value ``v``; ``cum`` the mass of ranks
    ``1..o``, ``v1``/``v2`` the two largest values, ``u`` the row's uniform (0 for deterministic
    APS/RAPS/top-k, 1 for deterministic SAPS)."""
    if code == LAC:
        return 1.0 - v
    if code == APS:
        return cum - u * v
    if code == RAPS:
        return (cum - u * v) + lam * max(0, o - k_reg)
    if code == SAPS:
        if o == 1:
            return u * v1
        return v1 + lam * ((o - 2) + u)
    if code == TOPK:  # u = 0: deterministic; randomised: o - u (TorchCP's TOPK)
        return float(o) - u
    # MARGIN: the largest other probability minus the class's own
    if o == 1:
        return v2 - v1
    return v1 - v


@njit(**_JIT)
def ranked_mask(Xn, code, q_row, q_class, k_class, k_reg, lam, U, top1, mask):
    """``mask[i, c] = s(x_i, c) <= min(q_row[i], q_class[c])`` for the rows of ``Xn`` (normalised,
    float64); ``q_class`` of size 0: no per-class thresholds.  ``k_class`` (size ``K``, or 0 for
    none): a class is kept only at a rank ``o(c) <= k_class[c]`` (RC3P's rank limits).  A row with
    no class kept gets its top-ranked class when ``top1``.  ``q_row`` already holds the tolerance
    of the comparison."""
    n, K = Xn.shape
    per_class = q_class.size == K
    ranked = k_class.size == K
    k_max = K
    if ranked:
        k_max = 0
        for c in range(K):
            if k_class[c] > k_max:
                k_max = k_class[c]
    for i in range(n):
        row = Xn[i]
        u = U[i]
        qmax = q_row[i]
        if per_class:
            qc = -np.inf
            for c in range(K):
                if q_class[c] > qc:
                    qc = q_class[c]
            qmax = min(qmax, qc)
        j1 = 0
        for c in range(1, K):
            if row[c] > row[j1]:
                j1 = c
        v1 = row[j1]
        v2 = 0.0
        if code == MARGIN:
            for c in range(K):
                if c != j1 and row[c] > v2:
                    v2 = row[c]
        lastv, lastj = np.inf, -1
        cum = 0.0
        kept = 0
        order = np.empty(0, dtype=np.int64)
        for o in range(1, k_max + 1):
            if o <= _SELECT:  # the next class of the ranking: the largest value after (lastv, lastj)
                j = -1
                for c in range(K):
                    x = row[c]
                    if x < lastv or (x == lastv and c > lastj):
                        if j < 0 or x > row[j]:
                            j = c
            else:
                if order.size == 0:
                    order = np.argsort(-row, kind="mergesort")  # decreasing, ties by class index
                j = order[o - 1]
            v = row[j]
            cum += v
            s = _score(code, o, v, cum, v1, v2, u, k_reg, lam)
            if s > qmax:
                break
            if not per_class or (s <= min(q_row[i], q_class[j]) and (not ranked or o <= k_class[j])):
                mask[i, j] = True
                kept += 1
            lastv, lastj = v, j
        if kept == 0 and top1:
            mask[i, j1] = True


@njit(**_JIT)
def margin_mask(Xn, q_row, q_class, top1, mask):
    """The margin sets ``{c : s(x_i, c) <= min(q_row[i], q_class[c])}`` without a ranking: the
    score of the top class is ``v2 - v1``, of any other ``v1 - v`` (``v1``, ``v2`` the row's two
    largest values), so one pass finds ``v1`` and ``v2`` and a second compares (the same float64
    operations as :func:`_score`).  ``q_class`` of size 0: no per-class thresholds."""
    n, K = Xn.shape
    per_class = q_class.size == K
    for i in range(n):
        row = Xn[i]
        j1 = 0
        v1 = row[0]
        v2 = 0.0
        for c in range(1, K):
            x = row[c]
            if x > v1:
                v2 = v1
                v1 = x
                j1 = c
            elif x > v2:
                v2 = x
        q = q_row[i]
        kept = 0
        for c in range(K):
            s = (v2 - v1) if c == j1 else (v1 - row[c])
            qc = min(q, q_class[c]) if per_class else q
            if s <= qc:
                mask[i, c] = True
                kept += 1
        if kept == 0 and top1:
            mask[i, j1] = True


@njit(**_JIT)
def mask_sets(mask, X):
    """The classes of each row of ``mask`` in ranked order of ``X`` (decreasing, ties by class
    index): the ``indices`` and ``sizes`` of a :class:`svbop.SetPredictions`."""
    n, K = mask.shape
    sizes = np.zeros(n, dtype=np.int64)
    for i in range(n):
        sizes[i] = mask[i].sum()
    indices = np.empty(sizes.sum(), dtype=np.int64)
    at = 0
    for i in range(n):
        m = sizes[i]
        if m == 0:
            continue
        ids = np.empty(m, dtype=np.int64)
        vals = np.empty(m)
        k = 0
        for c in range(K):
            if mask[i, c]:
                ids[k] = c
                vals[k] = -X[i, c]
                k += 1
        order = np.argsort(vals, kind="mergesort")
        for k in range(m):
            indices[at + k] = ids[order[k]]
        at += m
    return indices, sizes
