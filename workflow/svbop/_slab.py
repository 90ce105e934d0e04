"""Compiled kernel of the worst-slab coverage (:func:`svbop.metrics.worst_slab_coverage`): along
one direction, the worst window of rows sorted by projection, exactly as TorchCP 1.2.1's
``calWSC.wsc_v`` (Romano, Sesia and Candès's reference code) finds it, in ``O(n)`` per
Dinkelbach step instead of its ``O(n**2)`` scan.

TorchCP's scan, with ``c`` the 0/1 coverage of the rows in increasing projection, ``r =
int(round(delta n))`` and ``a_max = int(round((1 - delta) n))`` (numpy's rounding, half to even):
for every start ``a < a_max`` the means of ``c[a..b]`` over the ends ``b >= min(a + r, n - 1)``,
the first end of the smallest; the first start whose smallest mean is below the running minimum
(which starts at 1) wins.  So the result is the smallest mean ``m*`` over those windows, its first
start and that start's first end, or ``(1, 0, n - 1)`` when ``m* = 1``.  Two windows' means, as
float64 quotients of integers at most ``n``, are equal exactly when the fractions are (different
fractions differ by at least ``1/n**2``, far above the rounding), so comparing exact fractions
finds TorchCP's window.

``m* = p/q`` is found by Dinkelbach's iteration on integers: for the current mean ``p/q`` the
smallest ``T[e] - T[a]`` with ``T[j] = q S[j] - p j`` (``S`` the prefix sums of ``c``) over the
allowed ``(a, e = b + 1)``, by one suffix minimum; a negative value gives a window of smaller mean,
which becomes ``p/q``; zero proves ``p/q`` the minimum.  The values stay below ``n**2`` (int64
up to ``n`` of three billion).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["worst_window"]


@njit(nogil=True, cache=True)
def worst_window(c, r, a_max):
    """``(p, q, a, b)``: the worst window ``c[a..b]`` (inclusive) of TorchCP's scan and its mean
    ``p / q`` (``(1, 1, 0, n - 1)`` when no window has a mean below 1).  ``c``: int64 0/1 in
    projection order; ``r``, ``a_max``: TorchCP's rounded ``delta n`` and ``(1 - delta) n``."""
    n = c.size
    if n == 0 or a_max <= 0:
        return 1, 1, 0, n - 1
    S = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        S[i + 1] = S[i] + c[i]
    a_last = min(a_max, n) - 1
    p = S[n]  # the whole range (a = 0, b = n - 1) is always allowed
    q = n
    T = np.empty(n + 1, dtype=np.int64)
    suf = np.empty(n + 2, dtype=np.int64)
    sufe = np.empty(n + 2, dtype=np.int64)
    while True:
        for j in range(n + 1):
            T[j] = q * S[j] - p * j
        suf[n + 1] = np.iinfo(np.int64).max
        sufe[n + 1] = n + 1
        for j in range(n, -1, -1):
            if T[j] <= suf[j + 1]:  # ties: the earlier end
                suf[j] = T[j]
                sufe[j] = j
            else:
                suf[j] = suf[j + 1]
                sufe[j] = sufe[j + 1]
        best = np.iinfo(np.int64).max
        ba = 0
        be = n
        for a in range(a_last + 1):
            e0 = min(a + r, n - 1) + 1
            v = suf[e0] - T[a]
            if v < best:
                best = v
                ba = a
                be = sufe[e0]
        if best >= 0:
            break
        p = S[be] - S[ba]
        q = be - ba
    if p == q:  # every allowed window fully covered: TorchCP keeps its start (1, 0, n - 1)
        return 1, 1, 0, n - 1
    # the first start whose best window reaches p/q, and its first end
    for a in range(a_last + 1):
        e0 = min(a + r, n - 1) + 1
        if suf[e0] - T[a] == 0:
            for e in range(e0, n + 1):
                if T[e] == T[a]:
                    return p, q, a, e - 1
    return p, q, 0, n - 1  # not reached: the loop above ends at a window of mean p/q
