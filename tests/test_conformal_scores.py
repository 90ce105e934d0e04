"""Issue 43: randomised APS/RAPS/SAPS, the SAPS, top-k and margin scores, clustered class-conditional
sets, ``predict_mask``; issue 44: Mondrian calibration with 10^5 groups, F-beta's all-zero rows.

Every set is checked against the literal transcription of the definitions in test_conformal.py
(``_brute_sets``), with the predictor's own uniforms for the randomised scores."""

import copy
import math
from fractions import Fraction

import numpy as np
import pytest
from bench_anchors import real_like as _real_like
from test_conformal import _brute_quantile, _brute_sets, _calibrated, _data, _mapie

from svbop.conformal import ConformalSetPredictor, GroupCalibrationWarning
from svbop.conformal.clustered import cluster_parameters

NEW_CONFIGS = [
    dict(score="aps", randomized=True),
    dict(score="raps", randomized=True, k_reg=1, lam=0.05),
    dict(score="raps", randomized=True, k_reg=3, lam=0.3),
    dict(score="saps", randomized=True, lam=0.2),
    dict(score="saps", randomized=False, lam=0.05),
    dict(score="topk"),
    dict(score="margin"),
    dict(score="aps", randomized=True, class_conditional=True),
    dict(score="saps", randomized=True, class_conditional=True, lam=0.1),
    dict(score="topk", class_conditional=True),
    dict(score="margin", class_conditional=True),
]
IDS = lambda c: "-".join(f"{v}" for v in c.values())  # noqa: E731


@pytest.mark.parametrize("kind", ["random", "tied", "float32"])
@pytest.mark.parametrize("config", NEW_CONFIGS, ids=IDS)
def test_new_scores_equal_a_transcription_of_the_definitions(config, kind):
    for seed in range(6):
        P_cal, y_cal, P_test = _data(kind, seed)
        for eps in (0.05, 0.2, 0.5):
            for empty in ("top1", "keep"):
                model = ConformalSetPredictor(eps, empty=empty, random_state=seed, **config).fit(P_cal, y_cal)
                U_cal, U = model._uniforms(0, len(y_cal)), model._uniforms(1, len(P_test))
                expected = _brute_sets(P_cal, y_cal, P_test, eps, empty=empty, U_cal=U_cal, U=U, **config)
                twin = copy.deepcopy(model)  # a call draws fresh uniforms (issue 47): the twin's first call is the same
                got = model.predict(P_test)
                assert got.to_list() == expected, (seed, eps, empty)
                assert np.array_equal(twin.predict_mask(P_test), got.to_mask())


def test_topk_and_margin_sets_by_their_definitions(rng):
    """Top-k: the q most probable classes, q the k-th smallest label rank; margin: the classes whose
    largest other probability exceeds their own by at most q."""
    P, y = _calibrated(rng, 600, 12)
    for eps in (0.05, 0.1, 0.3):
        k = math.ceil(301 * (1 - Fraction(str(eps))))
        ranks = np.array([1 + np.sum(p > p[c]) + np.sum((p == p[c]) & (np.arange(12) < c)) for p, c in zip(P[:300], y[:300])])
        q = np.sort(ranks)[k - 1]
        top = ConformalSetPredictor(eps, score="topk").fit(P[:300], y[:300])
        assert top.quantile_ == q
        order = np.argsort(-P[300:], axis=1, kind="stable")
        assert top.predict(P[300:]).to_list() == [list(o[:q]) for o in order]
        margin = ConformalSetPredictor(eps, score="margin", empty="keep").fit(P[:300], y[:300])
        Pn = P / P.sum(axis=1)[:, None]  # the scores are of the rows divided by their sums
        other = np.array([[np.max(np.delete(p, c)) - p[c] for c in range(12)] for p in Pn[:300]])
        assert margin.quantile_ == np.sort(other[np.arange(300), y[:300]])[k - 1]
        test = np.array([[np.max(np.delete(p, c)) - p[c] for c in range(12)] for p in Pn[300:]])
        tol = 4 * 12 * 2.0**-52 * max(1.0, abs(margin.quantile_))
        assert np.array_equal(margin.predict_mask(P[300:]), test <= margin.quantile_ + tol)


def test_topk_equals_mapie(rng):
    """MAPIE's top-k score is the label's rank and its sets the classes at or above the q-th."""
    _mapie()
    from mapie.conformity_scores import TopKConformityScore
    from mapie.utils import _compute_classification_quantile

    K = 9
    P, y = _calibrated(rng, 1000, K)
    theirs = TopKConformityScore().get_conformity_scores(y[:500], P[:500], y_enc=y[:500]).ravel()
    ours = ConformalSetPredictor(0.1, score="topk")
    from svbop.conformal import _calibration_scores

    np.testing.assert_array_equal(_calibration_scores(P[:500], y[:500], "topk", 1, 0.0, 2**25), theirs + 1)
    for eps in (0.05, 0.1, 0.3):
        ours = ConformalSetPredictor(eps, score="topk").fit(P[:500], y[:500])
        q = _compute_classification_quantile(theirs, np.array([eps]))
        assert ours.quantile_ == q[0] + 1
        score = TopKConformityScore()
        score.quantiles_ = q.astype(int)
        sets = score.get_prediction_sets(P[500:, :, None], theirs, np.array([eps]), cv="prefit")[:, :, 0]
        assert np.array_equal(ours.predict_mask(P[500:]), sets)


def test_randomised_aps_matches_mapie_in_coverage_and_size(rng):
    """MAPIE's randomised APS (include_last_label='randomized') draws its own uniforms, so the sets
    differ row by row; over 30 splits the mean coverage and set size agree within noise."""
    _mapie()
    from mapie.conformity_scores import APSConformityScore
    from mapie.utils import _compute_classification_quantile

    K, eps = 20, 0.1
    P, y = _calibrated(rng, 4000, K)
    ours_cov, ours_size, their_cov, their_size = [], [], [], []
    for split in range(30):
        perm = np.random.default_rng(split).permutation(4000)
        cal, test = perm[:1000], perm[1000:]
        model = ConformalSetPredictor(eps, score="aps", random_state=split).fit(P[cal], y[cal])
        m = model.predict_mask(P[test])
        ours_cov.append(m[np.arange(test.size), y[test]].mean())
        ours_size.append(m.sum(axis=1).mean())
        aps = APSConformityScore()
        aps.set_external_attributes(classes=np.arange(K), random_state=split)
        conf = aps.get_conformity_scores(y[cal], P[cal], y_enc=y[cal]).ravel()
        aps.quantiles_ = _compute_classification_quantile(conf, np.array([eps]))
        sets = aps.get_prediction_sets(P[test][:, :, None], conf, np.array([eps]), cv="prefit",
                                       include_last_label="randomized")[:, :, 0]
        their_cov.append(sets[np.arange(test.size), y[test]].mean())
        their_size.append(sets.sum(axis=1).mean())
    assert abs(np.mean(ours_cov) - (1 - eps)) < 0.01
    assert abs(np.mean(ours_cov) - np.mean(their_cov)) < 0.01
    assert abs(np.mean(ours_size) - np.mean(their_size)) < 0.05 * np.mean(their_size)


def test_default_aps_and_raps_cover_1_minus_epsilon_not_more(rng):
    """The default (randomised) APS and RAPS cover 1 - eps within noise; the deterministic APS over-covers
    on the same outputs (why it is not the default)."""
    K, eps = 100, 0.1
    P, y = _real_like(rng, 10000, K)
    cov = {"aps": [], "raps": [], "aps_det": []}
    for split in range(20):
        perm = np.random.default_rng(split).permutation(10000)
        cal, test = perm[:5000], perm[5000:]
        for name, model in (("aps", ConformalSetPredictor(eps, score="aps", random_state=split)),
                            ("raps", ConformalSetPredictor(eps, score="raps", k_reg=2, lam=0.01, random_state=split)),
                            ("aps_det", ConformalSetPredictor(eps, score="aps", randomized=False))):
            m = model.fit(P[cal], y[cal]).predict_mask(P[test])
            cov[name].append(m[np.arange(test.size), y[test]].mean())
    assert abs(np.mean(cov["aps"]) - 0.9) < 0.006
    assert abs(np.mean(cov["raps"]) - 0.9) < 0.006
    assert np.mean(cov["aps_det"]) > np.mean(cov["aps"]) + 0.05


KINDS = ["marginal", "class", "clustered", "mondrian"]
COVERAGE_CONFIGS = [
    dict(score="lac"),
    dict(score="aps"),
    dict(score="aps", randomized=False),
    dict(score="raps", k_reg=2, lam=0.05),
    dict(score="raps", k_reg=2, lam=0.05, randomized=False),
    dict(score="saps"),
    dict(score="saps", randomized=False),
    dict(score="topk"),
    dict(score="margin"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("config", COVERAGE_CONFIGS, ids=IDS)
def test_coverage_over_many_seeded_splits(config, kind):
    """Mean coverage over 40 seeded splits is at least 1 - eps less noise, for every score and
    kind of calibration; the randomised scores' is also at most 1 - eps + 1/(n+1) plus noise
    (marginal; per class and per cluster each threshold has fewer rows, the bound is looser)."""
    rng = np.random.default_rng(7)
    K, eps, n_cal = 8, 0.1, 400
    P, y = _calibrated(rng, 3000, K)
    groups = P.argmax(axis=1) % 3
    cov = []
    for split in range(40):
        perm = np.random.default_rng(split).permutation(3000)
        cal, test = perm[:n_cal], perm[n_cal:]
        kw = dict(config)
        if kind in ("class", "clustered"):
            kw["class_conditional"] = True if kind == "class" else "clustered"
        model = ConformalSetPredictor(eps, random_state=split, **kw)
        if kind == "mondrian":
            m = model.fit(P[cal], y[cal], groups=groups[cal]).predict_mask(P[test], groups=groups[test])
        else:
            m = model.fit(P[cal], y[cal]).predict_mask(P[test])
        cov.append(m[np.arange(test.size), y[test]].mean())
    noise = 3 * np.sqrt(eps * (1 - eps) / (40 * 300))  # the spread of the mean over splits is larger than this
    assert np.mean(cov) >= 1 - eps - 2 * noise
    if model.randomized and kind == "marginal":
        assert np.mean(cov) <= 1 - eps + 1 / (n_cal + 1) + 2 * noise


def test_randomised_sets_are_reproducible_for_a_seed(rng):
    P, y = _calibrated(rng, 600, 10)
    for score in ("aps", "raps", "saps"):
        one = ConformalSetPredictor(0.1, score=score, random_state=3).fit(P[:300], y[:300])
        two = ConformalSetPredictor(0.1, score=score, random_state=3).fit(P[:300], y[:300])
        assert one.quantile_ == two.quantile_
        # the same seed, the same calls: the same sets (each call draws fresh uniforms, issue 47)
        assert one.predict(P[300:]) == two.predict(P[300:]) and one.predict(P[300:]) == two.predict(P[300:])
        assert np.array_equal(one.predict_mask(P[300:]), two.predict(P[300:]).to_mask())
        rows = np.arange(300, 600)  # row seeds: the same sets from every call
        assert one.predict(P[300:], row_seeds=rows) == two.predict(P[300:], row_seeds=rows) \
            == one.predict(P[300:], row_seeds=rows)
        other = ConformalSetPredictor(0.1, score=score, random_state=4).fit(P[:300], y[:300])
        assert other.predict(P[300:]) != one.predict(P[300:])
        fresh = [ConformalSetPredictor(0.1, score=score).fit(P[:300], y[:300]) for _ in range(2)]
        assert fresh[0].seed_ != fresh[1].seed_
        gen = [ConformalSetPredictor(0.1, score=score, random_state=np.random.default_rng(5)).fit(P[:300], y[:300])
               for _ in range(2)]
        assert gen[0].seed_ == gen[1].seed_ and gen[0].predict(P[300:]) == gen[1].predict(P[300:])
        # a chunk of rows gets the same uniforms whatever the chunking
        a, b = copy.deepcopy(one), copy.deepcopy(one)
        assert a.predict(P[300:], chunk_bytes=200) == b.predict(P[300:])
        assert one.predict(P[300:], chunk_bytes=200, row_seeds=rows) == one.predict(P[300:], row_seeds=rows)


@pytest.mark.parametrize("config", NEW_CONFIGS + [dict(score="lac"), dict(score="aps", randomized=False),
                                                  dict(score="raps", randomized=False, lam=0.1, k_reg=2),
                                                  dict(score="lac", class_conditional=True),
                                                  dict(score="aps", randomized=False, class_conditional=True),
                                                  dict(score="lac", class_conditional="clustered"),
                                                  dict(score="fbeta")], ids=IDS)
def test_predict_mask_holds_the_sets_of_predict(config, rng):
    P, y = _calibrated(rng, 900, 15)
    P[:5, :4] = 0.25  # ties
    P[5:10] = 1.0
    for eps in (0.05, 0.2):
        model = ConformalSetPredictor(eps, random_state=1, **config).fit(P[:400], y[:400])
        rows = np.arange(500)  # the same uniforms in every call (randomised scores; issue 47)
        sets = model.predict(P[400:], row_seeds=rows)
        assert np.array_equal(model.predict_mask(P[400:], row_seeds=rows), sets.to_mask())
        assert np.array_equal(model.predict_mask(P[400:], chunk_bytes=999, row_seeds=rows), sets.to_mask())
        if not model.class_conditional:
            g = np.arange(900) % 4
            grouped = ConformalSetPredictor(eps, random_state=1, **config).fit(P[:400], y[:400], groups=g[:400])
            assert np.array_equal(grouped.predict_mask(P[400:], groups=g[400:], row_seeds=rows),
                                  grouped.predict(P[400:], groups=g[400:], row_seeds=rows).to_mask())


def test_clustered_sets_with_ten_rows_per_class_stay_usable():
    """CIFAR-100-like outputs, 1,000 random calibration rows (10 per class on average): one threshold
    per class is inf for every class with fewer than 9 rows (their sets full); clustered sets cover 1 - eps, are no larger than marginal LAC's,
    their class coverage gap is no worse, and almost no set holds every class."""
    K, eps = 100, 0.1
    rng = np.random.default_rng(0)
    P, y = _real_like(rng, 21000, K)
    stats = {name: [] for name in ("marginal", "class", "clustered")}
    for split in range(5):
        r = np.random.default_rng(split)
        cal = r.choice(y.size, 10 * K, replace=False)
        test = np.setdiff1d(np.arange(y.size), cal)
        for name, cc in (("marginal", False), ("class", True), ("clustered", "clustered")):
            model = ConformalSetPredictor(eps, score="lac", class_conditional=cc, random_state=split).fit(P[cal], y[cal])
            m = model.predict_mask(P[test])
            hit = m[np.arange(test.size), y[test]]
            per_class = np.array([hit[y[test] == c].mean() for c in range(K)])
            stats[name].append((hit.mean(), m.sum(axis=1).mean(), np.abs(per_class - (1 - eps)).mean(),
                                (m.sum(axis=1) == K).mean()))
    mean = {k: np.mean(v, axis=0) for k, v in stats.items()}
    assert mean["class"][1] > 3 * mean["marginal"][1]  # the problem: every rare class in every set
    cov, size, gap, full = mean["clustered"]
    assert abs(cov - (1 - eps)) < 0.02
    assert size <= 1.05 * mean["marginal"][1]
    assert gap <= mean["marginal"][2] + 0.002
    assert full < 0.01


def test_clustered_thresholds_are_each_clusters_quantile(rng):
    """Enough rows for clustering: the classes form clusters, each class's threshold is the conformal
    quantile of the calibration part's scores of its cluster; the null cluster's, of every row of its
    rare classes and the calibration part's rows of its other classes."""
    K, eps = 100, 0.1
    P, _ = _calibrated(rng, 1600, K)
    y = np.repeat(np.arange(K), 16)  # 16 rows a class: 9 for clustering on average, many classes rare
    model = ConformalSetPredictor(eps, score="aps", randomized=False, class_conditional="clustered",
                                  random_state=5).fit(P, y)
    M, fraction, n_clustering = cluster_parameters(np.bincount(y, minlength=K), Fraction("0.1"))
    assert (M, fraction, n_clustering) == (4, 9 / 16, 9)
    clusters = model.clusters_
    assert len(set(clusters[clusters >= 0].tolist())) > 1 and (clusters < 0).sum() > 10
    part = model._uniforms(2, y.size) >= fraction  # the calibration part
    from svbop.conformal import _calibration_scores

    s = _calibration_scores(P, y, "aps", 1, 0.0, 2**25)
    rare = np.bincount(y[~part], minlength=K) < 9  # fewer clustering rows than a finite quantile needs
    null = rare[y] | (part & (clusters[y] < 0))  # rare classes: every row; small clusters: their part
    for c in range(K):
        if clusters[c] < 0:
            expected = _brute_quantile(list(s[null]), eps)
        else:
            expected = _brute_quantile(list(s[part & (clusters[y] == clusters[c])]), eps)
        assert model.quantiles_[c] == expected
    assert np.array_equal(model.predict_mask(P), model.predict(P).to_mask())


def test_clustered_with_every_class_rare_is_the_marginal_calibration(rng):
    P, y = _calibrated(rng, 300, 30)
    y = np.repeat(np.arange(30), 10)
    clustered = ConformalSetPredictor(0.1, score="aps", randomized=False, class_conditional="clustered").fit(P, y)
    marginal = ConformalSetPredictor(0.1, score="aps", randomized=False).fit(P, y)
    assert (clustered.clusters_ == -1).all()
    assert (clustered.quantiles_ == marginal.quantile_).all()


def test_ten_thousand_small_groups_are_one_pass(rng, monkeypatch):
    """10^5 groups, each too small: fit calibrates once and predict thresholds every row in one pass
    (today's code called _predict_with once per group: 10^5 calls, about 50 s)."""
    n, K = 400_000, 5
    P = rng.dirichlet(np.ones(K), size=n)
    y = rng.integers(0, K, n)
    groups = np.arange(n) // 2
    calls = {"calibrate": 0, "predict_with": 0}
    for name in ("_calibrate", "_predict_with"):
        original = getattr(ConformalSetPredictor, name)

        def counted(self, *a, _o=original, _n=name, **k):
            calls[_n.strip("_").replace("_with", "_with")] += 1
            return _o(self, *a, **k)

        monkeypatch.setattr(ConformalSetPredictor, name, counted)
    for config in (dict(score="lac"), dict(score="aps"), dict(score="fbeta")):
        calls.update(calibrate=0, predict_with=0)
        model = ConformalSetPredictor(0.1, random_state=0, **config)
        with pytest.warns(GroupCalibrationWarning, match="100000 of 100000 group"):
            model.fit(P[: n // 2], y[: n // 2], groups=groups[: n // 2])
        assert calls["calibrate"] <= 1
        with pytest.warns(GroupCalibrationWarning, match=r"^100000 group\(s\) not seen in fit"):
            sets = model.predict(P[n // 4 :], groups=groups[n // 4 :])
        assert calls["predict_with"] <= 1
        marginal = ConformalSetPredictor(0.1, random_state=0, **config).fit(P[: n // 2], y[: n // 2])
        assert sets == marginal.predict(P[n // 4 :])


def test_many_large_groups_equal_each_groups_own_calibration(rng):
    """2,000 groups of 12 rows: each group's threshold is its rows' conformal quantile (one sort for
    all of them) and its sets are those of a predictor fitted on its rows alone."""
    n, K = 24000, 6
    P = rng.dirichlet(np.ones(K), size=n)
    y = rng.integers(0, K, n)
    g = np.arange(n) % 2000
    for config in (dict(score="lac"), dict(score="raps", randomized=False, lam=0.1), dict(score="margin")):
        model = ConformalSetPredictor(0.1, **config).fit(P, y, groups=g)
        sets = model.predict(P[:500], groups=g[:500])
        for j in (0, 7, 1999):
            rows = np.flatnonzero(g == j)
            alone = ConformalSetPredictor(0.1, **config).fit(P[rows], y[rows])
            assert model.group_quantiles_[j] == alone.quantile_
            test = np.flatnonzero(g[:500] == j)
            assert sets.take(test) == alone.predict(P[test])


def test_fbeta_refuses_a_calibration_row_of_zeros_as_the_other_scores_do():
    P = np.array([[0.5, 0.5], [0.0, 0.0], [0.2, 0.8]] * 5)
    y = np.array([0, 1, 1] * 5)
    for kw in (dict(score="fbeta"), dict(score="credal", gamma=0.5), dict(score="lac"), dict(score="aps")):
        with pytest.raises(ValueError, match=r"^P_cal: row 1 is all zeros \(no probability mass\)$"):
            ConformalSetPredictor(0.3, **kw).fit(P, y)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(score="lac", randomized=True), "randomized=True is for score 'aps', 'raps', 'saps' or 'topk', not 'lac'"),
        (dict(score="aps", randomized="yes"), "randomized must be True or False, got 'yes'"),
        (dict(score="saps", lam=0), "lam, the SAPS weight of a rank, must be > 0"),
        (dict(score="saps", k_reg=2), "k_reg is a RAPS parameter; score='saps' takes lam"),
        (dict(score="topk", lam=0.1), "k_reg and lam are RAPS parameters; score='topk' takes neither"),
        (dict(score="aps", random_state=-1), "random_state must be None, an integer >= 0 or a numpy Generator"),
        (dict(score="aps", random_state=1.5), "random_state must be None, an integer >= 0 or a numpy Generator"),
        (dict(score="aps", class_conditional="clustered", n_clusters=0), "n_clusters must be None"),
        (dict(score="fbeta", class_conditional="clustered"), "class_conditional='clustered' is for score"),
    ],
)
def test_bad_new_arguments_get_one_line_errors(kwargs, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")) as e:
        ConformalSetPredictor(0.1, **kwargs)
    assert "\n" not in str(e.value)


def test_randomised_default_keeps_empty_sets_and_deterministic_default_does_not():
    assert ConformalSetPredictor(0.1, score="aps").empty == "keep"
    assert ConformalSetPredictor(0.1, score="aps", randomized=False).empty == "top1"
    assert ConformalSetPredictor(0.1, score="aps", empty="top1").empty == "top1"
    assert ConformalSetPredictor(0.1, score="lac").empty == "top1"


def test_pipeline_method_names_stand_for_their_predictors():
    from svbop.conformal.methods import conformal_method
    from svbop.evaluation import beyond_method
    from svbop.report.beyond import method_family
    from svbop.report.names import method_name

    methods = {"raps": {"k_reg": 2, "lam": 0.05}, "saps": {"lam": 0.3}}
    cases = {
        "aps": ("aps", False, {"randomized": True, "random_state": 7}, "APS_{ε=0.10}", "conformal"),
        "aps_deterministic": ("aps", False, {"randomized": False}, "APS (deterministic)_{ε=0.10}", "conformal"),
        "raps": ("raps", False, {"k_reg": 2, "lam": 0.05, "randomized": True, "random_state": 7}, "RAPS_{ε=0.10}",
                 "conformal"),
        "saps_deterministic_cc": ("saps", True, {"lam": 0.3, "randomized": False},
                                  "Class-conditional SAPS (deterministic)_{ε=0.10}", "class_conditional"),
        "lac_clustered": ("lac", "clustered", {"random_state": 7}, "Clustered LAC_{ε=0.10}", "class_conditional"),
        "topk": ("topk", False, {}, "Top-k_{ε=0.10}", "conformal"),
        "margin_cc": ("margin", True, {}, "Class-conditional Margin_{ε=0.10}", "class_conditional"),
        "hierarchical_3": ("hierarchical", False, {"max_nodes": 3}, "Conformal hierarchy ≤ 3 nodes_{ε=0.10}",
                           "conformal"),
    }
    for name, (score, cc, options, display, family) in cases.items():
        assert conformal_method(name, methods, 7) == {"score": score, "class_conditional": cc, "options": options}
        assert beyond_method(f"conformal_{name}")
        assert method_name(f"conformal_{name}", "0.10") == display
        assert method_family(f"conformal_{name}") == family
        if score != "hierarchical":
            ConformalSetPredictor(0.1, score=score, class_conditional=cc, **options)  # accepted
    for bad in ("topk_deterministic", "lac", "fbeta_cc"):
        if bad != "lac":
            with pytest.raises(ValueError, match=f"unknown conformal method '{bad}'"):
                conformal_method(bad, methods, 7)
    assert not beyond_method("conformal_topk_deterministic") and not beyond_method("conformal_lac")
    assert method_name("mondrian_saps_predicted_class", "0.10") == "Mondrian SAPS by predicted class_{ε=0.10}"


def test_clustered_sets_refuse_groups_naming_the_calibration():
    P = np.full((20, 3), 1 / 3)
    with pytest.raises(ValueError, match=r"^groups cannot be combined with class_conditional='clustered' \(one"):
        ConformalSetPredictor(0.1, class_conditional="clustered").fit(P, np.arange(20) % 3, groups=np.zeros(20))


@pytest.mark.parametrize("config", [dict(score="aps"), dict(score="raps", k_reg=5, lam=0.002),
                                    dict(score="saps", lam=0.001), dict(score="margin"),
                                    dict(score="aps", randomized=False, class_conditional=True)], ids=IDS)
def test_sets_of_many_classes_through_the_kernel_equal_the_definitions(config):
    """Wide flat rows: sets of fifty classes and more, past the kernel's first 16 ranks by selection
    (the rest of a row's ranking comes from one sort), with ties across that boundary."""
    rng = np.random.default_rng(11)
    K = 120
    P = rng.dirichlet(np.full(K, 0.3), size=160)
    P[:20, 10:40] = P[:20, 10:11]  # ties that straddle the 16th rank
    y = np.array([rng.choice(K, p=p / p.sum()) for p in P])
    model = ConformalSetPredictor(0.05, random_state=2, **config).fit(P[:80], y[:80])
    twin = copy.deepcopy(model)
    got = model.predict(P[80:])
    assert got.sizes.max() > 40
    U_cal, U = model._uniforms(0, 80), model._uniforms(1, 80)
    expected = _brute_sets(P[:80], y[:80], P[80:], 0.05, empty=model.empty, U_cal=U_cal, U=U,
                           randomized=model.randomized, **{k: v for k, v in config.items() if k != "randomized"})
    assert got.to_list() == expected
    assert np.array_equal(twin.predict_mask(P[80:]), got.to_mask())
