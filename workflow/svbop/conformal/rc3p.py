"""Rank-calibrated class-conditional calibration (``class_conditional="rc3p"``).

Shi, Ghosh, Belkhouja, Doppa and Yan, "Conformal prediction for class-wise coverage via augmented
label rank calibration", NeurIPS 2024 (RC3P), as TorchCP 1.2.1's ``RC3PPredictor`` computes it
(their Option II).  Class-conditional sets (one threshold ``q_c`` per class) are large when many
classes' thresholds are loose; RC3P also gives each class ``c`` a *rank limit* ``k_c`` and keeps
``c`` in a set only when it is ranked at most ``k_c``-th:

``C(x) = {c : s(x, c) <= q_c and o(c) <= k_c}`` with ``o(c)`` the 1-based rank of ``c`` in the row
(decreasing probability, ties by class index).

From the ``n_c`` calibration rows of class ``c``, with ``o_i`` the rank of their label:

1. the class's top-k error ``e_c(k) = #{i : o_i > k} / n_c``; ``k_c`` is the smallest ``k`` with
   ``e_c(k) < epsilon`` (exact arithmetic), and ``eps_c = e_c(k_c)``;
2. ``q_c`` is the conformal quantile of the class's scores at the level ``alpha_c = epsilon - eps_c``
   (> 0): the ``ceil((n_c+1)(1 - alpha_c))``-th smallest, ``inf`` when that exceeds ``n_c``.

A class without calibration rows gets ``q_c = inf`` and ``k_c = K`` (it is in every set, as with
``class_conditional=True``).

*Coverage.*  A label is missed when its rank exceeds ``k_c`` or its score exceeds ``q_c``, so
``P(y not in C(x) | y = c) <= P(o > k_c | y = c) + P(s > q_c | y = c)``.  The second term is at most
``alpha_c`` by the class-conditional conformal argument (the test pair exchangeable with the class's
calibration pairs), the first is the class's top-``k_c`` error, whose calibration estimate is
``eps_c``: their sum is ``epsilon`` when the estimate is right, which is the paper's argument.  The
rank limit is chosen on the same rows as the estimate (the smallest ``k`` whose estimate is below
``epsilon``), so the bound holds up to that estimate's error, a selection effect that shrinks as
``n_c`` grows; ``tests/test_conformal_rc3p.py`` measures class-wise coverage over seeded splits.
Where every class has ``k_c = K`` (no rank limit binds), RC3P is class-conditional calibration at
``epsilon``, with its exact guarantee.

Differences from TorchCP: the levels are exact fractions (TorchCP subtracts floats, and stores the
thresholds in float32), and ties in the ranking go to the lower class index (TorchCP's ``argsort``
leaves them unspecified).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["rc3p_calibration"]


def rc3p_calibration(s: np.ndarray, o: np.ndarray, y: np.ndarray, K: int, eps: Fraction):
    """``(q, k)``: RC3P's per-class thresholds (float64, ``inf`` where too few rows) and rank limits
    (int64, in ``1..K``) from the calibration scores ``s``, label ranks ``o`` (1-based) and labels
    ``y``.  One sort by class and rank, one by class and score."""
    o = np.asarray(o, dtype=np.int64)
    counts = np.bincount(y, minlength=K)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    present = np.flatnonzero(counts)
    # J_c = ceil(eps n_c) - 1 ranks may exceed k_c: #{o > k} < eps n_c  <=>  #{o > k} <= J_c
    n_list = counts[present].tolist()
    J = np.array([math.ceil(eps * n) - 1 for n in n_list], dtype=np.int64)
    by_rank = np.lexsort((-o, y))  # by class, then by decreasing rank
    k = np.full(K, K, dtype=np.int64)
    k[present] = o[by_rank[starts[present] + J]]  # the (J+1)-th largest rank of the class
    over = np.bincount(y[o > k[y]], minlength=K)  # #{i : o_i > k_c}, the estimate eps_c = over / n_c
    by_score = np.lexsort((s, y))
    q = np.full(K, np.inf)
    for c, n, e in zip(present.tolist(), n_list, over[present].tolist()):
        # alpha_c = eps - e/n; the order ceil((n+1)(1 - alpha_c)) in exact arithmetic
        j = math.ceil((n + 1) * (1 - (eps - Fraction(e, n))))
        if j <= n:
            q[c] = s[by_score[starts[c] + j - 1]]
    return q, k
