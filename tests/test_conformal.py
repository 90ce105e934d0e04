"""Conformal set predictors of issue 28: LAC/APS/RAPS scores, class-conditional thresholds, and
Bayes-optimal (F-beta, credal) sets calibrated for coverage."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import svbop
from svbop.baselines import ConformalSetPredictor, _score_tolerance

# --- a literal transcription of the definitions ------------------------------------------------


def _brute_scores(row, score, k_reg=1, lam=0.0, u=None):
    """Scores of every class of one row and its ranking, straight from the definitions (``u``: the
    row's uniform of the randomised APS/RAPS/SAPS scores; None: deterministic)."""
    p = np.asarray(row, dtype=np.float64)
    p = p / p.sum()
    K = p.size
    order = sorted(range(K), key=lambda c: (-p[c], c))  # decreasing probability, ties by class id
    s = np.empty(K)
    for o, c in enumerate(order, start=1):  # o: the 1-based rank of c
        if score == "lac":
            s[c] = 1.0 - p[c]
        elif score == "topk":
            s[c] = o
        elif score == "margin":
            s[c] = max([p[d] for d in range(K) if d != c], default=0.0) - p[c]
        elif score == "saps":
            w = 1.0 if u is None else u
            s[c] = w * p[order[0]] if o == 1 else p[order[0]] + lam * ((o - 2) + w)
        else:
            s[c] = np.cumsum(p[order[:o]])[-1]  # mass of the classes ranked at or before c
            if u is not None:
                s[c] = s[c] - u * p[c]
            if score == "raps":
                s[c] = s[c] + lam * max(0, o - k_reg)
    return s, order


def _brute_quantile(scores, eps):
    n = len(scores)
    k = math.ceil((n + 1) * (1 - Fraction(str(eps))))
    return math.inf if k > n else sorted(scores)[k - 1]


def _brute_sets(P_cal, y_cal, P, eps, score, class_conditional=False, k_reg=1, lam=0.0, empty="top1",
                randomized=False, U_cal=None, U=None):
    """The sets by the definitions; a randomised score takes its uniforms ``U_cal`` and ``U``."""
    K = P.shape[1]
    if not randomized:
        U_cal, U = [None] * len(P_cal), [None] * len(P)
    cal = [_brute_scores(r, score, k_reg, lam, u)[0][c] for r, c, u in zip(P_cal, y_cal, U_cal)]
    if class_conditional:
        q = [_brute_quantile([s for s, c in zip(cal, y_cal) if c == k], eps) for k in range(K)]
    else:
        q = [_brute_quantile(cal, eps)] * K
    if score != "lac" or class_conditional:  # cumulative scores: compared within the documented tolerance
        tol = _score_tolerance(K)
        q = [x + tol * max(1.0, abs(x)) for x in q]
    out = []
    for row, u in zip(P, U):
        s, order = _brute_scores(row, score, k_reg, lam, u)
        # the set is the prefix of the ranking up to the first score above every threshold
        qmax = max(q)
        prefix = []
        for c in order:
            if s[c] > qmax:
                break
            prefix.append(c)
        chosen = [c for c in prefix if s[c] <= q[c]]
        out.append(chosen if chosen or empty == "keep" else [order[0]])
    return out


CONFIGS = [
    dict(score="lac"),
    dict(score="aps", randomized=False),
    dict(score="raps", randomized=False, k_reg=1, lam=0.05),
    dict(score="raps", randomized=False, k_reg=0, lam=0.3),
    dict(score="raps", randomized=False, k_reg=3, lam=0.02),
    dict(score="lac", class_conditional=True),
    dict(score="aps", randomized=False, class_conditional=True),
    dict(score="raps", randomized=False, class_conditional=True, k_reg=2, lam=0.1),
]


def _data(kind, seed):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(2, 9))
    n_cal, n_test = int(rng.integers(8, 60)), 40
    if kind in ("random", "float32"):
        P = rng.dirichlet(np.full(K, rng.choice([0.3, 1.0, 3.0])), size=n_cal + n_test)
        P = P.astype(np.float32) if kind == "float32" else P
    else:  # tied: a few integer levels, many equal probabilities and equal rows
        P = rng.integers(0, 4, size=(n_cal + n_test, K)).astype(np.float64)
        P[P.sum(axis=1) == 0, 0] = 1.0
    y = rng.integers(0, K, n_cal + n_test)
    P_cal, y_cal = P[:n_cal], y[:n_cal]
    P_test = np.vstack([P[n_cal:], P_cal[: n_cal // 2]])  # test rows that equal calibration rows too
    return P_cal, y_cal, P_test


@pytest.mark.parametrize("kind", ["random", "tied", "float32"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_sets_equal_a_transcription_of_the_definitions(config, kind):
    for seed in range(8):
        P_cal, y_cal, P_test = _data(kind, seed)
        for eps in (0.05, 0.2, 0.5):
            for empty in ("top1", "keep"):
                model = ConformalSetPredictor(eps, empty=empty, **config).fit(P_cal, y_cal)
                expected = _brute_sets(P_cal, y_cal, P_test, eps, empty=empty, **config)
                assert model.predict(P_test).to_list() == expected, (seed, eps, empty)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    K=st.integers(1, 6),
    n_cal=st.integers(1, 25),
    eps=st.sampled_from([0.01, 0.1, 0.25, 0.5, 0.9]),
    config=st.sampled_from(CONFIGS),
    empty=st.sampled_from(["top1", "keep"]),
)
def test_sets_equal_the_transcription_on_arbitrary_tied_inputs(data, K, n_cal, eps, config, empty):
    """Hypothesis: small matrices of a few probability levels (ties everywhere, zero rows replaced),
    test rows drawn from the calibration rows and new ones."""
    level = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0])
    rows = st.lists(st.lists(level, min_size=K, max_size=K), min_size=1, max_size=n_cal)
    P_cal = np.array(data.draw(rows), dtype=np.float64).reshape(-1, K)
    P_cal[P_cal.sum(axis=1) == 0, 0] = 1.0
    y_cal = np.array(data.draw(st.lists(st.integers(0, K - 1), min_size=len(P_cal), max_size=len(P_cal))))
    P_new = np.array(data.draw(rows), dtype=np.float64).reshape(-1, K)
    P_new[P_new.sum(axis=1) == 0, -1] = 1.0
    P_test = np.vstack([P_cal, P_new])
    model = ConformalSetPredictor(eps, empty=empty, **config).fit(P_cal, y_cal)
    assert model.predict(P_test).to_list() == _brute_sets(P_cal, y_cal, P_test, eps, empty=empty, **config)


@pytest.mark.parametrize("score", ["aps", "raps"])
def test_sets_of_many_classes_equal_the_transcription(score, rng):
    """Wide rows of many small probabilities at a small epsilon: sets of fifty classes and more,
    beyond the engine's first candidates (APS then sorts those rows' values first)."""
    K = 200
    P = rng.dirichlet(np.full(K, 0.2), size=200)
    y = np.array([rng.choice(K, p=p) for p in P])
    kw = dict(k_reg=10, lam=0.001, randomized=False) if score == "raps" else dict(randomized=False)
    for eps in (0.02, 0.1):
        model = ConformalSetPredictor(eps, score=score, **kw).fit(P[:100], y[:100])
        got = model.predict(P[100:])
        assert got.sizes.max() > 50
        assert got.to_list() == _brute_sets(P[:100], y[:100], P[100:], eps, score, **kw)


def test_quantiles_and_the_infinite_threshold_of_a_class_without_calibration_rows():
    P_cal = np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.5, 0.4, 0.1], [0.1, 0.8, 0.1]])
    y_cal = np.array([0, 0, 1, 1])  # class 2: no calibration row
    aps = ConformalSetPredictor(0.4, score="aps", randomized=False, class_conditional=True).fit(P_cal, y_cal)
    # class 0: scores 0.7, 0.6, k = ceil(3 * 0.6) = 2 -> 0.7; class 1: 0.9, 0.8 -> 0.9; class 2: inf
    np.testing.assert_allclose(aps.quantiles_[:2], [0.7, 0.9])
    assert aps.quantiles_[2] == math.inf and aps.quantile_ == math.inf
    assert all(2 in s for s in aps.predict(np.array([[0.98, 0.01, 0.01], [0.2, 0.2, 0.6]])))
    # too few rows for the marginal quantile: every class
    few = ConformalSetPredictor(0.1, score="raps", randomized=False, lam=0.5).fit(P_cal, y_cal)
    assert few.quantile_ == math.inf
    assert few.predict(np.array([[0.9, 0.1, 0.0]])).to_list() == [[0, 1, 2]]


@pytest.mark.parametrize("config", CONFIGS[1:], ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_sets_and_quantiles_do_not_depend_on_the_chunking(config, rng):
    K = 300
    P = rng.dirichlet(np.full(K, 0.2), size=400)
    y = np.array([rng.choice(K, p=p) for p in P])
    model = ConformalSetPredictor(0.1, **config).fit(P[:200], y[:200])
    whole = model.predict(P[200:])
    for chunk_bytes in (K * 8, K * 8 * 7):
        assert model.predict(P[200:], chunk_bytes=chunk_bytes) == whole
        assert ConformalSetPredictor(0.1, **config).fit(P[:200], y[:200], chunk_bytes=chunk_bytes).quantile_ == model.quantile_


# --- coverage -------------------------------------------------------------------------------------


def _calibrated(rng, n, K):
    """Probabilities and labels drawn from them (a calibrated model)."""
    Z = rng.standard_normal((n, K)) * rng.choice([0.8, 1.5, 3.0], size=(n, 1))
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) < rng.random((n, 1))).sum(axis=1)
    return P, np.minimum(y, K - 1)


COVERAGE_CONFIGS = CONFIGS[:3] + [dict(score="fbeta"), dict(score="credal", gamma=0.6)] + CONFIGS[5:]


@pytest.mark.parametrize("config", COVERAGE_CONFIGS, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_coverage_over_200_random_splits(config):
    """Mean coverage over 200 calibration/test splits >= 1 - eps - 0.01 (per class when the
    thresholds are per class).  Coverage of one split has a standard deviation near 0.03 here, so
    the mean over 200 splits has one near 0.002: 0.01 is five of them."""
    rng = np.random.default_rng(11)
    n, K = 800, 6
    P, y = _calibrated(rng, n, K)
    eps = 0.4 if config["score"] == "credal" else 0.1  # credal sets stay small: 60 % is reachable
    per_class = config.get("class_conditional", False)
    hits = np.zeros(K if per_class else 1)
    counts = np.zeros_like(hits)
    for _ in range(200):
        perm = rng.permutation(n)
        cal, test = perm[: n // 2], perm[n // 2 :]
        model = ConformalSetPredictor(eps, empty="keep", **config).fit(P[cal], y[cal])
        covered = svbop.recall(model.predict(P[test]), y[test])
        if per_class:  # mean over splits of each class's coverage
            for c in range(K):
                mask = y[test] == c
                if mask.any():
                    hits[c] += covered[mask].mean()
                    counts[c] += 1
        else:
            hits[0] += covered.mean()
            counts[0] += 1
    assert np.all(hits / counts >= 1 - eps - 0.01), hits / counts


# --- Bayes-optimal sets with a coverage guarantee ----------------------------------------------


def _family(score, t, gamma=0.6):
    return svbop.utility(f"fbeta:beta={t!r}" if score == "fbeta" else f"credal:delta={t!r},gamma={gamma!r}")


def test_bayes_optimal_sets_are_nested_in_the_parameter(rng):
    P = rng.dirichlet(np.full(8, 0.5), size=300)
    for score, grid in (("fbeta", np.geomspace(1e-3, 1e3, 40)), ("credal", np.linspace(0.6, 1.6, 40))):
        previous = None
        for t in grid:
            sets = svbop.predict_sets(P, _family(score, float(t)))
            if previous is not None:
                small, large = (previous, sets) if score == "fbeta" else (sets, previous)
                for a, b in zip(small, large):  # prefixes of one ranking
                    assert a.size <= b.size and np.array_equal(a, b[: a.size])
            previous = sets


@pytest.mark.parametrize("score", ["fbeta", "credal"])
def test_the_parameter_is_the_order_statistic_of_the_per_row_scores(score):
    """Brute force: each calibration row's score (the smallest beta, or largest delta, whose
    ``predict_sets`` set contains the label) by its own bisection over the floats, with
    ``predict_sets`` on that row alone; ``parameter_`` is their k-th smallest (largest)."""
    rng = np.random.default_rng(3)
    P, y = _calibrated(rng, 40, 5)
    eps = 0.2 if score == "fbeta" else 0.5
    kw = {"gamma": 0.6} if score == "credal" else {}
    model = ConformalSetPredictor(eps, score=score, **kw).fit(P, y)
    lo, hi = (0.0, 1.4e154) if score == "fbeta" else (0.6, 1.6)

    def contains(i, t):
        return y[i] in svbop.predict_sets(P[i : i + 1], _family(score, t))[0]

    scores = []
    for i in range(len(y)):
        a, b = lo, hi
        if score == "fbeta":
            if contains(i, a):
                scores.append(a)
                continue
        elif not contains(i, a):
            scores.append(-math.inf)
            continue
        elif contains(i, b):
            scores.append(b)
            continue
        while True:
            ia, ib = np.float64(a).view(np.int64), np.float64(b).view(np.int64)
            if ib - ia <= 1:
                break
            mid = float(np.int64(ia + (ib - ia) // 2).view(np.float64))
            if contains(i, mid) == (score == "fbeta"):
                b = mid
            else:
                a = mid
        scores.append(b if score == "fbeta" else a)
    k = math.ceil((len(y) + 1) * (1 - eps))
    expected = sorted(scores)[k - 1] if score == "fbeta" else sorted(scores, reverse=True)[k - 1]
    assert model.parameter_ == expected == model.quantile_
    # the fallback calibration, counting with predict_sets itself, finds the same parameter
    from svbop.baselines import _calibrate_parameter, _covered

    slow = _calibrate_parameter(lambda r, u: _covered(P[r], y[r], u), len(y), k, score, 0.6, lo, hi)
    assert slow == model.parameter_
    assert float(model.utility_.params["beta" if score == "fbeta" else "delta"]) == model.parameter_
    # the set at parameter_ covers at least k labels, one float further towards smaller sets fewer
    covered = svbop.recall(svbop.predict_sets(P, model.utility_), y).sum()
    assert covered >= k
    if expected not in (lo, hi):
        nxt = np.nextafter(expected, -np.inf if score == "fbeta" else np.inf)
        assert svbop.recall(svbop.predict_sets(P, _family(score, float(nxt))), y).sum() < k


@pytest.mark.parametrize("score, kw", [("fbeta", {}), ("credal", {"gamma": 1.2})])
def test_predict_is_predict_sets_with_the_calibrated_utility(score, kw, rng):
    P, y = _calibrated(rng, 600, 12)
    model = ConformalSetPredictor(0.45, score=score, **kw).fit(P[:300], y[:300])
    assert model.predict(P[300:]) == svbop.predict_sets(P[300:], model.utility_)
    if score == "fbeta":  # the calibration counts with Theorem 2's early stop: valid for F-beta
        assert model.utility_.properties(12).early_stop_valid
    assert model.utility_.name == score and (score == "fbeta" or float(model.utility_.params["gamma"]) == 1.2)


def test_fbeta_with_too_few_rows_keeps_every_class_and_credal_refuses():
    P, y = _calibrated(np.random.default_rng(0), 5, 4)
    model = ConformalSetPredictor(0.1, score="fbeta").fit(P, y)
    assert model.quantile_ == math.inf
    assert all(s.size == 4 for s in model.predict(P))
    with pytest.raises(ValueError, match="too few for epsilon=0.1"):
        ConformalSetPredictor(0.1, score="credal", gamma=0.6).fit(P, y)
    # labels the largest credal sets (delta = gamma) miss: 90 % coverage is out of reach
    P, y = np.tile([[0.4, 0.3, 0.2, 0.1]], (50, 1)), np.full(50, 3)
    with pytest.raises(ValueError, match=r"even the largest credal sets \(delta = gamma\)"):
        ConformalSetPredictor(0.1, score="credal", gamma=0.6).fit(P, y)
    with pytest.raises(ValueError, match="no delta gives 0 <= g"):  # delta <= 2 + 10/2 < gamma
        ConformalSetPredictor(0.1, score="credal", gamma=10.0).fit(P, y)


# --- hostile arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(epsilon=0.0), r"epsilon must be in \(0, 1\)"),
        (dict(epsilon="x"), "epsilon must be a number"),
        (dict(epsilon=0.1, score="top"), "score must be one of lac, aps, raps, saps, topk, margin, fbeta, credal, hierarchical; got"),
        (dict(epsilon=0.1, score="aps", randomized=False, k_reg=-1), "k_reg must be an integer >= 0"),
        (dict(epsilon=0.1, score="raps", randomized=False, k_reg=1.5), "k_reg must be an integer >= 0"),
        (dict(epsilon=0.1, score="raps", randomized=False, k_reg=True), "k_reg must be an integer >= 0"),
        (dict(epsilon=0.1, score="raps", randomized=False, lam=-0.1), "lam must be a finite number >= 0"),
        (dict(epsilon=0.1, score="raps", randomized=False, lam=float("nan")), "lam must be a finite number >= 0"),
        (dict(epsilon=0.1, score="aps", randomized=False, lam=0.1), "k_reg and lam are RAPS parameters"),
        (dict(epsilon=0.1, score="aps", randomized=False, empty="drop"), "empty must be 'top1' or 'keep'"),
        (dict(epsilon=0.1, score="credal"), "score='credal' needs gamma"),
        (dict(epsilon=0.1, score="credal", gamma=0.0), "gamma must be finite and > 0"),
        (dict(epsilon=0.1, score="credal", gamma="0.6"), "gamma must be a number > 0"),
        (dict(epsilon=0.1, score="fbeta", gamma=0.6), "score='fbeta' takes none"),
        (dict(epsilon=0.1, score="fbeta", class_conditional=True), "class_conditional=True is for score"),
        (dict(epsilon=0.1, class_conditional="yes"), "class_conditional must be True, False, .clustered. or .rc3p., got .yes."),
    ],
)
def test_bad_arguments_get_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ConformalSetPredictor(**kwargs)


@pytest.mark.parametrize("score", ["lac", "aps", "fbeta"])
def test_bad_data_is_named(score):
    good = np.array([[0.5, 0.3, 0.2], [0.2, 0.2, 0.6]])
    model = ConformalSetPredictor(0.4, score=score, class_conditional=score == "aps")
    with pytest.raises(ValueError, match="P_cal: row 1 contains NaN"):
        model.fit(np.array([[0.5, 0.5, 0.0], [np.nan, 0.5, 0.5]]), [0, 1])
    with pytest.raises(ValueError, match=r"y_cal\[1\] = 3 is not a class index"):
        model.fit(good, [0, 3])
    with pytest.raises(ValueError, match="not fitted"):
        model.predict(good)
    model.fit(np.vstack([good] * 5), [0, 2] * 5)
    with pytest.raises(ValueError, match="P: row 1 contains NaN"):
        model.predict(np.array([[0.5, 0.5, 0.0], [np.nan, 0.5, 0.5]]))
    with pytest.raises(ValueError, match="P has 4 classes but the predictor was calibrated on 3"):
        model.predict(np.full((1, 4), 0.25))


# --- MAPIE -------------------------------------------------------------------------------------------


def _mapie():
    return pytest.importorskip(
        "mapie", reason="MAPIE (optional: pip install 'svbop[crosscheck]') is needed to cross-check the sets"
    )


def test_lac_sets_equal_mapie_split_conformal_classifier(rng):
    """MAPIE's SplitConformalClassifier (prefit, LAC) on the same probabilities: same quantile
    (the ceil((n+1)(1-alpha))-th smallest score) and the same sets (MAPIE compares with a 1e-8
    tolerance and keeps empty sets: ``empty="keep"``; no score here lies within 1e-8 of q)."""
    _mapie()
    from mapie.classification import SplitConformalClassifier
    from sklearn.base import BaseEstimator, ClassifierMixin

    class Given(ClassifierMixin, BaseEstimator):  # predict_proba(X) = X: the probabilities given
        def fit(self, X, y):
            self.classes_ = np.arange(X.shape[1])
            return self

        def predict_proba(self, X):
            return np.asarray(X)

        def predict(self, X):
            return np.argmax(X, axis=1)

    K = 7
    P, y = _calibrated(rng, 1200, K)
    for eps in (0.05, 0.1, 0.3):
        ours = ConformalSetPredictor(eps, score="lac", empty="keep").fit(P[:600], y[:600])
        assert np.abs((1 - P[600:]) - ours.quantile_).min() > 1e-7
        mapie = SplitConformalClassifier(Given().fit(P, y), confidence_level=1 - eps, conformity_score="lac", prefit=True)
        mapie.conformalize(P[:600], y[:600])
        _, mapie_sets = mapie.predict_set(P[600:])
        expected = [list(np.flatnonzero(row)) for row in mapie_sets[:, :, 0]]
        assert [sorted(s.tolist()) for s in ours.predict(P[600:])] == expected


def test_aps_scores_quantile_and_sets_equal_mapie(rng):
    """MAPIE's APS randomises the calibration score (it subtracts ``u * P(y|x)``, u uniform) and by
    default includes the label that crosses the quantile; its deterministic parts are ours: the
    cumulative score of the label, the quantile, and with ``include_last_label=False`` the sets
    (never empty, as ours with ``empty="top1"``).  MAPIE ranks ties by decreasing class index and
    compares with a 1e-8 tolerance, so the inputs have no ties and no mass within 1e-7 of q."""
    _mapie()
    from mapie.conformity_scores import APSConformityScore
    from mapie.utils import _compute_classification_quantile

    from svbop.baselines import _calibration_scores

    K = 9
    P, y = _calibrated(rng, 1000, K)
    cal, test = slice(0, 500), slice(500, None)
    theirs, _ = APSConformityScore.get_true_label_cumsum_proba(y[cal], P[cal], np.arange(K))
    ours = _calibration_scores(P[cal], y[cal], "aps", 1, 0.0, 2**25)
    np.testing.assert_allclose(ours, theirs.ravel(), rtol=0, atol=1e-14)
    for eps in (0.05, 0.1, 0.3):
        model = ConformalSetPredictor(eps, score="aps", randomized=False).fit(P[cal], y[cal])
        q = _compute_classification_quantile(ours, np.array([eps]))
        assert q[0] == model.quantile_
        mass = np.cumsum(-np.sort(-P[test], axis=1), axis=1)
        assert np.abs(mass - model.quantile_).min() > 1e-7
        aps = APSConformityScore()
        aps.quantiles_ = q
        mapie_sets = aps.get_prediction_sets(
            np.repeat(P[test][:, :, None], 1, axis=2), ours, np.array([eps]), cv="prefit", include_last_label=False
        )
        expected = [list(np.flatnonzero(row)) for row in mapie_sets[:, :, 0]]
        assert [sorted(s.tolist()) for s in model.predict(P[test])] == expected
