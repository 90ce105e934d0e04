"""svbop.sklearn: set-valued classifiers and set-utility scorers as scikit-learn citizens."""

from __future__ import annotations

import os
import pickle
import sys

import numpy as np
import pytest
from watched import run_watched

sklearn = pytest.importorskip("sklearn", minversion="1.3", reason="svbop.sklearn needs scikit-learn >= 1.3")

import scipy.sparse as sp  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from sklearn.base import BaseEstimator, ClassifierMixin, clone  # noqa: E402
from sklearn.calibration import CalibratedClassifierCV  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.feature_extraction.text import TfidfVectorizer  # noqa: E402
from sklearn.inspection import permutation_importance  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GridSearchCV, KFold, cross_validate, train_test_split  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.svm import LinearSVC  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import svbop  # noqa: E402
from conftest import brute_force_best  # noqa: E402
from svbop.datasets import Hierarchy, random_tree  # noqa: E402
from svbop.sklearn import (  # noqa: E402
    ConformalSetClassifier,
    HierarchicalSetClassifier,
    SetValuedClassifier,
    ThresholdSetClassifier,
    TopSClassifier,
    encode_labels,
    make_set_scorer,
    set_scorers,
)

RHO = svbop.TIE_RTOL
F1 = "fbeta:beta=1"


@pytest.fixture(autouse=True)
def one_blas_thread():
    """BLAS threads make these small fits many times slower on a busy machine."""
    with threadpool_limits(1):
        yield


def lr(**kw):
    return LogisticRegression(max_iter=2000, **kw)


@pytest.fixture(scope="module")
def digits():
    """600 digits, pixels scaled to [0, 1], seeded split in half."""
    X, y = load_digits(return_X_y=True)
    X, y = X[:600] / 16.0, y[:600]
    return train_test_split(X, y, test_size=0.5, random_state=0, stratify=y)


def _mapped(P, u, classes):
    """The reference: svbop.predict_sets on the probabilities, indices mapped to labels."""
    return [classes[s] for s in svbop.predict_sets(P, u)]


def _assert_same_sets(got, expected, classes):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.dtype == classes.dtype
        np.testing.assert_array_equal(a, b)


# --- scikit-learn's own estimator checks ---------------------------------------------------------

# Every check of scikit-learn's suite applies: predict is the top-1 label and predict_proba the
# wrapped estimator's, so nothing set-valued is exposed to them (predict_sets and score are
# tested below).  calibrate= only puts scikit-learn's CalibratedClassifierCV (checked by
# scikit-learn itself) inside, and costs five fits per fit, so it is tested below instead.
@parametrize_with_checks(
    [
        SetValuedClassifier(LogisticRegression()),
        TopSClassifier(LogisticRegression(), s=2),
        ThresholdSetClassifier(LogisticRegression()),
        ConformalSetClassifier(LogisticRegression(), epsilon=0.2),
        ConformalSetClassifier(LogisticRegression(), epsilon=0.2, conformity_score="raps", k_reg=2, lam=0.1,
                               class_conditional=True),
        ConformalSetClassifier(LogisticRegression(), epsilon=0.2, conformity_score="fbeta"),
        HierarchicalSetClassifier(LogisticRegression()),
        HierarchicalSetClassifier(LogisticRegression(), max_nodes=2),
    ]
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_import_svbop_does_not_import_sklearn():
    code = "import sys, svbop; assert 'sklearn' not in sys.modules, 'svbop imported sklearn'"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = run_watched([sys.executable, "-c", code], env=env)
    assert run.returncode == 0, run.stderr[-2000:]


# --- SetValuedClassifier: exact sets, as labels ----------------------------------------------------


@pytest.mark.parametrize("labels", ["int", "str"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("u", [F1, "credal:delta=2.2,gamma=1.2", "log", "genreject:alpha=0.5,beta=2"])
def test_predict_sets_equals_svbop_predict_sets_mapped_to_classes(digits, labels, sparse, u):
    X_train, X_test, y_train, _ = digits
    if labels == "str":
        y_train = np.array([f"digit-{d}" for d in y_train])
    else:
        y_train = 7 * y_train + 3  # not 0..K-1
    if sparse:
        X_train, X_test = sp.csr_matrix(X_train), sp.csr_matrix(X_test)
    clf = SetValuedClassifier(lr(C=0.05), u).fit(X_train, y_train)
    P = clf.predict_proba(X_test)
    np.testing.assert_array_equal(P, clf.estimator_.predict_proba(X_test))
    expected = _mapped(P, u, clf.classes_)
    assert any(s.size > 1 for s in expected), "the model should be unsure somewhere"
    _assert_same_sets(clf.predict_sets(X_test), expected, clf.classes_)
    mask = clf.predict_sets(X_test, output="indicator")
    assert mask.shape == P.shape and mask.dtype == bool
    np.testing.assert_array_equal(mask, svbop.predict_sets(P, u).to_mask())
    assert clf.predict_sets(X_test, output="indices") == svbop.predict_sets(P, u)
    # predict: the first label of every set, i.e. the arg-max of predict_proba
    np.testing.assert_array_equal(clf.predict(X_test), [s[0] for s in expected])
    np.testing.assert_array_equal(clf.predict(X_test), clf.classes_[P.argmax(axis=1)])


class _RowsAreProbabilities(ClassifierMixin, BaseEstimator):
    """Test double: X's first n_classes columns are the (unnormalised) class probabilities."""

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        return self

    def predict_proba(self, X):
        P = np.asarray(X, dtype=np.float64)[:, : self.classes_.size]
        return P / P.sum(axis=1, keepdims=True)


@st.composite
def labelled_problems(draw):
    K = draw(st.integers(2, 6))
    pool = draw(st.sampled_from([["b", "a", "z", "x", "c", "m"], [42, -3, 7, 1000, 0, 5]]))
    rows = draw(
        st.lists(
            st.lists(st.floats(0, 1) | st.sampled_from([0.0, 0.25, 0.5]), min_size=K, max_size=K).filter(
                lambda r: sum(r) > 1e-3
            ),
            min_size=1,
            max_size=4,
        )
    )
    u = draw(st.sampled_from([F1, "fbeta:beta=3", "precision", "credal:delta=1.6,gamma=0.6", "exp:delta=1", "log"]))
    return np.asarray(pool[:K]), np.array(rows), u


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(labelled_problems())
def test_predicted_label_sets_are_the_brute_force_optimum(problem):
    labels, P, u = problem
    K = labels.size
    clf = SetValuedClassifier(_RowsAreProbabilities(), u).fit(np.ones((K, K)), labels)
    g = svbop.utility(u, K=K).values()
    P = P / P.sum(axis=1, keepdims=True)
    for p, chosen in zip(P, clf.predict_sets(P)):
        idx = encode_labels(chosen, clf.classes_)
        assert np.all(idx >= 0) and np.unique(idx).size == idx.size
        best, _ = brute_force_best(p, g)
        assert g[idx.size - 1] * p[idx].sum() >= best * (1 - RHO) - 1e-15
        assert np.all(np.diff(p[idx]) <= 0)  # decreasing probability


def test_score_is_the_mean_set_utility_computed_by_hand(digits):
    X_train, X_test, y_train, y_test = digits
    clf = SetValuedClassifier(lr(C=0.05), F1).fit(X_train, y_train)
    sets = clf.predict_sets(X_test)
    by_hand = np.mean([2 / (len(s) + 1) if y in s else 0.0 for s, y in zip(sets, y_test)])
    assert clf.score(X_test, y_test) == pytest.approx(by_hand, rel=1e-12)
    assert make_set_scorer(F1)(clf, X_test, y_test) == pytest.approx(by_hand, rel=1e-12)
    w = np.arange(y_test.size) % 3
    weighted = np.average([2 / (len(s) + 1) if y in s else 0.0 for s, y in zip(sets, y_test)], weights=w)
    assert clf.score(X_test, y_test, sample_weight=w) == pytest.approx(weighted, rel=1e-12)


def test_utility_may_be_a_utility_object_bound_to_K(digits):
    X_train, X_test, y_train, _ = digits
    u = svbop.utility("reject:alpha=0.3", K=10)
    clf = SetValuedClassifier(lr(), u).fit(X_train, y_train)
    assert clf.utility_ == u
    assert all(s.size in (1, 10) for s in clf.predict_sets(X_test))
    with pytest.raises(ValueError, match="utility=.*K=3"):
        SetValuedClassifier(lr(), svbop.utility("reject:alpha=0.3", K=3)).fit(X_train, y_train)


def test_clone_get_set_params_and_pickle_round_trip(digits):
    X_train, X_test, y_train, _ = digits
    clf = SetValuedClassifier(lr(C=0.05), "credal:delta=2.2,gamma=1.2", calibrate="isotonic")
    params = clf.get_params(deep=True)
    assert params["estimator__C"] == 0.05 and params["utility"] == "credal:delta=2.2,gamma=1.2"
    twin = clone(clf).set_params(estimator__C=0.5, calibrate=None)
    assert twin.estimator.C == 0.5 and clf.estimator.C == 0.05 and clf.calibrate == "isotonic"
    clf = twin.fit(X_train, y_train)
    assert not hasattr(clone(clf), "estimator_")
    back = pickle.loads(pickle.dumps(clf))
    _assert_same_sets(back.predict_sets(X_test), clf.predict_sets(X_test), clf.classes_)
    np.testing.assert_array_equal(back.predict_proba(X_test), clf.predict_proba(X_test))


def test_calibrate_makes_a_classifier_without_predict_proba_usable(digits):
    X_train, X_test, y_train, _ = digits
    with pytest.raises(ValueError, match="has no predict_proba.*calibrate='sigmoid'"):
        SetValuedClassifier(LinearSVC()).fit(X_train, y_train)
    clf = SetValuedClassifier(LinearSVC(), calibrate="sigmoid").fit(X_train, y_train)
    assert isinstance(clf.estimator_, CalibratedClassifierCV) and clf.estimator_.method == "sigmoid"
    _assert_same_sets(clf.predict_sets(X_test), _mapped(clf.predict_proba(X_test), F1, clf.classes_), clf.classes_)


def test_fit_params_reach_the_wrapped_estimator(digits):
    X_train, _, y_train, _ = digits
    w = np.where(y_train == 3, 0.0, 1.0)  # class 3 weighted out: its coefficients stay small
    plain = SetValuedClassifier(lr()).fit(X_train, y_train)
    weighted = SetValuedClassifier(lr()).fit(X_train, y_train, sample_weight=w)
    np.testing.assert_allclose(weighted.estimator_.coef_, lr().fit(X_train, y_train, sample_weight=w).coef_)
    assert not np.allclose(weighted.estimator_.coef_, plain.estimator_.coef_)


@pytest.mark.parametrize("output", ["labels", "indicator"])
def test_a_text_pipeline_with_string_labels(output):
    docs = ["red apple", "green apple", "red wine", "white wine", "apple pie", "wine glass", "red", "apple wine"]
    y = np.array(["fruit", "fruit", "drink", "drink", "fruit", "drink", "drink", "fruit"])
    inner = SetValuedClassifier(make_pipeline(TfidfVectorizer(), lr(C=10.0))).fit(docs, y)
    outer = make_pipeline(TfidfVectorizer(), SetValuedClassifier(lr(C=10.0))).fit(docs, y)
    queries = ["red apple", "apple wine", "red", "something unknown"]
    P = inner.predict_proba(queries)
    np.testing.assert_allclose(P, outer.predict_proba(queries))
    ref = svbop.predict_sets(P, F1)
    assert ref.sizes.max() == 2 and ref.sizes.min() == 1
    got = inner.predict_sets(queries, output=output)
    via_pipeline = outer[-1].predict_sets(outer[:-1].transform(queries), output=output)
    if output == "labels":
        _assert_same_sets(got, [inner.classes_[s] for s in ref], inner.classes_)
        _assert_same_sets(via_pipeline, got, inner.classes_)
    else:
        np.testing.assert_array_equal(got, ref.to_mask())
        np.testing.assert_array_equal(via_pipeline, got)
    # the scorer sees the set classifier inside the pipeline
    assert make_set_scorer(F1)(outer, queries, ["fruit"] * 4) == inner.score(queries, ["fruit"] * 4)


# --- the scorer ---------------------------------------------------------------------------------------


def _by_hand_mean_f1(P, classes, y):
    """Mean F1 set utility of the Bayes-optimal sets, by hand from svbop.predict_sets' indices."""
    sets = svbop.predict_sets(P, F1)
    return np.mean([2 / (s.size + 1) if label in classes[s] else 0.0 for s, label in zip(sets, y)])


def test_gridsearch_selects_the_C_with_the_best_mean_set_utility_by_hand(digits):
    X, _, y, _ = digits
    Cs = [1e-3, 1e-2, 1e-1, 1.0]
    folds = KFold(3, shuffle=True, random_state=0)
    by_hand = []
    for C in Cs:
        per_fold = []
        for train, test in folds.split(X):
            model = lr(C=C).fit(X[train], y[train])
            per_fold.append(_by_hand_mean_f1(model.predict_proba(X[test]), model.classes_, y[test]))
        by_hand.append(np.mean(per_fold))
    assert len(set(np.round(by_hand, 12))) == len(Cs)  # a unique best
    best_C = Cs[int(np.argmax(by_hand))]

    plain = GridSearchCV(lr(), {"C": Cs}, scoring=make_set_scorer(F1), cv=folds).fit(X, y)
    assert plain.best_params_["C"] == best_C
    np.testing.assert_allclose(plain.cv_results_["mean_test_score"], by_hand, rtol=1e-10)
    # the same search through the meta-estimator, scored by its score method
    meta = GridSearchCV(SetValuedClassifier(lr(), F1), {"estimator__C": Cs}, cv=folds).fit(X, y)
    assert meta.best_params_["estimator__C"] == best_C
    np.testing.assert_allclose(meta.cv_results_["mean_test_score"], by_hand, rtol=1e-10)


def test_scorer_gives_zero_utility_to_labels_the_model_has_not_seen(digits):
    X_train, X_test, y_train, y_test = digits
    keep = y_train != 9
    model = lr(C=0.05).fit(X_train[keep], y_train[keep])  # never saw a 9
    assert 9 in y_test and 9 not in model.classes_
    by_hand = _by_hand_mean_f1(model.predict_proba(X_test), model.classes_, y_test)
    assert make_set_scorer(F1)(model, X_test, y_test) == pytest.approx(by_hand, rel=1e-12)
    nines = y_test == 9
    assert make_set_scorer(F1)(model, X_test[nines], y_test[nines]) == 0.0
    clf = SetValuedClassifier(lr(C=0.05)).fit(X_train[keep], y_train[keep])
    assert clf.score(X_test[nines], y_test[nines]) == 0.0
    assert set_scorers(F1)["set_coverage"](clf, X_test[nines], y_test[nines]) == 0.0


def test_cross_validate_with_a_class_missing_from_a_training_fold():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    y = np.array(["a", "b"] * 19 + ["lonely", "b"])  # "lonely" is in one test fold only
    X[y == "a"] += 2
    scores = cross_validate(lr(), X, y, cv=KFold(4), scoring=set_scorers(F1))
    lonely_fold = 3
    model = lr().fit(X[:30], y[:30])
    assert "lonely" not in model.classes_
    expected = _by_hand_mean_f1(model.predict_proba(X[30:]), model.classes_, y[30:])
    assert scores["test_set_fbeta_1"][lonely_fold] == pytest.approx(expected, rel=1e-12)


def test_scorer_scores_a_set_classifiers_own_sets(digits):
    X_train, X_test, y_train, y_test = digits
    top2 = TopSClassifier(lr(C=0.05), s=2).fit(X_train, y_train)
    cover = np.mean([y in s for s, y in zip(top2.predict_sets(X_test), y_test)])
    assert make_set_scorer(F1)(top2, X_test, y_test) == pytest.approx(2 / 3 * cover, rel=1e-12)
    assert make_set_scorer(F1, metric="coverage")(top2, X_test, y_test) == pytest.approx(cover, rel=1e-12)
    assert make_set_scorer(F1, metric="size")(top2, X_test, y_test) == 2.0
    assert make_set_scorer("precision")(top2, X_test, y_test) == pytest.approx(cover / 2, rel=1e-12)


def test_scorer_names_follow_the_paper_labels():
    scorers = set_scorers(F1, "credal:delta=2.2,gamma=1.2", "log")
    assert list(scorers) == ["set_fbeta_1", "set_credal_2.2_1.2", "set_log", "set_coverage", "set_size"]
    assert make_set_scorer("set_credal_2.2_1.2").utility == svbop.utility("credal:delta=2.2,gamma=1.2")
    assert repr(make_set_scorer("set_fbeta_1")) == "make_set_scorer('fbeta:beta=1')"
    with pytest.raises(ValueError, match="utility='set_fbeta' is not a scorer name"):
        make_set_scorer("set_fbeta")
    with pytest.raises(ValueError, match="metric must be one of"):
        make_set_scorer(F1, metric="accuracy")


def test_top1_sets_score_the_accuracy_in_cross_validate(digits):
    X, _, y, _ = digits
    folds = KFold(3, shuffle=True, random_state=1)
    sets = cross_validate(TopSClassifier(lr(C=0.05), s=1), X, y, cv=folds, scoring=set_scorers(F1))
    acc = cross_validate(lr(C=0.05), X, y, cv=folds, scoring="accuracy")["test_score"]
    np.testing.assert_allclose(sets["test_set_fbeta_1"], acc, rtol=1e-12)
    np.testing.assert_allclose(sets["test_set_coverage"], acc, rtol=1e-12)
    np.testing.assert_array_equal(sets["test_set_size"], 1.0)


def test_permutation_importance_with_a_set_scorer(digits):
    X_train, X_test, y_train, y_test = digits
    clf = SetValuedClassifier(lr(C=0.05)).fit(X_train, y_train)
    constant = np.flatnonzero(np.ptp(X_test, axis=0) == 0)  # pixels that are blank everywhere
    assert constant.size
    result = permutation_importance(clf, X_test, y_test, scoring=make_set_scorer(F1), n_repeats=2, random_state=0)
    np.testing.assert_array_equal(result.importances[constant], 0.0)
    assert result.importances_mean.max() > 0


# --- the baselines ---------------------------------------------------------------------------------


def test_top_s_sets_are_svbop_top_s_sets_mapped_to_classes(digits):
    X_train, X_test, y_train, _ = digits
    labels = np.array(list("abcdefghij"))
    clf = TopSClassifier(lr(), s=3).fit(X_train, labels[y_train])
    P = clf.predict_proba(X_test)
    _assert_same_sets(clf.predict_sets(X_test), [clf.classes_[s] for s in svbop.top_s_sets(P, 3)], clf.classes_)
    # more than K: every class, most probable first
    wide = TopSClassifier(lr(), s=50).fit(X_train, labels[y_train])
    assert all(s.size == 10 for s in wide.predict_sets(X_test))


def test_threshold_is_tuned_on_the_held_out_part_as_svbop_tune_threshold(digits):
    X, _, y, _ = digits
    clf = ThresholdSetClassifier(lr(C=0.05), F1, validation_size=0.25, random_state=3).fit(X, y)
    X_fit, X_val, y_fit, y_val = train_test_split(X, y, test_size=0.25, random_state=3, stratify=y)
    model = lr(C=0.05).fit(X_fit, y_fit)
    np.testing.assert_allclose(clf.estimator_.coef_, model.coef_)
    theta, scores = svbop.tune_threshold(model.predict_proba(X_val), y_val, F1)
    assert clf.theta_ == theta
    np.testing.assert_allclose(clf.scores_, scores)
    P = clf.predict_proba(X)
    _assert_same_sets(clf.predict_sets(X), [clf.classes_[s] for s in svbop.threshold_sets(P, theta)], clf.classes_)


def test_prefit_threshold_and_conformal_use_all_of_fit_data(digits):
    X_train, X_test, y_train, y_test = digits
    model = lr(C=0.05).fit(X_train, y_train)
    P_val = model.predict_proba(X_test)
    thr = ThresholdSetClassifier(model, F1, cv="prefit").fit(X_test, y_test)
    assert thr.estimator_ is model
    assert thr.theta_ == svbop.tune_threshold(P_val, y_test, F1)[0]
    icp = ConformalSetClassifier(model, epsilon=0.1, cv="prefit").fit(X_test, y_test)
    assert icp.quantile_ == svbop.conformal_quantile(P_val, y_test, 0.1)
    _assert_same_sets(
        icp.predict_sets(X_test), [model.classes_[s] for s in svbop.conformal_sets(P_val, icp.quantile_)], icp.classes_
    )
    # split conformal's guarantee holds on the calibration data itself (k-th smallest score)
    assert make_set_scorer(F1, metric="coverage")(icp, X_test, y_test) >= 0.9
    with pytest.raises(sklearn.exceptions.NotFittedError):
        ConformalSetClassifier(lr(), cv="prefit").fit(X_test, y_test)


def test_conformal_calibration_labels_unseen_in_fitting_have_nonconformity_one(digits):
    X_train, X_test, y_train, y_test = digits
    keep = y_train != 9
    model = lr(C=0.05).fit(X_train[keep], y_train[keep])
    icp = ConformalSetClassifier(model, epsilon=0.05, cv="prefit").fit(X_test, y_test)
    P = model.predict_proba(X_test)
    pos = np.searchsorted(model.classes_, y_test)
    nonconf = np.where(y_test == 9, 1.0, 1.0 - P[np.arange(y_test.size), np.minimum(pos, 8)])
    k = int(np.ceil((y_test.size + 1) * (1 - 0.05)))
    assert icp.quantile_ == pytest.approx(np.sort(nonconf)[k - 1], rel=1e-12)
    # threshold tuning: the unseen rows score 0 under every theta, the argmax is that of the rest
    thr = ThresholdSetClassifier(model, F1, cv="prefit").fit(X_test, y_test)
    seen = y_test != 9
    theta, scores = svbop.tune_threshold(P[seen], y_test[seen], F1)
    assert thr.theta_ == theta
    np.testing.assert_allclose(thr.scores_, scores * seen.mean())


CONFORMAL_VARIANTS = [
    {"score": "lac"},
    {"score": "lac", "class_conditional": True},
    {"score": "aps", "random_state": 0},
    {"score": "aps", "class_conditional": True, "empty": "keep", "randomized": False},
    {"score": "raps", "k_reg": 2, "lam": 0.05, "random_state": 0},
    {"score": "saps", "lam": 0.1, "random_state": 3},
    {"score": "topk"},
    {"score": "margin", "class_conditional": "clustered", "random_state": 0},
    {"score": "fbeta"},
    {"score": "credal", "gamma": 1.2},
]


def _conformal(model, params, **kw):
    """The classifier for the predictor parameters ``params`` (its ``conformity_score`` is their ``score``)."""
    params = dict(params)
    return ConformalSetClassifier(model, conformity_score=params.pop("score"), **params, **kw)


@pytest.mark.parametrize("params", CONFORMAL_VARIANTS, ids=lambda p: "-".join(map(str, p.values())))
def test_conformal_scores_are_svbop_conformal_set_predictor_mapped_to_classes(digits, params):
    X_train, X_test, y_train, y_test = digits
    model = lr(C=0.05).fit(X_train, y_train)
    X_cal, X_new, y_cal, y_new = train_test_split(X_test, y_test, test_size=0.5, random_state=1, stratify=y_test)
    clf = _conformal(model, params, epsilon=0.1, cv="prefit").fit(X_cal, y_cal)
    reference = svbop.ConformalSetPredictor(0.1, **params).fit(model.predict_proba(X_cal), y_cal)
    expected = [model.classes_[s] for s in reference.predict(model.predict_proba(X_new))]
    _assert_same_sets(clf.predict_sets(X_new), expected, clf.classes_)
    assert clf.quantile_ == reference.quantile_
    for attr in ("quantiles_", "parameter_"):
        assert hasattr(clf, attr) == hasattr(reference, attr)
    if params.get("class_conditional"):
        np.testing.assert_array_equal(clf.quantiles_, reference.quantiles_)
    if params.get("class_conditional") is True:  # not clustered: its guarantee is per cluster
        # Mondrian calibration covers every class of the calibration data itself at 1 - epsilon
        covered = svbop.SetPredictions.from_sets(clf.predict_sets(X_cal, output="indices"), 10)
        per_class, worst = svbop.metrics.class_conditional_coverage(covered, y_cal)
        assert worst >= 0.9
    if params["score"] in ("fbeta", "credal"):
        assert clf.parameter_ == reference.parameter_
        # the sets are the Bayes-optimal sets of the calibrated family member
        expected = _mapped(model.predict_proba(X_new), reference.utility_, clf.classes_)
        _assert_same_sets(clf.predict_sets(X_new), expected, clf.classes_)
    # marginal coverage holds on the calibration data itself (the k-th smallest score)
    assert make_set_scorer(F1, metric="coverage")(clf, X_cal, y_cal) >= 0.9


@pytest.mark.parametrize("params", CONFORMAL_VARIANTS[:5], ids=lambda p: "-".join(map(str, p.values())))
def test_conformal_labels_unseen_in_fitting_calibrate_as_a_zero_probability_class(digits, params):
    X_train, X_test, y_train, y_test = digits
    keep = y_train != 9
    model = lr(C=0.05).fit(X_train[keep], y_train[keep])
    clf = _conformal(model, params, epsilon=0.1, cv="prefit").fit(X_test, y_test)
    P = model.predict_proba(X_test)
    P_aug = np.hstack([P, np.zeros((P.shape[0], 1))])
    codes = np.searchsorted(model.classes_, y_test)  # 9 -> 9, the added column
    reference = svbop.ConformalSetPredictor(0.1, **params).fit(P_aug, codes)
    assert clf.quantile_ == reference.quantile_
    if params.get("class_conditional"):
        np.testing.assert_array_equal(clf.quantiles_, reference.quantiles_[:9])
    expected = [s[s < 9].tolist() for s in reference.predict(P_aug)]  # the added class is dropped
    assert clf.predict_sets(X_test, output="indices").to_list() == expected
    assert clf.predict_sets(X_test, output="indicator").shape == (y_test.size, 9)


def test_conformal_refit_forgets_the_attributes_of_an_earlier_score(digits):
    X_train, X_test, y_train, y_test = digits
    model = lr(C=0.05).fit(X_train, y_train)
    clf = ConformalSetClassifier(model, epsilon=0.1, cv="prefit", conformity_score="aps", class_conditional=True)
    clf.fit(X_test, y_test)
    assert hasattr(clf, "quantiles_") and not hasattr(clf, "parameter_")
    clf.set_params(conformity_score="fbeta", class_conditional=False).fit(X_test, y_test)
    assert hasattr(clf, "parameter_") and not hasattr(clf, "quantiles_")


# --- HierarchicalSetClassifier ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def digit_tree():
    """A random tree over the ten digits (leaves at depths 1 to 3)."""
    return random_tree(10, [0.2, 0.4, 0.4], rng=3)


@pytest.mark.parametrize("max_nodes", [1, 2, 3, 10])
def test_hierarchical_sets_are_svbop_predict_sets_hierarchical_mapped_to_classes(digits, digit_tree, max_nodes):
    X_train, X_test, y_train, _ = digits
    clf = HierarchicalSetClassifier(lr(C=0.05), F1, digit_tree, max_nodes).fit(X_train, y_train)
    P = clf.predict_proba(X_test)
    expected = svbop.predict_sets_hierarchical(P, F1, digit_tree, max_nodes)
    got = clf.predict_sets(X_test, output="indices")
    assert got == expected
    np.testing.assert_array_equal(got.expected_utility, expected.expected_utility)
    np.testing.assert_array_equal(clf.leaf_of_class_, np.arange(10))
    _, nodes = svbop.predict_sets_hierarchical(P, F1, digit_tree, max_nodes, return_nodes=True)
    assert [v.tolist() for v in clf.predict_nodes(X_test)] == nodes.to_list()
    assert all(len(v) <= max_nodes for v in clf.predict_nodes(X_test))
    if max_nodes == 10:  # no restriction left: the Bayes-optimal sets
        _assert_same_sets(clf.predict_sets(X_test), _mapped(P, F1, clf.classes_), clf.classes_)


def test_hierarchical_string_labels_map_to_leaves_by_name(digits, digit_tree):
    X_train, X_test, y_train, _ = digits
    names = [f"digit {d}" for d in range(10)]
    # leaf j is named after digit (7 * j) % 10, so the leaves are not in the order of classes_
    leaf_digit = (7 * np.arange(10)) % 10
    node_names = [names[d] for d in leaf_digit] + [f"inner {i}" for i in range(digit_tree.n_nodes - 10)]
    tree = Hierarchy(digit_tree.parent, 10, node_names)
    labels = np.array(names)[y_train]
    clf = HierarchicalSetClassifier(lr(C=0.05), F1, tree, 2).fit(X_train, labels)
    assert clf.classes_.tolist() == sorted(names)
    np.testing.assert_array_equal(np.array(node_names)[clf.leaf_of_class_], clf.classes_)
    # the reference: the same model on integer labels, columns put in leaf order by hand
    P = clf.predict_proba(X_test)  # columns: digits 0..9 (sorted names)
    by_leaf = svbop.predict_sets_hierarchical(P[:, leaf_digit], F1, tree, 2)
    expected = [np.array(names)[leaf_digit[s]] for s in by_leaf]
    _assert_same_sets(clf.predict_sets(X_test), expected, clf.classes_)
    # the nodes name the same classes as the sets
    leaves_below = {v: set() for v in range(tree.n_nodes)}
    for leaf in range(10):
        for v in tree.path(leaf):
            leaves_below[int(v)].add(node_names[leaf])
    for nodes, labels in zip(clf.predict_nodes(X_test), clf.predict_sets(X_test)):
        assert set().union(*(leaves_below[int(v)] for v in nodes)) == set(labels.tolist())


def test_hierarchical_without_a_tree_is_flat(digits):
    X_train, X_test, y_train, _ = digits
    clf = HierarchicalSetClassifier(lr(C=0.05), "credal:delta=1.6,gamma=0.6").fit(X_train, y_train)
    sizes = clf.predict_sets(X_test, output="indices").sizes
    assert set(sizes.tolist()) <= {1, 10} and clf.hierarchy_.n_nodes == 11


@pytest.mark.parametrize("labels, tree, message", [
    ("int", random_tree(9, [1.0], rng=0), r"hierarchy has 9 leaves but fit saw 10 classes"),
    ("str", random_tree(10, [1.0], rng=0), r"label 'd0' is not the name of a leaf of the hierarchy"),
    ("str", Hierarchy(np.r_[np.full(10, 10), -1], 10),
     r"hierarchy has no node_names, so its leaves are the labels 0..9"),
    ("int", "tree.txt", r"hierarchy must be a svbop.datasets.Hierarchy or None, got str"),
])
def test_hierarchical_refuses_a_tree_that_does_not_fit_the_labels(digits, labels, tree, message):
    X_train, _, y_train, _ = digits
    y = y_train if labels == "int" else np.array([f"d{v}" for v in y_train])
    with pytest.raises(ValueError, match=message):
        HierarchicalSetClassifier(lr(), F1, tree, 2).fit(X_train, y)
    with pytest.raises(ValueError, match=r"max_nodes must be an integer >= 1, got 0"):
        HierarchicalSetClassifier(lr(), F1, None, 0).fit(X_train, y_train)


def test_split_passes_per_sample_fit_params_with_the_rows():
    class Recorder(_RowsAreProbabilities):
        def fit(self, X, y, sample_weight=None, tag=None):
            self.seen_ = (np.asarray(X)[:, -1].copy(), np.asarray(sample_weight).copy(), tag)
            return super().fit(X, y)

    X = np.hstack([np.ones((20, 2)), np.arange(20)[:, None]])
    y = np.array([0, 1] * 10)
    clf = ConformalSetClassifier(Recorder(), random_state=0).fit(X, y, sample_weight=np.arange(20) * 10, tag="t")
    rows, weights, tag = clf.estimator_.seen_
    assert rows.size == 16 and tag == "t"
    np.testing.assert_array_equal(weights, rows * 10)


def test_compare_the_four_in_one_cross_validate(digits):
    X, _, y, _ = digits
    folds = KFold(3, shuffle=True, random_state=2)
    models = {
        "svbop": SetValuedClassifier(lr(C=0.05), F1),
        "top2": TopSClassifier(lr(C=0.05), s=2),
        "threshold": ThresholdSetClassifier(lr(C=0.05), F1, random_state=0),
        "icp": ConformalSetClassifier(lr(C=0.05), epsilon=0.1, random_state=0),
    }
    res = {k: cross_validate(m, X, y, cv=folds, scoring=set_scorers(F1)) for k, m in models.items()}
    np.testing.assert_array_equal(res["top2"]["test_set_size"], 2.0)
    # SVBOP's sets are Bayes-optimal for F1 under the same model that top-2 uses
    assert np.all(res["svbop"]["test_set_fbeta_1"] >= res["top2"]["test_set_fbeta_1"] - 0.02)


# --- validation at the boundary -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "estimator, message",
    [
        (SetValuedClassifier(lr(), "fbeta:beta=-1"), r"utility='fbeta:beta=-1'"),
        (SetValuedClassifier(lr(), 3), r"utility=3"),
        (SetValuedClassifier(lr(), calibrate="platt"), r"calibrate must be None, 'sigmoid' or 'isotonic'"),
        (TopSClassifier(lr(), s=0), r"s must be an integer >= 1, got 0"),
        (TopSClassifier(lr(), s=1.5), r"s must be an integer >= 1, got 1.5"),
        (ThresholdSetClassifier(lr(), cv=5), r"cv must be 'split' or 'prefit', got 5"),
        (ThresholdSetClassifier(lr(), validation_size=1.5), r"validation_size must be a fraction"),
        (ThresholdSetClassifier(lr(), thetas=[0.5, 2]), r"thetas must be a non-empty sequence"),
        (ThresholdSetClassifier(lr(), thetas=[]), r"thetas must be a non-empty sequence"),
        (ConformalSetClassifier(lr(), epsilon=1.0), r"epsilon must be a number in \(0, 1\), got 1.0"),
        (ConformalSetClassifier(lr(), empty="none"), r"empty must be 'top1' or 'keep'"),
        (ConformalSetClassifier(lr(), calibration_size=0), r"calibration_size must be a fraction"),
        (ConformalSetClassifier(lr(), cv="prefit", calibrate="sigmoid"), r"calibrate='sigmoid' needs cv='split'"),
        (ConformalSetClassifier(lr(), conformity_score="bogus"),
         r"score must be one of lac, aps, raps, saps, topk, margin, fbeta, credal, hierarchical; got 'bogus'"),
        (ConformalSetClassifier(lr(), conformity_score="fbeta", class_conditional=True),
         r"class_conditional=True is for score"),
        (ConformalSetClassifier(lr(), lam=0.5), r"k_reg and lam are RAPS parameters"),
        (ConformalSetClassifier(lr(), conformity_score="raps", k_reg=-1), r"k_reg must be an integer >= 0, got -1"),
        (ConformalSetClassifier(lr(), conformity_score="credal"), r"score='credal' needs gamma"),
        (ConformalSetClassifier(lr(), gamma=1.0), r"gamma is the credal family's parameter"),
    ],
)
def test_invalid_parameters_raise_naming_the_parameter(digits, estimator, message):
    X_train, _, y_train, _ = digits
    with pytest.raises(ValueError, match=message):
        estimator.fit(X_train, y_train)


def test_invalid_output_and_unfitted_use(digits):
    X_train, X_test, y_train, _ = digits
    clf = SetValuedClassifier(lr())
    with pytest.raises(sklearn.exceptions.NotFittedError):
        clf.predict_sets(X_test)
    clf.fit(X_train, y_train)
    with pytest.raises(ValueError, match="output must be one of 'labels', 'indicator', 'indices', got 'mask'"):
        clf.predict_sets(X_test, output="mask")
    with pytest.raises(ValueError, match="needs an estimator with predict_proba"):
        make_set_scorer(F1)(LinearSVC().fit(X_train, y_train), X_test, y_train[: len(X_test)])


def test_encode_labels_maps_unknown_and_mixed_labels_to_minus_one():
    np.testing.assert_array_equal(encode_labels(["b", "q", "a", "b"], np.array(["a", "b"])), [1, -1, 0, 1])
    np.testing.assert_array_equal(encode_labels([3.0, 5, 4], np.array([3, 5])), [0, 1, -1])
    np.testing.assert_array_equal(encode_labels(np.array([1, "x", None], dtype=object), np.array([1])), [0, -1, -1])
    with pytest.raises(ValueError, match="y must be 1-D"):
        encode_labels(np.ones((2, 2)), np.array([1]))
