"""Rank-calibrated class-conditional calibration (``class_conditional="rc3p"``).

Shi, Ghosh, Belkhouja, Doppa and Yan, "Conformal prediction for class-wise coverage via augmented
label rank calibration", NeurIPS 2024 (RC3P), as TorchCP 1.2.1's ``RC3PPredictor`` computes it
(their Option II), with the rank limit's miss bounded exactly (below).  Class-conditional sets
(one threshold ``q_c`` per class) are large when many classes' thresholds are loose; RC3P also gives each class ``c`` a *rank limit* ``k_c`` and keeps
``c`` in a set only when it is ranked at most ``k_c``-th:

``C(x) = {c : s(x, c) <= q_c and o(c) <= k_c}`` with ``o(c)`` the 1-based rank of ``c`` in the row
(decreasing probability, ties by class index).

From the ``n_c`` calibration rows of class ``c``, with ``o_i`` the rank of their label:

1. the class's top-k error ``e_c(k) = #{i : o_i > k} / n_c``; ``k_c`` is the smallest ``k`` with
   ``e_c(k) < epsilon`` (exact arithmetic), i.e. the ``(J_c+1)``-th largest rank, ``J_c =
   ceil(epsilon n_c) - 1``;
2. ``q_c`` is the conformal quantile of the class's scores at the level ``alpha_c = epsilon -
   (J_c+1)/(n_c+1)`` (the paper: ``epsilon - e_c(k_c)``): the ``ceil((n_c+1)(1 - alpha_c))``-th
   smallest, ``inf`` when that exceeds ``n_c``.

A class without calibration rows gets ``q_c = inf`` and ``k_c = K`` (it is in every set, as with
``class_conditional=True``).

*Coverage.*  A label is missed when its rank exceeds ``k_c`` or its score exceeds ``q_c``, so
``P(y not in C(x) | y = c) <= P(o > k_c | y = c) + P(s > q_c | y = c)``.  The second term is at most
``alpha_c`` by the class-conditional conformal argument (the test pair exchangeable with the class's
calibration pairs).  The paper bounds the first by the calibration rows' top-``k_c`` error ``eps_c``,
an estimate on the very rows that chose ``k_c`` (the smallest ``k`` whose estimate is below
``epsilon``): with few rows per class it is optimistic (about 10 rows per class at ``K = 1,000``:
coverage 0.87 at ``epsilon = 0.1``, TorchCP alike; issue 58).  svbop bounds it exactly instead:
``k_c`` is the ``(J_c+1)``-th largest of the ``n_c`` label ranks, so a test row's rank exceeds it
with probability at most ``(J_c+1)/(n_c+1)`` (exchangeability; ties only lower it), and the
threshold's level is ``alpha_c = epsilon - (J_c+1)/(n_c+1)``.  ``J_c = ceil(epsilon n_c) - 1`` (the
paper's) unless that bound would exceed ``epsilon`` (``J_c = floor(epsilon (n_c+1)) - 1``; ``-1``:
no rank limit, ``k_c = K``, plain class-conditional calibration).  The class-wise coverage is then at
least ``1 - epsilon`` at any number of rows per class, the promise of ``class_conditional=True``;
the rank limits are the paper's but in classes where ``ceil(epsilon n_c) > epsilon (n_c+1)``, and
the thresholds slightly looser (``(J_c+1)/(n_c+1)`` against ``eps_c <= J_c/n_c``).  The paper's
computation is ``rc3p_calibration(..., paper=True)``, which ``tests/test_conformal_rc3p.py``
compares with TorchCP.

Differences from TorchCP: the levels are exact fractions (TorchCP subtracts floats, and stores the
thresholds in float32), and ties in the ranking go to the lower class index (TorchCP's ``argsort``
leaves them unspecified).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["rc3p_calibration"]


def rc3p_calibration(s: np.ndarray, o: np.ndarray, y: np.ndarray, K: int, eps: Fraction, *, paper: bool = False):
    """``(q, k)``: RC3P's per-class thresholds (float64, ``inf`` where too few rows) and rank limits
    (int64, in ``1..K``) from the calibration scores ``s``, label ranks ``o`` (1-based) and labels
    ``y``.  One sort by class and rank, one by class and score.

    ``paper=False`` (the predictor's): the rank limit's miss is bounded by ``(J_c+1)/(n_c+1)``
    (exchangeability), the threshold's level is ``epsilon`` minus that; ``J_c`` is the paper's
    ``ceil(epsilon n_c) - 1``, lowered so that the bound stays at most ``epsilon`` (``-1``: no rank
    limit, plain class-conditional calibration).  ``paper=True``: the paper's and TorchCP's
    computation (the threshold's level ``epsilon`` minus the calibration rows' top-``k_c`` error)."""
    o = np.asarray(o, dtype=np.int64)
    counts = np.bincount(y, minlength=K)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    present = np.flatnonzero(counts)
    # J_c = ceil(eps n_c) - 1 ranks may exceed k_c: #{o > k} < eps n_c  <=>  #{o > k} <= J_c
    n_list = counts[present].tolist()
    J = np.array([math.ceil(eps * n) - 1 if paper else min(math.ceil(eps * n), math.floor(eps * (n + 1))) - 1
                  for n in n_list], dtype=np.int64)
    by_rank = np.lexsort((-o, y))  # by class, then by decreasing rank
    k = np.full(K, K, dtype=np.int64)
    limited = J >= 0
    k[present[limited]] = o[by_rank[starts[present[limited]] + J[limited]]]  # the (J+1)-th largest rank
    over = np.bincount(y[o > k[y]], minlength=K)  # #{i : o_i > k_c}, the estimate eps_c = over / n_c
    by_score = np.lexsort((s, y))
    q = np.full(K, np.inf)
    for c, n, e, j in zip(present.tolist(), n_list, over[present].tolist(), J.tolist()):
        # alpha_c = eps - e/n (paper) or eps - (J+1)/(n+1); the order ceil((n+1)(1 - alpha_c)), exact
        miss = Fraction(e, n) if paper else Fraction(j + 1, n + 1)
        i = math.ceil((n + 1) * (1 - (eps - miss)))
        if i <= n:
            q[c] = s[by_score[starts[c] + i - 1]]
    return q, k
