"""ConformalSetClassifier with group-conditional (Mondrian) calibration (issue 38, item 3)."""

import copy

import numpy as np
import pytest

pytest.importorskip("sklearn")
from sklearn.linear_model import LogisticRegression  # noqa: E402

from svbop.conformal import ConformalSetPredictor  # noqa: E402
from svbop.metrics import set_utility  # noqa: E402
from svbop.sklearn import ConformalSetClassifier  # noqa: E402


def _data(rng, n=600):
    X = rng.standard_normal((n, 4))
    y = (X[:, 0] + 0.8 * rng.standard_normal(n) > 0).astype(int) + (X[:, 1] > 0.5)
    groups = np.where(X[:, 2] > 0, "right", "left")
    return X, y, groups


@pytest.mark.parametrize("cv", ["split", "prefit"])
def test_groups_calibrate_one_threshold_per_group_on_the_calibration_rows(rng, cv):
    X, y, groups = _data(rng)
    est = LogisticRegression(max_iter=500)
    if cv == "prefit":
        est.fit(X[:300], y[:300])
        Xc, yc, gc = X[300:], y[300:], groups[300:]
    else:
        Xc, yc, gc = X, y, groups
    clf = ConformalSetClassifier(est, 0.1, conformity_score="aps", cv=cv, random_state=0).fit(Xc, yc, groups=gc)
    plain = ConformalSetClassifier(est, 0.1, conformity_score="aps", cv=cv, random_state=0).fit(Xc, yc)
    # the same split with and without groups: the same fitted model
    np.testing.assert_array_equal(clf.predict_proba(X), plain.predict_proba(X))
    assert clf.predictor_.groups_.tolist() == ["left", "right"]
    # the predictor equals a Mondrian ConformalSetPredictor on the calibration rows' probabilities
    if cv == "prefit":
        P_cal, y_cal, g_cal = est.predict_proba(Xc), yc, gc
        ref = ConformalSetPredictor(0.1, score="aps", random_state=0).fit(P_cal, y_cal, groups=g_cal)
        np.testing.assert_array_equal(clf.predictor_.group_quantiles_, ref.group_quantiles_)
    assert sum(clf.predictor_.group_counts_) == (300 if cv == "prefit" else 120)
    twins = copy.deepcopy(clf), copy.deepcopy(clf)  # each call draws fresh uniforms (APS; issue 47)
    sets = clf.predict_sets(X, groups=groups, output="indices")
    expected = twins[0].predictor_.predict(clf.predict_proba(X), groups=groups)
    assert sets == expected
    assert twins[1].score(X, y, groups=groups) == pytest.approx(set_utility(expected, y, "fbeta:beta=1").mean())
    with pytest.raises(ValueError, match="groups is required: the predictor was calibrated per group"):
        clf.predict_sets(X)
    with pytest.raises(ValueError, match="groups given to predict but the predictor was calibrated without groups"):
        plain.predict_sets(X, groups=groups)


def test_groups_of_the_wrong_length_are_refused(rng):
    X, y, groups = _data(rng)
    with pytest.raises(ValueError, match="groups has 10 entries but X has 600 rows"):
        ConformalSetClassifier(LogisticRegression(), 0.1, random_state=0).fit(X, y, groups=groups[:10])
