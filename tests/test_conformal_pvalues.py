"""Conformal p-values, ConformalSetPredictor.predict_p (issue 55, item 1): the set at epsilon is
{c : p_c > epsilon} exactly, on every ranked score and calibration; brute-force counts; super-uniform
(unsmoothed) and uniform (smoothed) p-values of the true label; TorchCP and crepes agree."""

import warnings

import numpy as np
import pytest
from anchors import torchcp
from bench_anchors import real_like

from svbop.conformal import ConformalSetPredictor, conformal_p_values, online_p_values
from svbop.conformal.pvalues import _test_scores

SCORES = [dict(score="lac"), dict(score="aps"), dict(score="aps", randomized=False),
          dict(score="raps", k_reg=1, lam=0.05), dict(score="raps", k_reg=2, lam=0.01, randomized=False),
          dict(score="saps"), dict(score="saps", randomized=False), dict(score="topk"),
          dict(score="topk", randomized=True), dict(score="margin")]
IDS = [f"{c['score']}-{'det' if c.get('randomized') is False else 'rand' if c.get('randomized') else 'default'}"
       for c in SCORES]


def _outputs(rng, n, K, kind):
    """Dirichlet rows; rounded (many exact ties within rows and between rows); or thirds and
    fifths (float sums that round differently: the tolerance decides)."""
    P = rng.dirichlet(np.ones(K) * 0.5, size=n)
    if kind == "ties":
        P = np.round(P, 1)
        P[P.sum(axis=1) == 0, 0] = 1.0
    elif kind == "rounding":
        third = np.array([1 / 3, 1 / 3, 1 / 3] + [0.0] * (K - 3)) if K >= 3 else np.array([0.7, 0.3])
        P[::2] = third[rng.permuted(np.tile(np.arange(K), (n // 2 + n % 2, 1)), axis=1)]
        P[1::3] = 0.1 * np.ones(K) / (0.1 * K)
    return P


@pytest.mark.parametrize("config", SCORES, ids=IDS)
def test_set_at_every_epsilon_is_the_p_values_above_it(config):
    """For many random calibrations (marginal, class-conditional, Mondrian with small groups), the
    sets of predict and predict_mask at epsilon equal {c : p_c > epsilon}, entry by entry, with
    exact ties and float sums that differ in their last bit; empty="top1" adds the top class
    exactly where no p-value exceeds epsilon."""
    rng = np.random.default_rng(sum(map(ord, repr(config))))
    checked = 0
    for trial in range(12):
        K = int(rng.integers(3, 9))
        n = int(rng.integers(8, 80))
        kind = ("plain", "ties", "rounding")[trial % 3]
        P = _outputs(rng, n + 50, K, kind)
        y = rng.integers(0, K, n + 50)
        eps = float(rng.choice([0.02, 0.1, 0.2, 1 / 3, 0.5]))
        for mode in ("marginal", "class", "groups"):
            for empty in ("keep", "top1"):
                m = ConformalSetPredictor(eps, class_conditional=mode == "class", random_state=trial, empty=empty,
                                          **config)
                g = rng.integers(0, 4, n + 50) if mode == "groups" else None
                gc, gt = (None, None) if g is None else (g[:n], g[n:])
                seeds = np.arange(50) + 1000 * trial
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # small and unseen groups: warned, checked below
                    m.fit(P[:n], y[:n], gc)
                    p = m.predict_p(P[n:], gt, row_seeds=seeds)
                    mask = m.predict_mask(P[n:], gt, row_seeds=seeds)
                    sets = m.predict(P[n:], gt, row_seeds=seeds).to_mask()
                assert p.shape == (50, K) and np.all((p > 0) & (p <= 1))
                above = p > eps
                if empty == "top1":
                    top = np.argsort(-(P[n:] / P[n:].sum(axis=1, keepdims=True)), axis=1, kind="stable")[:, 0]
                    none = ~above.any(axis=1)
                    above[none, top[none]] = True
                np.testing.assert_array_equal(mask, above)
                np.testing.assert_array_equal(sets, above)
                checked += 1
    assert checked == 72


def test_calibrate_top1_gives_the_top_class_p_value_one():
    """calibrate_top1=True puts the top class in every set: its p-value is 1, and the set at epsilon
    is still {c : p_c > epsilon}."""
    rng = np.random.default_rng(1)
    for trial in range(20):
        P = rng.dirichlet(np.ones(5) * 0.3, size=140)
        y = rng.integers(0, 5, 140)
        for eps in (0.05, 0.1, 0.3):
            m = ConformalSetPredictor(eps, score="raps", lam=0.02, randomized=False, calibrate_top1=True)
            p = m.fit(P[:80], y[:80]).predict_p(P[80:])
            np.testing.assert_array_equal(p > eps, m.predict_mask(P[80:]))
            assert np.all(p[np.arange(60), P[80:].argmax(axis=1)] == 1.0)


def _brute(cal, S, tol_K=None):
    """(1 + #{s_i >= s}) / (n + 1) by a loop, with the sets' widening of every s_i when tol_K."""
    from svbop.conformal import _with_tolerance

    out = np.empty(S.shape)
    for idx in np.ndindex(S.shape):
        wide = [(_with_tolerance(c, tol_K) if tol_K else c) >= S[idx] for c in cal]
        out[idx] = (1 + sum(wide)) / (len(cal) + 1)
    return out


def test_p_values_are_the_brute_force_counts_in_their_cell():
    """Marginal: against every calibration score; class-conditional: against the rows of label c;
    Mondrian: against the row's group; a group too small with small_groups='full': 1."""
    rng = np.random.default_rng(5)
    K, n = 4, 60
    P = rng.dirichlet(np.ones(K), size=n + 20)
    y = rng.integers(0, K, n + 20)
    g = np.where(rng.random(n + 20) < 0.1, 2, rng.integers(0, 2, n + 20))
    g[:n][g[:n] == 2] = 2
    m = ConformalSetPredictor(0.1, score="aps", randomized=False).fit(P[:n], y[:n])
    from svbop.conformal import _calibration_scores

    s = _calibration_scores(P[:n], y[:n], "aps", 1, 0.0, 1 << 20)
    S = _test_scores(m, P[n:], None, 1 << 20)
    np.testing.assert_allclose(m.predict_p(P[n:]), _brute(s, S, K), rtol=3e-16, atol=0)  # one ulp up at most
    mc = ConformalSetPredictor(0.1, score="aps", randomized=False, class_conditional=True).fit(P[:n], y[:n])
    pc = mc.predict_p(P[n:])
    for c in range(K):
        np.testing.assert_allclose(pc[:, c], _brute(s[y[:n] == c], S[:, c], K), rtol=3e-16, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mg = ConformalSetPredictor(0.1, score="lac", small_groups="full").fit(P[:n], y[:n], g[:n])
        pg = mg.predict_p(P[n:], g[n:])
    sl = 1 - P[np.arange(n), y[:n]] / P[:n].sum(axis=1)
    Sl = 1 - P[n:] / P[n:].sum(axis=1, keepdims=True)
    for h in (0, 1):
        rows = g[n:] == h
        np.testing.assert_allclose(pg[rows], _brute(sl[g[:n] == h], Sl[rows]), rtol=3e-16, atol=0)
    assert np.all(pg[g[n:] == 2] == 1.0)  # fewer than 9 calibration rows: every class


def test_smoothed_p_values_are_uniform_and_unsmoothed_super_uniform_over_seeded_splits():
    """Over 200 seeded splits of overconfident outputs, the true label's smoothed p-value is uniform
    (P(p <= e) = e within sampling error at every e) and the unsmoothed one super-uniform (P(p <= e)
    <= e); the smoothed p-value is never above the unsmoothed one, and tau follows row_seeds."""
    rng = np.random.default_rng(11)
    smooth, plain = [], []
    for split in range(200):
        P, y = real_like(rng, 300, 10, peak=(1.0, 6.0))
        m = ConformalSetPredictor(0.1, score="aps", random_state=split).fit(P[:200], y[:200])
        seeds = np.arange(100)
        ps = m.predict_p(P[200:], smoothed=True, row_seeds=seeds)
        pu = m.predict_p(P[200:], row_seeds=seeds)
        assert np.all(ps <= pu + 1e-15)
        np.testing.assert_array_equal(ps, m.predict_p(P[200:], smoothed=True, row_seeds=seeds))
        smooth.append(ps[np.arange(100), y[200:]])
        plain.append(pu[np.arange(100), y[200:]])
    smooth, plain = np.concatenate(smooth), np.concatenate(plain)
    grid = np.linspace(0.05, 0.95, 19)
    se = np.sqrt(grid * (1 - grid) / smooth.size)
    # rows of one split share its calibration: the spread is wider than binomial; 6 se covers it
    assert np.all(np.abs((smooth[:, None] <= grid).mean(axis=0) - grid) <= 6 * se)
    assert np.all((plain[:, None] <= grid).mean(axis=0) <= grid + 3 * se)


def test_conformal_p_values_match_torchcp_compute_p_values():
    """TorchCP 1.2's compute_p_values (unsmoothed) on svbop's calibration and test scores, and on its
    own APS scores (randomized=False): the same p-values; its smoothed ones obey the same bounds."""
    tc = torchcp()
    import torch
    from torchcp.classification.score import APS
    from torchcp.classification.utils.metrics import compute_p_values

    rng = np.random.default_rng(2)
    P, y = real_like(rng, 700, 20)
    m = ConformalSetPredictor(0.1, score="aps", randomized=False).fit(P[:500], y[:500])
    ours = m.predict_p(P[500:])
    aps = APS(score_type="identity", randomized=False)
    Pt = torch.tensor(P, dtype=torch.float64)
    cal = aps(Pt[:500], torch.tensor(y[:500]))
    test = aps(Pt[500:])
    theirs = compute_p_values(cal, test).numpy().astype(np.float64)  # float32: compare the counts
    np.testing.assert_array_equal(np.rint(ours * 501), np.rint(theirs * 501))
    np.testing.assert_array_equal(np.rint(conformal_p_values(cal.numpy(), test.numpy()) * 501), np.rint(theirs * 501))
    smooth = compute_p_values(cal, test, smooth=True).numpy()
    assert np.all(smooth <= theirs + 1e-6) and tc.__version__.startswith("1.2")


def test_predict_p_matches_crepes_marginal_mondrian_and_class_conditional():
    """crepes' ConformalClassifier.predict_p (smoothing=False) on the same scores: marginal, with
    bins = groups (Mondrian), and with bins = labels one class at a time (class-conditional).  LAC:
    continuous scores, no two within the sets' tolerance (RAPS's penalised full mass, 1.0 in one row
    and 0.9999999999999999 in another, is counted as equal by svbop and not by crepes)."""
    crepes = pytest.importorskip("crepes", reason="crepes is not installed (pip install crepes)")
    rng = np.random.default_rng(4)
    P, y = real_like(rng, 900, 8, peak=(1.0, 5.0))
    g = rng.integers(0, 3, 900)
    s_test = lambda m: _test_scores(m, P[600:], None, 1 << 20)  # noqa: E731
    m = ConformalSetPredictor(0.1).fit(P[:600], y[:600])
    s = 1 - P[np.arange(600), y[:600]] / P[:600].sum(axis=1)
    cc = crepes.ConformalClassifier().fit(s)
    np.testing.assert_allclose(m.predict_p(P[600:]), cc.predict_p(s_test(m), smoothing=False), atol=1e-12)
    mg = ConformalSetPredictor(0.1).fit(P[:600], y[:600], g[:600])
    cm = crepes.ConformalClassifier().fit(s, bins=g[:600])
    np.testing.assert_allclose(mg.predict_p(P[600:], g[600:]), cm.predict_p(s_test(mg), bins=g[600:], smoothing=False),
                               atol=1e-12)
    mc = ConformalSetPredictor(0.1, class_conditional=True).fit(P[:600], y[:600])
    ours = mc.predict_p(P[600:])
    from svbop.conformal import _calibration_scores

    s = _calibration_scores(P[:600], y[:600], "lac", 1, 0.0, 1 << 20)  # class-conditional LAC: normalised rows
    cl = crepes.ConformalClassifier().fit(s, bins=y[:600])
    for c in range(8):
        theirs = cl.predict_p(s_test(mc)[:, [c]], bins=np.full(300, c), smoothing=False)[:, 0]
        np.testing.assert_allclose(ours[:, c], theirs, atol=1e-12)


def test_online_p_values_are_brute_force_and_uniform_on_exchangeable_streams():
    rng = np.random.default_rng(8)
    s = np.round(rng.standard_normal(300), 1)  # many ties
    p = online_p_values(s, random_state=3)
    tau = np.random.default_rng(3).random(300)
    brute = [((s[:t] > s[t]).sum() + tau[t] * ((s[:t] == s[t]).sum() + 1)) / (t + 1) for t in range(300)]
    np.testing.assert_allclose(p, brute, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(online_p_values(s, n_initial=100, random_state=3), p[100:])
    # exchangeable: uniform, and independent (lag-1 correlation near 0)
    q = online_p_values(rng.standard_normal(20_000), random_state=1)
    assert abs(q.mean() - 0.5) < 0.01 and abs(np.corrcoef(q[:-1], q[1:])[0, 1]) < 0.03
    assert np.all(np.abs(np.quantile(q, [0.1, 0.5, 0.9]) - [0.1, 0.5, 0.9]) < 0.015)


def _sparse(P):
    import svbop

    idx = np.argsort(-P, axis=1)
    return svbop.SparseOutputs(idx, np.take_along_axis(P, idx, axis=1), P.shape[1])


def test_bad_input_is_refused_in_one_line():
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(4), size=60)
    y = rng.integers(0, 4, 60)
    cases = [
        (lambda: ConformalSetPredictor(0.1).predict_p(P), "not fitted"),
        (lambda: ConformalSetPredictor(0.1, score="fbeta").fit(P, y).predict_p(P), "ranked scores"),
        (lambda: ConformalSetPredictor(0.1, class_conditional="rc3p").fit(P, y).predict_p(P), "rc3p"),
        (lambda: ConformalSetPredictor(0.1).fit(P, y).predict_p(P, smoothed="yes"), "smoothed"),
        (lambda: ConformalSetPredictor(0.1).fit(P, y, weights=np.ones(60)).predict_p(P), "weights"),
        (lambda: ConformalSetPredictor(0.1).fit(P, y).predict_p(P[:, :3]), "3 classes"),
        (lambda: ConformalSetPredictor(0.1).fit(P, y).predict_p(P, smoothed=True, row_seeds=np.arange(3)),
         "row_seeds"),
        (lambda: online_p_values(np.ones(5), n_initial=6), "n_initial"),
        (lambda: online_p_values([1.0, np.nan]), "NaN"),
        (lambda: conformal_p_values([], np.ones((2, 2))), "cal_scores is empty"),
        (lambda: ConformalSetPredictor(0.1).fit(P, y).predict_p(_sparse(P)), "needs a dense P"),
        (lambda: ConformalSetPredictor(0.1).fit(P, y).fit(_sparse(P), y).predict_p(P), "did not keep"),
    ]
    for call, words in cases:
        with pytest.raises(ValueError, match=words) as err:
            call()
        assert "\n" not in str(err.value)
