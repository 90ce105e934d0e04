"""The scikit-learn estimators with issue 48's guarantees: RiskControlSetClassifier, and
ConformalSetClassifier with covariate-shift weights and overlapping group columns."""

import numpy as np
import pytest

pytest.importorskip("sklearn")

from sklearn.datasets import make_classification  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from svbop.conformal import ConditionalSetPredictor, ConformalSetPredictor, RiskControlSetPredictor  # noqa: E402
from svbop.sklearn import ConformalSetClassifier, RiskControlSetClassifier  # noqa: E402


@parametrize_with_checks([RiskControlSetClassifier(LogisticRegression(), alpha=0.2)])
def test_scikit_learn_conventions(estimator, check):
    check(estimator)


def _data(n=1200, seed=0):
    X, y = make_classification(n, n_features=8, n_informative=5, n_classes=4, random_state=seed)
    return X, y


def test_risk_control_classifier_is_the_library_predictor_on_the_held_out_rows():
    X, y = _data()
    model = LogisticRegression(max_iter=500).fit(X[:600], y[:600])
    cost = np.array([1.0, 2.0, 1.0, 3.0])
    crc = RiskControlSetClassifier(model, 0.3, loss="class_cost", cost=cost, conformity_score="aps", cv="prefit")
    crc.fit(X[600:900], y[600:900])
    ref = RiskControlSetPredictor(0.3, "class_cost", "aps", cost=cost).fit(model.predict_proba(X[600:900]), y[600:900])
    assert crc.lambda_ == ref.lambda_
    np.testing.assert_array_equal(crc.predict_sets(X[900:], output="indicator"),
                                  ref.predict_mask(model.predict_proba(X[900:])))


def test_weights_and_group_columns_follow_the_split():
    """cv="split": the calibration rows' weights / group columns are the rows split off with X."""
    X, y = _data()
    w = np.exp(X[:, 0] / 2)
    Phi = np.stack([X[:, 1] > 0, X[:, 2] > 0.5], axis=1)
    a = ConformalSetClassifier(LogisticRegression(max_iter=500), 0.1, random_state=3).fit(X, y, weights=w)
    b = ConformalSetClassifier(LogisticRegression(max_iter=500), 0.1, random_state=3).fit(X, y)
    assert a.predictor_._weighted is not None
    sets = a.predict_sets(X[:50], weights=w[:50], output="indicator")
    assert sets.shape == (50, 4)
    with pytest.raises(ValueError, match="weights is required"):
        a.predict_sets(X[:5])
    assert a.score(X[:50], y[:50], weights=w[:50]) >= 0
    # equal weights: the unweighted sets
    c = ConformalSetClassifier(LogisticRegression(max_iter=500), 0.1, random_state=3).fit(X, y, weights=np.ones(y.size))
    np.testing.assert_array_equal(c.predict_sets(X, weights=np.ones(y.size), output="indicator"),
                                  b.predict_sets(X, output="indicator"))
    g = ConformalSetClassifier(LogisticRegression(max_iter=500), 0.1, random_state=3).fit(X, y, group_columns=Phi)
    assert isinstance(g.predictor_, ConditionalSetPredictor)
    assert g.predict_sets(X[:20], group_columns=Phi[:20], output="indicator").shape == (20, 4)
    with pytest.raises(ValueError, match="group_columns is required"):
        g.predict_sets(X[:5])
    with pytest.raises(ValueError, match="group_columns given but the classifier was calibrated without them"):
        b.predict_sets(X[:5], group_columns=Phi[:5])
    with pytest.raises(ValueError, match="weights has 10 weights but X has 1200 rows"):
        ConformalSetClassifier(LogisticRegression(), 0.1).fit(X, y, weights=w[:10])


def test_prefit_weighted_is_the_library_predictor():
    X, y = _data(seed=1)
    model = LogisticRegression(max_iter=500).fit(X[:600], y[:600])
    w = np.exp(X[:, 0] / 2)
    clf = ConformalSetClassifier(model, 0.1, cv="prefit").fit(X[600:900], y[600:900], weights=w[600:900])
    ref = ConformalSetPredictor(0.1).fit(model.predict_proba(X[600:900]), y[600:900], weights=w[600:900])
    np.testing.assert_array_equal(clf.predict_sets(X[900:], weights=w[900:], output="indicator"),
                                  ref.predict_mask(model.predict_proba(X[900:]), weights=w[900:]))
