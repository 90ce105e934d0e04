"""Compiled kernel behind :mod:`svbop.conformal.lazy`: the ranked scores along ragged rows (each row
its classes in decreasing probability, as a tree search or top-k outputs give them).

The arithmetic is :func:`svbop.conformal.scores._ranked_scores`' for one row, in the same order
(the cumulative sum sequential from the row's first class), so a score computed here equals the
dense path's on the same normalised values.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Score codes (the order of :data:`svbop.conformal.scores.RANKED_SCORES`).
CODES = {"lac": 0, "aps": 1, "raps": 2, "saps": 3, "topk": 4, "margin": 5}


@njit(nogil=True, cache=True)
def ragged_scores(indptr, V, code, k_reg, lam, U, randomized, out, cum_last):
    """``out[e]``: the score of entry ``e`` (rank ``e - indptr[i] + 1`` of row ``i``), and
    ``cum_last[i]`` the row's sequential sum of ``V`` (the APS mass of all its entries).

    ``U`` one uniform per row (used when ``randomized``; SAPS without it uses 1, APS/RAPS 0)."""
    n = indptr.size - 1
    for i in range(n):
        a = indptr[i]
        b = indptr[i + 1]
        u = U[i] if randomized else (1.0 if code == 3 else 0.0)
        cum = 0.0
        v0 = V[a] if b > a else 0.0
        v1 = V[a + 1] if b > a + 1 else 0.0
        for e in range(a, b):
            o = e - a + 1
            v = V[e]
            cum += v
            if code == 0:
                out[e] = 1.0 - v
            elif code == 4:
                out[e] = o - u if randomized else float(o)
            elif code == 5:
                out[e] = (v1 - v0) if o == 1 else (v0 - v)
            elif code == 3:
                out[e] = u * v0 if o == 1 else v0 + lam * ((o - 2) + u)
            else:
                s = cum - u * v if randomized else cum
                if code == 2:
                    s = s + lam * max(0, o - k_reg)
                out[e] = s
        cum_last[i] = cum
