"""Coverage within overlapping groups (Gibbs, Cherian, Candès 2023; issue 48, item 2): every group
over many seeded splits where the marginal sets fall short in one, MAPIE's exact cutoff, disjoint
groups = per-group split conformal, and the refusals."""

import math
import warnings

import numpy as np
import pytest

from svbop.conformal import ConditionalSetPredictor, ConformalSetPredictor, _epsilon, _order_statistic


def _data(rng, n, K=6):
    """Calibrated probabilities whose temperature depends on two overlapping features: rows with
    a (30 %) are flat, rows with b (40 %) peaked, and labels are drawn from a flatter version for
    rows in both, so that one marginal threshold under-covers group a and a & b."""
    a = rng.random(n) < 0.3
    b = rng.random(n) < 0.4
    scale = np.where(a, 0.7, 2.5) + 2.0 * b
    Z = rng.standard_normal((n, K)) * scale[:, None]
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    Q = np.where((a & b)[:, None], np.sqrt(P), P)  # the labels: flatter than the model says in a & b
    Q /= Q.sum(axis=1, keepdims=True)
    y = np.minimum((Q.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1), K - 1)
    Phi = np.stack([a, b, a & b], axis=1)
    return P, y, Phi


def test_coverage_in_every_overlapping_group_over_60_splits():
    """Mean over 60 splits of the coverage of each group (a, b, a & b, and all rows) >= 1 - eps - 3 se,
    where the marginal split-conformal sets of the same splits miss group a & b by more than 0.03."""
    rng = np.random.default_rng(48)
    eps, n_cal, n_test = 0.1, 500, 2000
    cond, marg = [], []
    for _ in range(60):
        P, y, Phi = _data(rng, n_cal + n_test)
        cal, test = slice(0, n_cal), slice(n_cal, None)
        m = ConditionalSetPredictor(eps).fit(P[cal], y[cal], Phi[cal]).predict_mask(P[test], Phi[test])
        hit = m[np.arange(n_test), y[test]]
        hit0 = ConformalSetPredictor(eps).fit(P[cal], y[cal]).predict(P[test]).contains(y[test])
        cols = np.concatenate([np.ones((n_test, 1), bool), Phi[test]], axis=1)
        cond.append([hit[c].mean() for c in cols.T])
        marg.append([hit0[c].mean() for c in cols.T])
    cond, marg = np.array(cond), np.array(marg)
    se = cond.std(axis=0) / math.sqrt(cond.shape[0])
    assert np.all(cond.mean(axis=0) >= 1 - eps - 3 * se), cond.mean(axis=0)
    assert marg.mean(axis=0)[3] < 1 - eps - 0.03, marg.mean(axis=0)


def test_disjoint_groups_give_per_group_split_conformal():
    """One indicator (and the intercept): the two cutoffs are each group's
    ceil((n_g+1)(1-eps))-th smallest score, also when (n_g+1)(1-eps) is an integer (a non-unique fit:
    its lower end is the quantile)."""
    rng = np.random.default_rng(3)
    for n in (99, 100, 199, 57):
        P = rng.dirichlet(np.ones(5), size=n)
        y = rng.integers(0, 5, n)
        g = rng.random(n) < 0.4
        model = ConditionalSetPredictor(0.1).fit(P, y, g[:, None])
        q = model.thresholds(np.array([[True], [False]]))
        s = model.scores_
        assert q[0] == pytest.approx(_order_statistic(s[g], _epsilon(0.1)), abs=1e-12)
        assert q[1] == pytest.approx(_order_statistic(s[~g], _epsilon(0.1)), abs=1e-12)


def test_cutoffs_equal_mapies_conditional_classifier():
    """The same cutoffs as MAPIE's ConditionalSplitConformalClassifier (exact=True, feature map: the
    intercept and the group columns), and the same sets."""
    mcc = pytest.importorskip("mapie.conditional_conformal_prediction",
                              reason="MAPIE (optional) is the anchor of the conditional sets")
    from sklearn.base import BaseEstimator, ClassifierMixin

    K, n = 6, 400
    P, y, Phi = _data(np.random.default_rng(9), 2 * n, K)

    class Given(ClassifierMixin, BaseEstimator):  # the probabilities are the first K columns of X
        def fit(self, X, y):
            self.classes_ = np.arange(K)
            return self

        def predict_proba(self, X):
            return X[:, :K]

        def predict(self, X):
            return X[:, :K].argmax(axis=1)

    X = np.concatenate([P, Phi.astype(float)], axis=1)
    # the cvxpy problem MAPIE builds is for its kernel (RKHS) part only, which the finite map never uses
    real_setup = mcc.setup_cvx_problem
    mcc.setup_cvx_problem = lambda *a, **k: None
    try:
        theirs = mcc.ConditionalSplitConformalClassifier(
            feature_map=lambda x: np.concatenate([np.ones((x.shape[0], 1)), x[:, K:]], axis=1),
            estimator=Given().fit(X[:n], y[:n]), confidence_level=0.9, conformity_score="lac", prefit=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs.conformalize(X[:n], y[:n])
            _, their_sets = theirs.predict_set(X[n : n + 60])
            their_q = [theirs._predict_conditional_cutoff(0.9, X[n + i : n + i + 1]) for i in range(60)]
    finally:
        mcc.setup_cvx_problem = real_setup
    ours = ConditionalSetPredictor(0.1, empty="keep").fit(P[:n], y[:n], Phi[:n])
    np.testing.assert_allclose(ours.thresholds(Phi[n : n + 60]), their_q, rtol=1e-7)
    np.testing.assert_array_equal(ours.predict_mask(P[n : n + 60], Phi[n : n + 60]), their_sets[:, :, 0])


def test_a_group_without_calibration_rows_keeps_every_class():
    P, y, Phi = _data(np.random.default_rng(0), 300)
    Phi = np.concatenate([Phi, np.zeros((300, 1), bool)], axis=1)
    model = ConditionalSetPredictor(0.1).fit(P, y, Phi)
    test = Phi[:5].copy()
    test[:, -1] = True
    assert np.all(np.isinf(model.thresholds(test)))
    assert model.predict_mask(P[:5], test).all()
    assert np.all(np.isfinite(model.thresholds(Phi[:5])))
    # a group of 3 rows is too small for the 0.9 quantile (9 needed): unbounded, every class; 9 rows suffice
    g = np.zeros(300, bool)
    g[:3] = True
    assert np.isinf(ConditionalSetPredictor(0.1).fit(P, y, g[:, None]).thresholds(np.array([[True]]))[0])
    g[:9] = True
    q = ConditionalSetPredictor(0.1).fit(P, y, g[:, None]).thresholds(np.array([[True]]))[0]
    assert q == pytest.approx(np.sort(model.scores_[:9]).max(), abs=1e-12)


def test_other_scores_and_sets_in_ranked_order():
    P, y, Phi = _data(np.random.default_rng(1), 600)
    for score in ("aps", "topk", "margin"):
        model = ConditionalSetPredictor(0.1, score=score).fit(P[:300], y[:300], Phi[:300])
        sets = model.predict(P[300:], Phi[300:])
        np.testing.assert_array_equal(sets.to_mask(), model.predict_mask(P[300:], Phi[300:]))


def test_refusals():
    P, y, Phi = _data(np.random.default_rng(0), 100)
    with pytest.raises(ValueError, match="Phi has 99 rows but P_cal has 100"):
        ConditionalSetPredictor(0.1).fit(P, y, Phi[:99])
    with pytest.raises(ValueError, match=r"Phi must hold group indicators, 0 or 1 \(row 0, column 0: 2"):
        ConditionalSetPredictor(0.1).fit(P, y, np.full((100, 2), 2))
    model = ConditionalSetPredictor(0.1).fit(P, y, Phi)
    with pytest.raises(ValueError, match="Phi_test has 2 group columns but fit had 3"):
        model.predict(P, Phi[:, :2])
    with pytest.raises(ValueError, match="not fitted"):
        ConditionalSetPredictor(0.1).predict(P, Phi)
    with pytest.raises(ValueError, match="score must be one of"):
        ConditionalSetPredictor(0.1, score="fbeta")
