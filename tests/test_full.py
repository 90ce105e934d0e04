"""SVBOP-Full from a linear model (svbop.full): the same sets as predict_sets on the softmax."""

import numpy as np
import pytest
import scipy.sparse as sp

import svbop
from svbop.full import linear_scores, predict_sets_full, predict_sets_full_naive
from svbop.linear import LinearModel


@pytest.fixture(scope="module", params=["sparse", "dense"])
def model(request):
    rng = np.random.default_rng(7)
    K, D = 150, 60
    W = sp.random(K, D, density=0.2, random_state=7, format="csr") * 4
    b = rng.normal(size=K)
    return LinearModel(W if request.param == "sparse" else W.toarray(), b, np.arange(K))


@pytest.fixture(scope="module")
def X():
    return sp.random(400, 60, density=0.15, random_state=8, format="csr")


def test_linear_scores_equal_decision_function(model, X):
    S = linear_scores(model, X, n_jobs=2)
    if sp.issparse(model.W):
        np.testing.assert_array_equal(S, model.decision_function(X))  # same summation order
    else:
        np.testing.assert_allclose(S, model.decision_function(X), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", svbop.STANDARD_UTILITIES)
def test_full_from_features_equals_predict_sets_on_probabilities(model, X, spec):
    expected = svbop.predict_sets(model.predict_proba(X), spec)
    got = predict_sets_full(model, X, spec, expected_utility=True, n_jobs=2)
    bad = [i for i in range(len(got)) if not np.array_equal(got[i], expected[i])]
    assert not bad, f"rows {bad[:5]} differ"
    np.testing.assert_allclose(got.expected_utility, expected.expected_utility, rtol=1e-12)
    assert predict_sets_full(model, X[:3], spec).expected_utility is None


@pytest.mark.parametrize("spec", svbop.STANDARD_UTILITIES)
def test_naive_full_as_in_the_paper_equals_full(model, X, spec):
    """The paper's cost model (softmax over all K, full sort, Algorithm 1) gives Full's sets."""
    full = predict_sets_full(model, X, spec, expected_utility=True)
    naive = predict_sets_full_naive(model, X, spec, n_jobs=2)
    assert [s.tolist() for s in naive] == [s.tolist() for s in full]
    np.testing.assert_allclose(naive.expected_utility, full.expected_utility, rtol=1e-12)
    expected = svbop.predict_sets(model.predict_proba(X), spec)
    assert [s.tolist() for s in naive] == [s.tolist() for s in expected]


def test_naive_full_ties_and_long_sets():
    """Exactly tied classes come in increasing class id, and sets longer than 64 classes fit."""
    K = 100
    model = LinearModel(np.zeros((K, 3)), np.zeros(K), np.arange(K))
    X = np.ones((2, 3))
    for spec in ("fbeta:beta=5", "recall", "fbeta:beta=1"):
        naive = predict_sets_full_naive(model, X, spec)
        expected = svbop.predict_sets(model.predict_proba(X), spec)
        assert [s.tolist() for s in naive] == [s.tolist() for s in expected]
    assert predict_sets_full_naive(model, X, "recall")[0].tolist() == list(range(K))


def test_dense_features_and_long_sets(model):
    """Flat scores: every class is in the recall-optimal set (longer than the first buffer)."""
    X = np.zeros((2, model.n_features))
    flat = LinearModel(np.zeros_like(model.W.toarray() if sp.issparse(model.W) else model.W),
                       np.zeros(model.n_classes), np.arange(model.n_classes))
    sets = predict_sets_full(flat, X, "fbeta:beta=5")
    expected = svbop.predict_sets(flat.predict_proba(X), "fbeta:beta=5")
    assert sets.sizes.tolist() == expected.sizes.tolist() == [model.n_classes] * 2
    np.testing.assert_array_equal(sets[1], np.arange(model.n_classes))


def test_peaked_rows_stay_exact_when_few_classes_are_candidates():
    """Extreme scores: one class carries almost all mass; exp() of the others underflows."""
    W = sp.csr_matrix(np.diag([800.0, 1.0, 1.0, 790.0]))
    model = LinearModel(W, np.zeros(4), np.arange(4))
    X = np.eye(4)
    for spec in ("fbeta:beta=1", "fbeta:beta=5", "precision"):
        assert_sets = predict_sets_full(model, X, spec)
        expected = svbop.predict_sets(model.predict_proba(X), spec)
        assert [s.tolist() for s in assert_sets] == [s.tolist() for s in expected]


def test_refuses_partial_models_and_bad_features(model):
    part = LinearModel(np.ones((2, 3)), np.zeros(2), np.array([3, 5]))
    with pytest.raises(ValueError, match="merge the parts"):
        predict_sets_full(part, np.ones((1, 3)), "fbeta:beta=1")
    with pytest.raises(ValueError, match="X has 7 features, the model has 60"):
        predict_sets_full(model, np.ones((1, 7)), "fbeta:beta=1")
    with pytest.raises(ValueError, match="NaN"):
        predict_sets_full(model, np.full((1, model.n_features), np.nan), "fbeta:beta=1")
