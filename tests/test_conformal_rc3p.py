"""RC3P (Shi et al., NeurIPS 2024): ``ConformalSetPredictor(class_conditional="rc3p")``, issue 48
item 4: a known answer, class-wise coverage over seeded splits, and TorchCP 1.2.1's RC3PPredictor
(skipped without TorchCP)."""

import numpy as np
import pytest

import svbop
from svbop.conformal.rc3p import rc3p_calibration

import anchors
from bench_anchors import real_like


def _real_like(rng, n, K, sharpen=1.5):
    """Overconfident CIFAR-like outputs, with a lower peak than the benchmark's default."""
    return real_like(rng, n, K, sharpen, peak=(2.0, 8.0))


def test_rank_limits_and_thresholds_known_answer():
    from fractions import Fraction

    # class 0: ten rows, label ranks 1 x7, 2 x2, 5 x1; class 1: no rows; class 2: two rows
    o = np.array([1] * 7 + [2, 2, 5, 1, 3])
    y = np.array([0] * 10 + [2, 2])
    s = np.arange(12) / 100.0
    q, k = rc3p_calibration(s, o, y, 3, Fraction(1, 5))
    # class 0: top-1 error 3/10 >= 1/5, top-2 error 1/10 < 1/5: k = 2, eps_c = 1/10, alpha_c = 1/10:
    # the ceil(11 * 9/10) = 10th smallest score; class 1: every class; class 2: top-3 error 0:
    # alpha_c = 1/5, ceil(3 * 4/5) = 3 > 2 rows: inf
    assert k.tolist() == [2, 3, 3]
    assert q[0] == s[9] and np.isinf(q[1]) and np.isinf(q[2])


def test_rc3p_sets_keep_a_class_within_its_threshold_and_its_rank_limit(rng):
    P, y = _real_like(rng, 3000, 8)
    p = svbop.ConformalSetPredictor(0.1, score="lac", class_conditional="rc3p").fit(P[:1500], y[:1500])
    mask = p.predict_mask(P[1500:])
    Pn = P[1500:] / P[1500:].sum(axis=1, keepdims=True)
    rank = np.argsort(np.argsort(-Pn, axis=1, kind="stable"), axis=1) + 1
    tol = 4 * 8 * np.finfo(float).eps
    expected = (1 - Pn <= p.quantiles_ + tol * np.maximum(1, np.abs(p.quantiles_))) & (rank <= p.rank_limits_)
    none = ~expected.any(axis=1)  # empty="top1": the top class
    expected[np.flatnonzero(none), Pn[none].argmax(axis=1)] = True
    np.testing.assert_array_equal(mask, expected)
    sets = p.predict(P[1500:])
    np.testing.assert_array_equal(sets.to_mask(), mask)
    assert p.rank_limits_.dtype == np.int64 and p.rank_limits_.shape == (8,)


def test_rc3p_covers_every_class_over_seeded_splits():
    """100 random calibration/test splits of one pool: the mean coverage of every class is at least
    1 - epsilon up to three standard errors (randomised APS and deterministic LAC)."""
    K, eps = 10, 0.1
    P, y = _real_like(np.random.default_rng(0), 20000, K)
    splits = 100
    for score in ("aps", "lac"):
        cov = np.zeros((splits, K))
        for s in range(splits):
            perm = np.random.default_rng(s).permutation(y.size)
            cal, test = perm[:1000], perm[1000:4000]
            m = svbop.ConformalSetPredictor(eps, score=score, class_conditional="rc3p", random_state=s).fit(
                P[cal], y[cal]).predict_mask(P[test])
            hit = m[np.arange(test.size), y[test]]
            cov[s] = np.bincount(y[test], weights=hit, minlength=K) / np.bincount(y[test], minlength=K)
        se = cov.std(axis=0) / np.sqrt(splits)
        assert np.all(cov.mean(axis=0) >= 1 - eps - 3 * se), (score, cov.mean(axis=0))


def test_rc3p_refusals():
    with pytest.raises(ValueError, match="class_conditional must be True, False, 'clustered' or 'rc3p'"):
        svbop.ConformalSetPredictor(0.1, class_conditional="rank")
    with pytest.raises(ValueError, match="class_conditional='rc3p' is for score"):
        svbop.ConformalSetPredictor(0.1, score="fbeta", class_conditional="rc3p")
    P = np.full((20, 3), 1 / 3)
    with pytest.raises(ValueError, match="groups cannot be combined with class_conditional='rc3p'"):
        svbop.ConformalSetPredictor(0.1, class_conditional="rc3p").fit(P, np.zeros(20, int), groups=np.zeros(20))


@pytest.mark.parametrize("score", ["lac", "aps", "margin", "topk", "raps"])
def test_rc3p_equals_torchcps_rc3p_predictor(score):
    """The same rank limits, thresholds equal to TorchCP's float32 ones, and the same sets once
    TorchCP's predictor is given svbop's float64 thresholds (its float32 ones round the APS scores'
    threshold, near 1 on overconfident outputs, and change a few sets)."""
    anchors.torchcp()
    import torch
    from torchcp.classification.predictor import RC3PPredictor
    from torchcp.classification.score import APS, LAC, RAPS, TOPK, Margin

    anchor = {"lac": LAC(), "aps": APS(randomized=False), "margin": Margin(), "topk": TOPK(randomized=False),
              "raps": RAPS(penalty=0.01, kreg=2, randomized=False)}[score]
    extra = {"aps": dict(randomized=False), "raps": dict(randomized=False, k_reg=2, lam=0.01)}.get(score, {})
    K, n = 30, 3000
    P, y = _real_like(np.random.default_rng(3), 2 * n, K)
    ours = svbop.ConformalSetPredictor(0.1, score=score, class_conditional="rc3p", empty="keep", **extra)
    ours.fit(P[:n], y[:n])
    theirs = RC3PPredictor(anchor)
    theirs.num_classes = K
    theirs.calculate_threshold(torch.from_numpy(np.log(P[:n])), torch.from_numpy(y[:n]), 0.1)
    np.testing.assert_array_equal(theirs.class_rank_limits.numpy(), ours.rank_limits_)
    np.testing.assert_allclose(theirs.class_thresholds.numpy(), ours.quantiles_, rtol=1e-6, atol=1e-7)
    theirs.class_thresholds = torch.from_numpy(ours.quantiles_)
    S = theirs.predict_with_logits(torch.from_numpy(np.log(P[n:]))).numpy()
    np.testing.assert_array_equal(ours.predict_mask(P[n:]), S)


def test_pipeline_names_rc3p_methods():
    """methods.rc3p: [lac, aps] in config -> conformal_lac_rc3p, conformal_aps_rc3p: the predictor, the
    table beyond the paper, the report's name."""
    from svbop.conformal.methods import conformal_method
    from svbop.evaluation import beyond_method
    from svbop.report.beyond import method_family

    spec = conformal_method("aps_rc3p", {"raps": {"k_reg": 1, "lam": 0.01}}, 5)
    assert spec == {"score": "aps", "class_conditional": "rc3p", "options": {"randomized": True, "random_state": 5}}
    assert conformal_method("lac_rc3p", {}, 0)["class_conditional"] == "rc3p"
    assert beyond_method("conformal_lac_rc3p") and method_family("conformal_lac_rc3p") == "class_conditional"
