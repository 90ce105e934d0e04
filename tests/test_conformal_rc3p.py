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
    q, k = rc3p_calibration(s, o, y, 3, Fraction(1, 5), paper=True)
    # the paper's: class 0: top-1 error 3/10 >= 1/5, top-2 error 1/10 < 1/5: k = 2, eps_c = 1/10,
    # alpha_c = 1/10: the ceil(11 * 9/10) = 10th smallest score; class 1: every class; class 2: top-3
    # error 0: alpha_c = 1/5, ceil(3 * 4/5) = 3 > 2 rows: inf
    assert k.tolist() == [2, 3, 3]
    assert q[0] == s[9] and np.isinf(q[1]) and np.isinf(q[2])
    # svbop's: class 0: J = 1 (2/11 <= 1/5), k = 2, alpha_c = 1/5 - 2/11 = 1/55: ceil(11 * 54/55) = 11
    # > 10 rows: inf; class 2: J = ceil(2/5) - 1 = 0 would bound the miss by 1/3 > 1/5: J = -1, no
    # rank limit (k = K), alpha_c = 1/5: inf
    q, k = rc3p_calibration(s, o, y, 3, Fraction(1, 5))
    assert k.tolist() == [2, 3, 3] and np.isinf(q).all()
    q, k = rc3p_calibration(s[:10], o[:10], y[:10], 3, Fraction(1, 2))  # J = min(5, 5) - 1 = 4: k = 1
    # alpha_c = 1/2 - 5/11 = 1/22: ceil(11 * 21/22) = 11 > 10: inf; at 1/2 the paper's alpha_c = 1/2 - 3/10
    assert k.tolist() == [1, 3, 3] and np.isinf(q[0])


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
    # the paper's computation (rc3p_calibration(paper=True)) is TorchCP's; the predictor's bounds the
    # rank limit's miss exactly (issue 58): looser thresholds, the same limits but in a few classes
    from fractions import Fraction

    from svbop.conformal.scores import _calibration_label_ranks, _calibration_scores

    s = _calibration_scores(P[:n], y[:n], score, extra.get("k_reg", 1), extra.get("lam", 0.0), 2**26)
    q_paper, k_paper = rc3p_calibration(s, _calibration_label_ranks(P[:n], y[:n], 2**26), y[:n], K, Fraction(1, 10),
                                        paper=True)
    np.testing.assert_array_equal(theirs.class_rank_limits.numpy(), k_paper)
    np.testing.assert_allclose(theirs.class_thresholds.numpy(), q_paper, rtol=1e-6, atol=1e-7)
    assert np.all(ours.quantiles_ >= q_paper)
    theirs.class_thresholds = torch.from_numpy(ours.quantiles_)
    theirs.class_rank_limits = torch.from_numpy(ours.rank_limits_)
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


@pytest.mark.parametrize("per_class", [5, 10, 50])
def test_rc3p_covers_every_class_at_few_rows_per_class(per_class):
    """Issue 58: at 5, 10 and 50 calibration rows per class, over 60 seeded splits, every class's mean
    coverage is at least 1 - epsilon up to three standard errors (the rank limit's miss bounded by
    (J+1)/(n+1), not estimated on the rows that chose it).  The paper's computation (TorchCP's)
    falls short at 10 rows per class: the reason for the bound."""
    from fractions import Fraction

    K, eps, splits = 40, 0.1, 60
    P, y = real_like(np.random.default_rng(per_class), 40 * K + 4000, K, peak=(1.0, 5.0))
    cov = np.zeros((splits, K))
    paper = np.zeros(splits)
    for s in range(splits):
        rng = np.random.default_rng(1000 + s)
        perm = rng.permutation(y.size)
        by_class = [perm[y[perm] == c][:per_class] for c in range(K)]
        cal = np.concatenate(by_class)
        test = np.setdiff1d(perm, cal)[:3000]
        m = svbop.ConformalSetPredictor(eps, score="lac", class_conditional="rc3p", empty="keep").fit(P[cal], y[cal])
        mask = m.predict_mask(P[test])
        hit = mask[np.arange(test.size), y[test]]
        cov[s] = np.bincount(y[test], weights=hit, minlength=K) / np.maximum(np.bincount(y[test], minlength=K), 1)
        if per_class == 10:  # the paper's thresholds and limits, the same sets otherwise
            Pn = P / P.sum(axis=1, keepdims=True)
            rank = np.argsort(np.argsort(-Pn, axis=1, kind="stable"), axis=1) + 1
            q, k = rc3p_calibration(1 - Pn[cal, y[cal]], rank[cal, y[cal]], y[cal], K, Fraction(eps), paper=True)
            yt = y[test]
            paper[s] = ((1 - Pn[test, yt] <= q[yt] + 1e-12) & (rank[test, yt] <= k[yt])).mean()
    present = np.bincount(y, minlength=K) > 0
    se = cov.std(axis=0) / np.sqrt(splits)
    assert np.all(cov.mean(axis=0)[present] >= 1 - eps - 3 * se[present] - 1e-12), cov.mean(axis=0)
    if per_class == 10:
        assert paper.mean() < 1 - eps - 3 * paper.std() / np.sqrt(splits), paper.mean()
