"""Randomised top-k (``score="topk", randomized=True``; TorchCP's default TOPK score ``o(c) - u``),
issue 48 item 7: exact coverage over seeded splits, sets of ``floor(q)`` or ``ceil(q)`` classes,
and TorchCP's TOPK beside it (skipped without TorchCP)."""

import math

import numpy as np
import pytest

import svbop

import anchors


def _outputs(rng, n, K):
    Z = rng.standard_normal((n, K))
    Z[np.arange(n), rng.integers(0, K, n)] += rng.uniform(0.5, 4.0, n)
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = np.minimum((P.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), K - 1)
    return P, y


def test_randomized_topk_sets_are_the_top_ranks_with_a_random_last_one(rng):
    P, y = _outputs(rng, 4000, 20)
    p = svbop.ConformalSetPredictor(0.1, score="topk", randomized=True, random_state=1).fit(P[:2000], y[:2000])
    assert p.randomized and p.empty == "keep"
    seeds = np.arange(2000)  # one seed per row: predict and predict_mask draw the same uniforms
    mask = p.predict_mask(P[2000:], row_seeds=seeds)
    size = mask.sum(axis=1)
    q = p.quantile_
    assert set(np.unique(size).tolist()) <= {math.ceil(q) - 1, math.ceil(q)}
    # the set is the prefix of the ranking of its size
    order = np.argsort(-P[2000:], axis=1, kind="stable")
    rank = np.argsort(order, axis=1) + 1
    np.testing.assert_array_equal(mask, rank <= size[:, None])
    np.testing.assert_array_equal(p.predict(P[2000:], row_seeds=seeds).to_mask(), mask)
    # deterministic top-k stays the default
    assert not svbop.ConformalSetPredictor(0.1, score="topk").randomized


def test_randomized_topk_coverage_is_exact_over_seeded_splits():
    """Over 200 splits the mean coverage is within [1 - eps, 1 - eps + 1/(n+1)] up to sampling error,
    and the sets are smaller on average than deterministic top-k's (which over-covers)."""
    eps, n_cal, n_test, K = 0.1, 500, 2000, 20
    P, y = _outputs(np.random.default_rng(0), 20000, K)
    cov, size, det_size = [], [], []
    for s in range(200):
        perm = np.random.default_rng(s).permutation(y.size)
        cal, test = perm[:n_cal], perm[n_cal:n_cal + n_test]
        m = svbop.ConformalSetPredictor(eps, score="topk", randomized=True, random_state=s).fit(
            P[cal], y[cal]).predict_mask(P[test])
        cov.append(m[np.arange(n_test), y[test]].mean())
        size.append(m.sum(axis=1).mean())
        d = svbop.ConformalSetPredictor(eps, score="topk").fit(P[cal], y[cal]).predict_mask(P[test])
        det_size.append(d.sum(axis=1).mean())
    cov = np.array(cov)
    se = cov.std() / np.sqrt(cov.size)
    assert 1 - eps - 3 * se <= cov.mean() <= 1 - eps + 1 / (n_cal + 1) + 3 * se, (cov.mean(), se)
    assert np.mean(size) < np.mean(det_size)


def test_randomized_topk_beside_torchcps_topk():
    """TorchCP's TOPK (randomised by default) on the same probabilities: mean coverage and size
    over 10 seeded splits within sampling error of svbop's (their uniforms are other draws)."""
    anchors.torchcp()
    import torch
    from torchcp.classification.predictor import SplitPredictor
    from torchcp.classification.score import TOPK

    eps, K = 0.1, 30
    P, y = _outputs(np.random.default_rng(5), 4000, K)
    ours, theirs = [], []
    for s in range(10):
        perm = np.random.default_rng(s).permutation(y.size)
        cal, test = perm[:2000], perm[2000:]
        m = svbop.ConformalSetPredictor(eps, score="topk", randomized=True, random_state=s).fit(
            P[cal], y[cal]).predict_mask(P[test])
        torch.manual_seed(s)
        tp = SplitPredictor(TOPK())
        tp.calculate_threshold(torch.from_numpy(np.log(P[cal])), torch.from_numpy(y[cal]), eps)
        S = tp.predict_with_logits(torch.from_numpy(np.log(P[test]))).numpy()
        ours.append((m[np.arange(test.size), y[test]].mean(), m.sum(axis=1).mean()))
        theirs.append((S[np.arange(test.size), y[test]].mean(), S.sum(axis=1).mean()))
    ours, theirs = np.array(ours), np.array(theirs)
    se = np.sqrt(ours.var(axis=0) / 10 + theirs.var(axis=0) / 10)
    assert np.all(np.abs(ours.mean(axis=0) - theirs.mean(axis=0)) <= 4 * se + 1e-9), (ours.mean(0), theirs.mean(0))


def test_randomized_is_still_refused_where_no_randomised_score_exists():
    with pytest.raises(ValueError, match="randomized=True is for score 'aps', 'raps', 'saps' or 'topk', not 'margin'"):
        svbop.ConformalSetPredictor(0.1, score="margin", randomized=True)
