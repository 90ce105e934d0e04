"""Issue 58: the ranked scores' masks by selection (``svbop.conformal._ranked.ranked_mask``) equal
the walk along each row's ranking (``ranked_mask_walk``, the rule in its plainest form) bit for
bit: every score, randomised and deterministic, marginal, per-class thresholds and RC3P's rank
limits, with ties, thresholds on a calibration score (the tolerance rule) and thresholds met
exactly by a row's own cumulative sums."""

from __future__ import annotations

import numpy as np
import pytest

from svbop.conformal._common import _with_tolerance
from svbop.conformal._ranked import CODES, ranked_mask, ranked_mask_walk
from svbop.conformal.scores import _ranked_scores

SCORES = ("lac", "aps", "raps", "saps", "topk", "margin")


def _rows(rng, n, K, ties):
    """Unnormalised rows (the kernels divide by the row sums)."""
    if ties:  # a few distinct values: many ties, and equal rows
        X = rng.integers(0, 4, (n, K)).astype(np.float64)
        X[X.sum(axis=1) == 0, 0] = 1.0
    else:
        Z = rng.standard_normal((n, K)) * rng.uniform(0.5, 4.0, (n, 1))
        X = np.exp(Z - Z.max(axis=1, keepdims=True)) * rng.uniform(0.5, 3.0, (n, 1))
    return X


def _both(X, score, q_row, q_class, k_class, k_reg, lam, U, top1):
    """The selection kernel on the raw rows and their sums (it divides as it reads), and the walk on
    the divided matrix."""
    total = X.sum(axis=1)
    Xn = X / total[:, None]
    fast = np.zeros(X.shape, dtype=bool)
    ranked_mask(X, total, CODES[score], q_row, q_class, k_class, k_reg, lam, U, top1, fast)
    walk = np.zeros(X.shape, dtype=bool)
    ranked_mask_walk(Xn, CODES[score], q_row, q_class, k_class, k_reg, lam, U, top1, walk)
    return fast, walk


def _exact_thresholds(Xn, score, k_reg, lam, U, rng):
    """Thresholds equal to a score of the row itself (the walk's own sums), with the tolerance."""
    order = np.argsort(-Xn, axis=1, kind="stable")
    V = np.take_along_axis(Xn, order, axis=1)
    S = _ranked_scores(V, score, k_reg, lam, U)
    pick = S[np.arange(Xn.shape[0]), rng.integers(0, Xn.shape[1], Xn.shape[0])]
    return pick


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("randomized", [False, True])
@pytest.mark.parametrize("ties", [False, True])
def test_selection_masks_equal_the_walk(score, randomized, ties):
    rng = np.random.default_rng(hash((score, randomized, ties)) % 2**32)
    for K in (1, 2, 3, 17, 60, 300):
        n = 200
        X = _rows(rng, n, K, ties)
        Xn = X / X.sum(axis=1)[:, None]
        U = rng.random(n) if randomized else np.full(n, 1.0 if score == "saps" else 0.0)
        k_reg, lam = (2, 0.01) if score == "raps" else (1, 0.2 if score == "saps" else 0.0)
        kr = min(k_reg, K)
        exact = _exact_thresholds(Xn, score, kr, lam, U if randomized or score == "saps" else None, rng)
        for q_row in (_with_tolerance(exact, K), exact, np.full(n, _with_tolerance(float(np.median(exact)), K)),
                      np.full(n, np.inf), np.full(n, -1.0)):
            for top1 in (False, True):
                a, b = _both(X, score, np.ascontiguousarray(q_row), np.empty(0), np.empty(0, dtype=np.int64), kr, lam,
                             U, top1)
                assert np.array_equal(a, b), (score, K, top1)
            # per-class thresholds, and RC3P's rank limits
            q_class = _with_tolerance(np.quantile(exact, rng.uniform(0.3, 1.0, K)), K)
            k_class = rng.integers(1, K + 1, K)
            for qc, kc in ((q_class, np.empty(0, dtype=np.int64)), (q_class, k_class),
                           (np.full(K, np.inf), k_class)):
                a, b = _both(X, score, np.ascontiguousarray(q_row), qc, kc, kr, lam, U, False)
                assert np.array_equal(a, b), (score, K, "per class")


def test_predict_mask_equals_predict_at_k_1000():
    """The predictor's masks (selection) are its ranked sets (predict) on outputs of K = 1,000."""
    from bench_anchors import real_like

    import svbop

    P, y = real_like(np.random.default_rng(3), 1200, 1000)
    for kw in (dict(score="aps", randomized=False), dict(score="aps", random_state=1),
               dict(score="raps", k_reg=2, lam=0.01, randomized=False), dict(score="saps", randomized=False),
               dict(score="topk"), dict(score="topk", randomized=True, random_state=2), dict(score="margin"),
               dict(score="lac", class_conditional="rc3p", empty="keep")):
        model = svbop.ConformalSetPredictor(0.1, **kw).fit(P[:600], y[:600])
        seeds = np.arange(600)
        mask = model.predict_mask(P[600:], row_seeds=seeds)
        assert np.array_equal(mask, model.predict(P[600:], row_seeds=seeds).to_mask()), kw
