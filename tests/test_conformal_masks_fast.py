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
    own = np.ones(X.shape, dtype=bool)  # the kernel summing each row itself, and writing every entry
    ranked_mask(X, np.empty(0), CODES[score], q_row, q_class, k_class, k_reg, lam, U, top1, own)
    assert np.array_equal(own, fast)
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


def _hard_rows(rng, n, K):
    """Rows that stress the bucketing: values that divide to the same float64 though they differ
    (neighbours of one bit pattern, rows summing to 3 or 7), zeros, subnormals, values spread over
    hundreds of octaves, and rows scaled far from 1."""
    X = np.exp(rng.standard_normal((n, K)) * rng.uniform(0.5, 40.0, (n, 1)))
    X /= X.max(axis=1, keepdims=True)
    kind = np.arange(n) % 5
    for i in np.flatnonzero(kind == 0):  # runs of adjacent bit patterns: ties after the division
        base = rng.uniform(0.01, 1.0)
        bits = np.float64(base).view(np.int64) + rng.integers(-3, 4, K)
        X[i] = bits.view(np.float64)
    X[kind == 1, : max(1, K // 3)] = 0.0  # zeros
    X[kind == 2, : max(1, K // 4)] = 5e-324 * rng.integers(1, 1000, (int((kind == 2).sum()), max(1, K // 4)))
    X[kind == 3] *= 3.0 / X[kind == 3].sum(axis=1, keepdims=True)  # sums of 3: every quotient rounds
    X[kind == 4] *= 1e-300  # tiny rows: subnormal quotients nowhere, subnormal values everywhere
    X[X.sum(axis=1) == 0, 0] = 1.0
    return X


@pytest.mark.parametrize("score", SCORES)
def test_bucketed_masks_equal_the_walk_on_hard_rows(score):
    """The bucketing (bit patterns from the row sum down, refined between the undecided classes'
    extremes) and the comparison of undivided values with rank m's keep the walk's sets bit for bit
    on rows built to break them, at sizes that need one, two and three levels of buckets."""
    rng = np.random.default_rng(sum(map(ord, score)))
    for K in (5, 40, 200, 3000):
        n = 300 if K < 3000 else 60
        X = _hard_rows(rng, n, K)
        Xn = X / X.sum(axis=1)[:, None]
        for randomized in (False, True):
            U = rng.random(n) if randomized else np.full(n, 1.0 if score == "saps" else 0.0)
            k_reg, lam = (2, 0.01) if score == "raps" else (1, 0.2 if score == "saps" else 0.0)
            kr = min(k_reg, K)
            exact = _exact_thresholds(Xn, score, kr, lam, U if randomized or score == "saps" else None, rng)
            for q_row in (exact, _with_tolerance(exact, K), np.full(n, np.nan), np.full(n, -1.0)):
                for top1 in (False, True):
                    a, b = _both(X, score, np.ascontiguousarray(q_row), np.empty(0), np.empty(0, dtype=np.int64), kr,
                                 lam, U, top1)
                    assert np.array_equal(a, b), (score, K, randomized, top1)
            k_class = rng.integers(1, K + 1, K)
            a, b = _both(X, score, np.ascontiguousarray(exact), np.full(K, np.inf), k_class, kr, lam, U, False)
            assert np.array_equal(a, b), (score, K, "rank limits")


def test_margin_kernel_equals_the_walk_on_hard_rows():
    """The margin kernel (one undivided cut a row, found on the bit patterns) keeps the walk's sets,
    with per-class thresholds too, on rows whose quotients tie and rows far from a sum of 1."""
    from svbop.conformal._ranked import margin_mask

    rng = np.random.default_rng(7)
    for K in (2, 9, 300):
        X = _hard_rows(rng, 400, K)
        total = X.sum(axis=1)
        Xn = X / total[:, None]
        exact = _exact_thresholds(Xn, "margin", 1, 0.0, None, rng)
        for q_row in (exact, _with_tolerance(exact, K), np.full(400, -0.5), np.full(400, np.inf)):
            for q_class in (np.empty(0), _with_tolerance(np.quantile(exact, rng.uniform(0, 1, K)), K)):
                for top1 in (False, True):
                    fast = np.zeros(X.shape, dtype=bool)
                    assert margin_mask(X, total, np.ascontiguousarray(q_row), q_class, top1, fast) == -1
                    walk = np.zeros(X.shape, dtype=bool)
                    ranked_mask_walk(Xn, CODES["margin"], np.ascontiguousarray(q_row), q_class,
                                     np.empty(0, dtype=np.int64), 1, 0.0, np.zeros(400), top1, walk)
                    assert np.array_equal(fast, walk), (K, top1, q_class.size)


@pytest.mark.parametrize("score", SCORES)
def test_a_negative_value_is_named_by_its_row(score):
    """The kernels read every value: a negative one, which a positive row sum hides, is refused
    naming its row and column; a negative zero is a zero."""
    import svbop

    rng = np.random.default_rng(3)
    P = rng.dirichlet(np.ones(30), 400)
    y = rng.integers(0, 30, 400)
    model = svbop.ConformalSetPredictor(0.1, score=score).fit(P[:200], y[:200])
    Q = P[200:].copy()
    Q[17, 4] = -0.0
    assert model.predict_mask(Q)[17].any()
    Q[23, 6] = -1e-3
    with pytest.raises(ValueError, match=r"P: row 23 has a negative probability P\[23, 6\]"):
        model.predict_mask(Q)


def test_the_kernels_row_sums_are_numpys():
    """The kernels sum each row as numpy's ``sum(axis=1)`` does, bit for bit, at every length where
    its pairwise algorithm changes shape (eight running sums, blocks of 128, halves rounded to 8),
    on values over many orders of magnitude: the sets of predict_mask and predict divide by the same
    sums."""
    from svbop.conformal._ranked import kernel_sums_are_numpys, row_sums

    rng = np.random.default_rng(11)
    for K in [*range(1, 300), 383, 384, 385, 511, 512, 513, 1000, 1024, 1031, 4096, 5000, 65537]:
        X = np.exp(rng.standard_normal((4, K)) * 6.0)
        np.testing.assert_array_equal(row_sums(X), X.sum(axis=1), err_msg=f"K = {K}")
    assert kernel_sums_are_numpys()
