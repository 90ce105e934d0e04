"""svbop for scikit-learn: set-valued classifiers and set-utility scorers (needs scikit-learn >= 1.3).

Any scikit-learn classifier with ``predict_proba`` (or any classifier at all, with
``calibrate="sigmoid"``) becomes a set-valued predictor:

* :class:`SetValuedClassifier` predicts the Bayes-optimal set of a utility (SVBOP-Full,
  :func:`svbop.predict_sets`);
* :class:`TopSClassifier`, :class:`ThresholdSetClassifier` and :class:`ConformalSetClassifier`
  are the paper's baselines (Section 5.2; :mod:`svbop.baselines`), the last also with the APS and
  RAPS scores, class-conditional thresholds, and Bayes-optimal sets calibrated for coverage;
* :class:`HierarchicalSetClassifier` predicts the best set among the unions of at most
  ``max_nodes`` nodes of a class hierarchy (:func:`svbop.predict_sets_hierarchical`);
* :class:`RiskControlSetClassifier`: conformal risk control, ``E[loss] <= alpha`` for a loss of
  the sets (:class:`svbop.conformal.RiskControlSetPredictor`).  :class:`ConformalSetClassifier`
  also takes covariate-shift ``weights`` and overlapping ``group_columns`` in ``fit`` and ``predict_sets``.

All five are meta-estimators: ``fit`` fits a clone of the wrapped estimator, ``predict_proba``
passes through, ``predict`` returns the most probable label (so every scikit-learn tool sees a
classifier), ``predict_sets`` returns the sets as labels of ``classes_``, and ``score`` is the
mean set utility.  :func:`make_set_scorer` turns a utility into a ``scoring=`` callable for
``GridSearchCV``, ``cross_validate`` or ``permutation_importance``; :func:`set_scorers` makes the
dictionary of several at once.

Only this module imports scikit-learn; ``import svbop`` does not.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

try:
    from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import Pipeline
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted, column_or_1d
except ImportError as err:  # pragma: no cover - exercised only without scikit-learn
    raise ImportError(
        "svbop.sklearn needs scikit-learn >= 1.3 (pip install -e '.[sklearn]' in a checkout); the rest of svbop does not"
    ) from err

from .baselines import PAPER_THRESHOLDS, ConformalSetPredictor, threshold_sets, top_s_sets, tune_threshold
from .datasets.base import Hierarchy
from .hierarchical import predict_sets_hierarchical
from .metrics import check_groups, set_utility
from .search import predict_sets as _bayes_optimal_sets
from .sets import SetPredictions
from .utilities import UTILITY_FAMILIES, Utility, utility as _utility

__all__ = [
    "SetValuedClassifier",
    "TopSClassifier",
    "ThresholdSetClassifier",
    "ConformalSetClassifier",
    "HierarchicalSetClassifier",
    "RiskControlSetClassifier",
    "SetScorer",
    "make_set_scorer",
    "set_scorers",
    "encode_labels",
]

_OUTPUTS = ("labels", "indicator", "indices")
_CALIBRATIONS = (None, "sigmoid", "isotonic")
_METRICS = ("utility", "coverage", "size")


# --- helpers ---------------------------------------------------------------------------------------


def _check_utility(u, name: str = "utility", K: int | None = None) -> Utility:
    """A :class:`Utility` from a spec string or a Utility; errors name the parameter."""
    try:
        return _utility(u, K=K)
    except ValueError as err:
        raise ValueError(f"{name}={u!r}: {err}") from None


def encode_labels(y, classes) -> np.ndarray:
    """Position of every label of ``y`` in ``classes``; -1 for a label not among them.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Labels (any type scikit-learn accepts: integers, strings, ...).
    classes : array-like of shape (n_classes,)
        An estimator's ``classes_``.

    Returns
    -------
    ndarray of int64, shape (n_samples,)
    """
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {y.shape}")
    lookup = {c: i for i, c in enumerate(np.asarray(classes).tolist())}
    try:  # map the distinct labels only
        uniq, inverse = np.unique(y, return_inverse=True)
    except TypeError:  # labels of mixed types cannot be sorted: map them one by one
        return np.array([lookup.get(v, -1) for v in y.tolist()], dtype=np.int64)
    codes = np.array([lookup.get(v, -1) for v in uniq.tolist()], dtype=np.int64)
    return codes[np.asarray(inverse).reshape(-1)]


def _weighted_mean(values: np.ndarray, sample_weight) -> float:
    if sample_weight is None:
        return float(np.mean(values))
    w = np.asarray(sample_weight, dtype=np.float64).reshape(-1)
    if w.shape != values.shape:
        raise ValueError(f"sample_weight has {w.size} entries but there are {values.size} samples")
    return float(np.average(values, weights=w))


def _per_sample_utility(sets: SetPredictions, codes: np.ndarray, u: Utility) -> np.ndarray:
    """``u(y_i, Y_i)`` via :func:`svbop.set_utility`; 0 where the label is not a class (code -1)."""
    if codes.size != len(sets):
        raise ValueError(f"y has {codes.size} labels but there are {len(sets)} sets")
    known = codes >= 0
    if known.all():
        return set_utility(sets, codes, u)
    out = np.zeros(len(sets))
    rows = np.flatnonzero(known)
    if rows.size:
        out[rows] = set_utility(sets.take(rows), codes[rows], u)
    return out


def _format_sets(sets: SetPredictions, classes: np.ndarray, output: str):
    if output == "indices":
        return sets
    if output == "indicator":
        return sets.to_mask()
    if len(sets) == 0:
        return []
    return np.split(classes[sets.indices], sets.indptr[1:-1])


def _n_samples(y) -> int:
    return int(np.shape(y)[0])


def _is_sample_aligned(value, n: int) -> bool:
    if isinstance(value, (str, bytes)) or not (hasattr(value, "__len__") or hasattr(value, "shape")):
        return False
    try:
        return _n_samples(value) == n
    except (TypeError, IndexError):
        return False


def _check_holdout_size(size, name: str):
    if isinstance(size, bool) or not isinstance(size, numbers.Real):
        raise ValueError(f"{name} must be a fraction in (0, 1) or a number of samples >= 1, got {size!r}")
    if isinstance(size, numbers.Integral):
        if size < 1:
            raise ValueError(f"{name} must be a fraction in (0, 1) or a number of samples >= 1, got {size!r}")
        return int(size)
    if not 0.0 < float(size) < 1.0:
        raise ValueError(f"{name} must be a fraction in (0, 1) or a number of samples >= 1, got {size!r}")
    return float(size)


def _holdout_split(X, y, fit_params: dict, size, random_state):
    """Split ``X, y`` (and the per-sample fit parameters) into a fitting and a held-out part.

    Stratified by ``y`` when every class can be (at least two members each and a held-out part of
    at least one sample per class), otherwise a plain random split.
    """
    n = _n_samples(y)
    aligned = [k for k, v in fit_params.items() if _is_sample_aligned(v, n)]
    arrays = [fit_params[k] for k in aligned]
    try:
        parts = train_test_split(X, y, *arrays, test_size=size, random_state=random_state, stratify=y)
    except ValueError:  # a class too small to stratify (or a bad size, which raises again below)
        parts = train_test_split(X, y, *arrays, test_size=size, random_state=random_state)
    X_fit, X_out, y_fit, y_out = parts[:4]
    params = dict(fit_params)
    params.update({k: parts[4 + 2 * i] for i, k in enumerate(aligned)})
    return X_fit, y_fit, params, X_out, y_out


# --- the estimators --------------------------------------------------------------------------------


class _SetClassifier(ClassifierMixin, MetaEstimatorMixin, BaseEstimator):
    """Shared machinery: fit a (calibrated) clone, pass probabilities through, format sets.

    Subclasses implement ``_sets(P) -> SetPredictions`` and, when they learn something from
    held-out data, extend :meth:`fit`.
    """

    _required_parameters = ["estimator"]

    # --- fitting ---------------------------------------------------------------------------------
    def _check_common(self):
        if self.calibrate not in _CALIBRATIONS:
            raise ValueError(f"calibrate must be None, 'sigmoid' or 'isotonic', got {self.calibrate!r}")
        if self.calibrate is None and not hasattr(self.estimator, "predict_proba"):
            raise ValueError(
                f"estimator={self.estimator!r} has no predict_proba: use a probabilistic classifier "
                "or pass calibrate='sigmoid' (or 'isotonic')"
            )

    @staticmethod
    def _check_y(y):
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        return y

    def _model(self):
        est = clone(self.estimator)
        if self.calibrate is None:
            return est
        return CalibratedClassifierCV(est, method=self.calibrate)

    def _adopt(self, model):
        """Take ``model`` (fitted) as ``estimator_``; copy its ``classes_`` and input attributes."""
        self.estimator_ = model
        self.classes_ = np.asarray(model.classes_)
        for attr in ("n_features_in_", "feature_names_in_"):
            if hasattr(model, attr):
                setattr(self, attr, getattr(model, attr))
            elif attr in self.__dict__:  # from an earlier fit
                delattr(self, attr)
        self.utility_ = _check_utility(self.utility, K=len(self.classes_))

    def _fit_model(self, X, y, fit_params):
        self._adopt(self._model().fit(X, y, **fit_params))

    def fit(self, X, y, **fit_params):
        """Fit a clone of ``estimator`` (calibrated if ``calibrate`` is set) on ``(X, y)``.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
            Whatever the wrapped estimator accepts (e.g. raw documents for a text pipeline).
        y : array-like of shape (n_samples,)
            Class labels.
        **fit_params : dict
            Passed to the wrapped estimator's ``fit``.

        Returns
        -------
        self
        """
        self._check_common()
        self._check_params()
        y = self._check_y(y)
        self._fit_model(X, y, fit_params)
        return self

    def _check_params(self):
        _check_utility(self.utility)

    # --- prediction --------------------------------------------------------------------------
    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities of the wrapped estimator, columns in the order of ``classes_``.

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
        """
        check_is_fitted(self, "estimator_")
        return self.estimator_.predict_proba(X)

    def predict(self, X) -> np.ndarray:
        """The most probable label of every sample (lowest class index among ties).

        This is the first label of every set of :meth:`predict_sets` (for non-empty sets).

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        P = self.predict_proba(X)
        return self.classes_[np.argmax(P, axis=1)]

    def predict_sets(self, X, output: str = "labels"):
        """The predicted set of every sample.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
        output : {"labels", "indicator", "indices"}
            ``"labels"``: a list of ``n_samples`` 1-D arrays of labels (dtype of ``classes_``),
            each in decreasing probability (ties: order of ``classes_``).  ``"indicator"``: a
            boolean array of shape (n_samples, n_classes), column ``j`` for ``classes_[j]``.
            ``"indices"``: the library's :class:`svbop.SetPredictions` of column indices into
            ``classes_``.

        Returns
        -------
        list of ndarray, ndarray of bool, or SetPredictions
        """
        if output not in _OUTPUTS:
            raise ValueError(f"output must be one of {', '.join(map(repr, _OUTPUTS))}, got {output!r}")
        sets = self._sets(self.predict_proba(X))
        return _format_sets(sets, self.classes_, output)

    def score(self, X, y, sample_weight=None) -> float:
        """Mean set utility ``u(y, Y) = g(|Y|) [y in Y]`` of the predicted sets under ``utility``.

        A label that is not among ``classes_`` is in no set (utility 0).

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), optional
            Weights of the mean.

        Returns
        -------
        float
        """
        sets = self.predict_sets(X, output="indices")
        codes = encode_labels(column_or_1d(y), self.classes_)
        return _weighted_mean(_per_sample_utility(sets, codes, self.utility_), sample_weight)

    def _sets(self, P) -> SetPredictions:  # pragma: no cover - abstract
        raise NotImplementedError

    # --- scikit-learn tags (>= 1.6): the input is the wrapped estimator's business ----------------
    def __sklearn_tags__(self):
        from sklearn.utils import get_tags

        tags = super().__sklearn_tags__()
        inner = get_tags(self.estimator).input_tags
        tags.input_tags.sparse = inner.sparse
        tags.input_tags.allow_nan = inner.allow_nan
        return tags


class SetValuedClassifier(_SetClassifier):
    """Bayes-optimal set-valued prediction (SVBOP-Full) on top of any probabilistic classifier.

    ``predict_sets`` returns, for every sample, the set ``Y`` maximising the expected utility
    ``g(|Y|) P(Y|x)`` under the wrapped estimator's probabilities (the paper's Eq. 3, computed
    exactly by :func:`svbop.predict_sets`).

    Parameters
    ----------
    estimator : classifier
        Unfitted scikit-learn classifier with ``predict_proba`` (any classifier if
        ``calibrate`` is set); a clone is fitted.
    utility : str or Utility, default "fbeta:beta=1"
        The set utility, as a spec string (see :func:`svbop.utility`) or a :class:`svbop.Utility`.
    calibrate : {None, "sigmoid", "isotonic"}, default None
        Wrap the estimator in scikit-learn's ``CalibratedClassifierCV(method=calibrate)``
        (5-fold; the sets are only as good as the probabilities).

    Attributes
    ----------
    estimator_ : classifier
        The fitted clone (a ``CalibratedClassifierCV`` when ``calibrate`` is set).
    classes_ : ndarray of shape (n_classes,)
        Class labels, the columns of ``predict_proba``.
    utility_ : Utility
        The utility, bound to ``n_classes``.
    n_features_in_, feature_names_in_
        As the fitted estimator has them.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = SetValuedClassifier(LogisticRegression(max_iter=1000)).fit(X, y)
    >>> clf.predict_sets(X[[0, 70]])
    [array([0]), array([2, 1])]
    """

    def __init__(self, estimator, utility="fbeta:beta=1", *, calibrate=None):
        self.estimator = estimator
        self.utility = utility
        self.calibrate = calibrate

    def _sets(self, P) -> SetPredictions:
        return _bayes_optimal_sets(P, self.utility_)


class TopSClassifier(_SetClassifier):
    """The ``s`` most probable classes (the paper's top-s baseline, Section 5.2).

    Parameters
    ----------
    estimator : classifier
        Unfitted classifier with ``predict_proba`` (or any, with ``calibrate``).
    s : int, default 1
        Set size; with fewer than ``s`` classes the set holds all of them.
    utility : str or Utility, default "fbeta:beta=1"
        Used by :meth:`score` only (e.g. ``GridSearchCV`` over ``s`` then picks the best ``s``
        for this utility).
    calibrate : {None, "sigmoid", "isotonic"}, default None
        As in :class:`SetValuedClassifier`.

    Attributes
    ----------
    estimator_, classes_, utility_, n_features_in_, feature_names_in_
        As in :class:`SetValuedClassifier`.
    """

    def __init__(self, estimator, s=1, *, utility="fbeta:beta=1", calibrate=None):
        self.estimator = estimator
        self.s = s
        self.utility = utility
        self.calibrate = calibrate

    def _check_params(self):
        super()._check_params()
        if isinstance(self.s, bool) or not isinstance(self.s, numbers.Integral) or self.s < 1:
            raise ValueError(f"s must be an integer >= 1, got {self.s!r}")

    def _sets(self, P) -> SetPredictions:
        P = np.asarray(P)
        return top_s_sets(P, min(int(self.s), P.shape[1]))


class _HeldOutSetClassifier(_SetClassifier):
    """Baselines that learn one number on held-out data: fit on one part, tune on the other."""

    _holdout_name = "validation_size"

    def _check_params(self):
        super()._check_params()
        if self.cv not in ("split", "prefit"):
            raise ValueError(f"cv must be 'split' or 'prefit', got {self.cv!r}")
        _check_holdout_size(getattr(self, self._holdout_name), self._holdout_name)

    def _fit_model(self, X, y, fit_params):
        if self.cv == "prefit":
            if self.calibrate is not None:
                raise ValueError(f"calibrate={self.calibrate!r} needs cv='split' (cv='prefit' fits nothing)")
            check_is_fitted(self.estimator)
            self._adopt(self.estimator)
            X_out, y_out = X, y
        else:
            size = _check_holdout_size(getattr(self, self._holdout_name), self._holdout_name)
            X_fit, y_fit, params, X_out, y_out = _holdout_split(X, y, fit_params, size, self.random_state)
            self._adopt(self._model().fit(X_fit, y_fit, **params))
        self._learn(self.estimator_.predict_proba(X_out), encode_labels(y_out, self.classes_))

    def _learn(self, P, codes):  # pragma: no cover - abstract
        raise NotImplementedError


class ThresholdSetClassifier(_HeldOutSetClassifier):
    """Smallest set of most probable classes with mass ``>= theta``, ``theta`` tuned for a utility.

    The paper's threshold baseline (Section 5.2, Eq. 9): ``theta`` is chosen among ``thetas``
    (default the paper's ``0.1, 0.2, ..., 1.0``) by the mean utility on a validation set
    (:func:`svbop.tune_threshold`; ties go to the smaller ``theta``).  With ``cv="split"`` the
    estimator is fitted on ``1 - validation_size`` of the data passed to :meth:`fit` and
    ``theta`` is tuned on the rest (stratified when possible); the estimator is not refitted
    afterwards, as in the paper.  With ``cv="prefit"`` the estimator is already fitted and all
    of ``fit``'s data is the validation set.

    Parameters
    ----------
    estimator : classifier
        Unfitted (``cv="split"``) or fitted (``cv="prefit"``) classifier with ``predict_proba``.
    utility : str or Utility, default "fbeta:beta=1"
        The utility ``theta`` is tuned for, and the one :meth:`score` reports.
    thetas : sequence of float, default (0.1, 0.2, ..., 1.0)
        Candidate thresholds in [0, 1].
    cv : {"split", "prefit"}, default "split"
    validation_size : float or int, default 0.2
        Held-out fraction (or number of samples) with ``cv="split"``.
    random_state : int, RandomState instance or None
        Seed of the split; an integer also seeds the randomised scores and the clustered split.
    calibrate : {None, "sigmoid", "isotonic"}, default None
        As in :class:`SetValuedClassifier` (``cv="split"`` only).

    Attributes
    ----------
    theta_ : float
        The tuned threshold.
    scores_ : ndarray of shape (len(thetas),)
        Mean validation utility of every candidate (labels unseen in fitting count as 0).
    estimator_, classes_, utility_, n_features_in_, feature_names_in_
        As in :class:`SetValuedClassifier`.
    """

    def __init__(
        self,
        estimator,
        utility="fbeta:beta=1",
        *,
        thetas=PAPER_THRESHOLDS,
        cv="split",
        validation_size=0.2,
        random_state=None,
        calibrate=None,
    ):
        self.estimator = estimator
        self.utility = utility
        self.thetas = thetas
        self.cv = cv
        self.validation_size = validation_size
        self.random_state = random_state
        self.calibrate = calibrate

    def _check_params(self):
        super()._check_params()
        try:
            thetas = np.asarray(self.thetas, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            thetas = np.empty(0)
        if thetas.size == 0 or not np.all((thetas >= 0) & (thetas <= 1)):
            raise ValueError(f"thetas must be a non-empty sequence of numbers in [0, 1], got {self.thetas!r}")

    def _learn(self, P, codes):
        thetas = np.asarray(self.thetas, dtype=np.float64).reshape(-1)
        known = codes >= 0
        if not known.any():  # every candidate scores 0: the smallest wins, as in tune_threshold
            self.theta_, self.scores_ = float(thetas.min()), np.zeros(thetas.size)
            return
        # rows whose label the model has never seen score 0 whatever theta is
        theta, scores = tune_threshold(P[known], codes[known], self.utility_, thetas)
        self.theta_, self.scores_ = theta, scores * known.mean()

    def _sets(self, P) -> SetPredictions:
        return threshold_sets(P, self.theta_)


class ConformalSetClassifier(_HeldOutSetClassifier):
    """Split (inductive) conformal prediction on top of any probabilistic classifier.

    A thin scikit-learn wrapper of :class:`svbop.ConformalSetPredictor`: the estimator is fitted
    on one part of the data, the predictor is calibrated on the wrapped estimator's probabilities
    of the other, and ``predict_sets`` returns its sets.  With the default ``score="lac"``
    (nonconformity ``1 - P(y|x)``) this is the paper's ICP baseline (Section 5.2): ``q`` is the
    ``ceil((n+1)(1-epsilon))``-th smallest calibration score and the set is
    ``{c : 1 - P(c|x) <= q}``, covering the true class with probability at least
    ``1 - epsilon``.  ``conformity_score="aps"`` and ``"raps"`` rank the classes by decreasing probability
    and score a class by the mass ranked at or before it (RAPS: ``+ lam * max(0, rank - k_reg)``);
    ``class_conditional=True`` calibrates one ``q`` per class (coverage ``>= 1 - epsilon`` for
    every class); ``conformity_score="fbeta"`` (``"credal"`` with ``gamma``) calibrates the family's
    parameter so that the Bayes-optimal sets of :func:`svbop.predict_sets` cover with
    probability at least ``1 - epsilon``.  See :class:`svbop.ConformalSetPredictor` for the
    definitions and the proofs.

    A calibration label the model has never seen gets a class of probability 0 of its own
    (nonconformity 1 under LAC); that class is dropped from the predicted sets.

    **Group-conditional (Mondrian) calibration**: ``fit(X, y, groups=g)`` calibrates one
    threshold (F-beta/credal: one parameter) per group on the calibration rows' groups (with
    ``cv="split"`` the groups are split with ``X``, the same split as without them), and
    ``predict_sets(X, groups=g)`` / ``score(X, y, groups=g)`` take the groups of their rows:
    coverage at least ``1 - epsilon`` within every group (see
    :class:`svbop.ConformalSetPredictor`; small or unseen groups get the marginal threshold, with
    a warning).  ``predictor_.groups_`` and ``predictor_.group_quantiles_`` describe the fit.

    Parameters
    ----------
    estimator : classifier
        Unfitted (``cv="split"``) or fitted (``cv="prefit"``) classifier with ``predict_proba``.
    epsilon : float, default 0.1
        Significance level in (0, 1) (the paper: 0.01 and 0.10).
    conformity_score : {"lac", "aps", "raps", "saps", "topk", "margin", "fbeta", "credal", "hierarchical"}, default "lac"
        The predictor's ``score`` (see above; named as in MAPIE, since ``score`` is the
        scikit-learn method that reports the mean set utility).  ``"hierarchical"``: sets that are
        unions of at most ``max_nodes`` nodes of ``hierarchy`` (:mod:`svbop.conformal.hierarchical`).
    hierarchy : svbop.datasets.Hierarchy, optional
        ``"hierarchical"`` only: a class tree whose leaves ``0 .. K-1`` are the estimator's
        ``classes_`` in their sorted order.
    max_nodes : int, default 1
        ``"hierarchical"`` only: the most nodes a set may join.
    class_conditional : bool, "clustered" or "rc3p", default False
        One threshold per class, or per cluster of classes (``"clustered"``, Ding et al. 2023), or one
        threshold and one rank limit per class (``"rc3p"``, Shi et al. 2024), for
        the ranked scores (``lac``, ``aps``, ``raps``, ``saps``, ``topk``, ``margin``).
    k_reg : int, default 1
        RAPS: ranks up to ``k_reg`` are not penalised (``"raps"`` only).
    lam : float, optional
        RAPS: penalty per rank beyond ``k_reg`` (default 0); SAPS: the weight of a rank (default 0.2).
    randomized : bool, optional
        APS, RAPS, SAPS: the randomised score (the default for these three: coverage
        ``1 - epsilon`` rather than above it) or the deterministic one (``False``).
    n_clusters : int, optional
        ``class_conditional="clustered"``: the number of clusters (default: the authors' rule).
    gamma : float, optional
        The credal family's fixed ``gamma > 0`` (``"credal"`` only).
    utility : str or Utility, default "fbeta:beta=1"
        Used by :meth:`score` only.
    empty : {"top1", "keep"}, optional
        What an empty conformal set becomes: the most probable class, or stays empty (utility 0).
        Default: ``"keep"`` for the randomised scores (their coverage is exact only then),
        ``"top1"`` otherwise.
    cv : {"split", "prefit"}, default "split"
        ``"split"``: fit on ``1 - calibration_size`` of the data, calibrate on the rest
        (stratified when possible).  ``"prefit"``: the estimator is fitted, all of ``fit``'s data
        calibrates.
    calibration_size : float or int, default 0.2
        Calibration fraction (or number of samples) with ``cv="split"``.
    random_state : int, RandomState instance or None
        Seed of the split; an integer also seeds the randomised scores and the clustered split.
    calibrate : {None, "sigmoid", "isotonic"}, default None
        Probability calibration of the estimator (``cv="split"`` only); unrelated to the
        conformal calibration.

    Attributes
    ----------
    predictor_ : ConformalSetPredictor
        The calibrated predictor (over ``classes_``, plus one class of probability 0 when
        calibration labels were unseen in fitting).
    quantile_ : float
        The calibrated threshold ``q`` on the score (``inf`` when there are too few calibration
        samples for ``epsilon``: every class is kept); as the predictor's ``quantile_``.
    quantiles_ : ndarray of shape (n_classes,)
        Per-class thresholds, in the order of ``classes_`` (``class_conditional=True`` only).
    parameter_ : float
        The calibrated ``beta`` (``"fbeta"``) or ``delta`` (``"credal"``).
    estimator_, classes_, utility_, n_features_in_, feature_names_in_
        As in :class:`SetValuedClassifier` (``utility_`` is the scoring utility).

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> X, y = load_iris(return_X_y=True)
    >>> aps = ConformalSetClassifier(LogisticRegression(max_iter=1000), 0.1, conformity_score="aps", random_state=0)
    >>> aps.fit(X, y).predict_sets(X[[0]])
    [array([0])]
    """

    _holdout_name = "calibration_size"

    def __init__(
        self,
        estimator,
        epsilon=0.1,
        *,
        conformity_score="lac",
        class_conditional=False,
        k_reg=1,
        lam=None,
        gamma=None,
        utility="fbeta:beta=1",
        empty=None,
        cv="split",
        calibration_size=0.2,
        random_state=None,
        calibrate=None,
        hierarchy=None,
        max_nodes=1,
        randomized=None,
        n_clusters=None,
    ):
        self.estimator = estimator
        self.epsilon = epsilon
        self.conformity_score = conformity_score
        self.hierarchy = hierarchy
        self.max_nodes = max_nodes
        self.class_conditional = class_conditional
        self.k_reg = k_reg
        self.lam = lam
        self.gamma = gamma
        self.utility = utility
        self.empty = empty
        self.cv = cv
        self.calibration_size = calibration_size
        self.random_state = random_state
        self.calibrate = calibrate
        self.randomized = randomized
        self.n_clusters = n_clusters

    def _predictor(self) -> ConformalSetPredictor:
        """An unfitted predictor; its constructor checks the conformal parameters."""
        return ConformalSetPredictor(
            self.epsilon, score=self.conformity_score, class_conditional=self.class_conditional, k_reg=self.k_reg,
            lam=self.lam, empty=self.empty, gamma=self.gamma, hierarchy=self.hierarchy, max_nodes=self.max_nodes,
            randomized=self.randomized, n_clusters=self.n_clusters,
            # the seed of the split also seeds the randomised scores and the clustered split
            random_state=self.random_state if isinstance(self.random_state, (np.random.RandomState, np.random.Generator))
            or (isinstance(self.random_state, numbers.Integral) and not isinstance(self.random_state, bool)
                and self.random_state >= 0) else None,
        )

    def _check_params(self):
        super()._check_params()
        if self.empty not in (None, "top1", "keep"):
            raise ValueError(f"empty must be 'top1' or 'keep', got {self.empty!r}")
        if isinstance(self.epsilon, bool) or not isinstance(self.epsilon, numbers.Real) or not 0 < self.epsilon < 1:
            raise ValueError(f"epsilon must be a number in (0, 1), got {self.epsilon!r}")
        self._predictor()

    def fit(self, X, y, groups=None, *, weights=None, group_columns=None, **fit_params):
        """Fit the estimator and calibrate the conformal predictor (see :meth:`_SetClassifier.fit`).

        Parameters
        ----------
        X, y, **fit_params
            As in :class:`SetValuedClassifier`.
        groups : array-like of shape (n_samples,), optional
            Group of every sample (integers, booleans or strings): Mondrian calibration on the
            calibration samples' groups; :meth:`predict_sets` and :meth:`score` then need theirs.
        weights : array-like of shape (n_samples,), optional
            Covariate shift: every sample's likelihood ratio (test over calibration covariates);
            the calibration samples' weights give each test sample its weighted quantile
            (:mod:`svbop.conformal.weighted`); :meth:`predict_sets` and :meth:`score` then need
            the test samples' ``weights``.
        group_columns : array-like of shape (n_samples, d), optional
            Overlapping groups as 0/1 indicator columns: coverage ``1 - epsilon`` within every group
            (:class:`svbop.conformal.ConditionalSetPredictor`, deterministic scores); the test
            samples' ``group_columns`` are then needed.
        """
        self._fit_extra = {"groups": groups, "weights": weights, "group_columns": group_columns}
        try:
            return super().fit(X, y, **fit_params)
        finally:
            del self._fit_extra

    def _fit_model(self, X, y, fit_params):
        extra = {k: v for k, v in getattr(self, "_fit_extra", {}).items() if v is not None}
        self._calibration_extra = {}
        if not extra:
            return super()._fit_model(X, y, fit_params)
        from .conformal.conditional import check_group_columns
        from .conformal.weighted import check_weights

        n = _n_samples(y)
        checks = {"groups": lambda v: check_groups(v, n, "groups", "X"),
                  "weights": lambda v: check_weights(v, n, "weights", "X"),
                  "group_columns": lambda v: check_group_columns(v, n, "group_columns", "X")}
        extra = {k: checks[k](v) for k, v in extra.items()}
        if self.cv == "prefit":
            self._calibration_extra = extra
            return super()._fit_model(X, y, fit_params)
        from sklearn.utils import _safe_indexing

        # split the row numbers as _holdout_split splits X (the split does not depend on what is
        # split), then take every aligned array, the groups included, by them
        size = _check_holdout_size(self.calibration_size, self._holdout_name)
        rows_fit, _, _, rows_out, _ = _holdout_split(np.arange(n), y, {}, size, self.random_state)
        params = {k: _safe_indexing(v, rows_fit) if _is_sample_aligned(v, n) else v for k, v in fit_params.items()}
        self._adopt(self._model().fit(_safe_indexing(X, rows_fit), y[rows_fit], **params))
        self._calibration_extra = {k: v[rows_out] for k, v in extra.items()}
        self._learn(self.estimator_.predict_proba(_safe_indexing(X, rows_out)),
                    encode_labels(y[rows_out], self.classes_))

    def _learn(self, P, codes):
        P = np.asarray(P, dtype=np.float64)
        unseen = codes < 0
        # a zero-probability column for the labels the model has never seen (dropped in _sets)
        self._unseen_column_ = bool(unseen.any())
        if self._unseen_column_ and self.conformity_score == "hierarchical":
            raise ValueError("conformity_score='hierarchical': some calibration labels are classes the estimator never "
                             "saw, which the hierarchy's leaves (the estimator's classes_) cannot hold; give the "
                             "estimator every class")
        if self._unseen_column_:
            P = np.hstack([P, np.zeros((P.shape[0], 1))])
            codes = np.where(unseen, P.shape[1] - 1, codes)
        extra = self.__dict__.pop("_calibration_extra", None) or {}
        if "group_columns" in extra:
            if len(extra) > 1:
                raise ValueError("group_columns cannot be combined with groups or weights: pass one of them")
            if self.randomized or self.class_conditional:
                raise ValueError("group_columns (ConditionalSetPredictor) takes the deterministic scores without"
                                 " class_conditional: pass randomized=False (or leave it None) and"
                                 " class_conditional=False")
            from .conformal import ConditionalSetPredictor

            predictor = ConditionalSetPredictor(self.epsilon, self.conformity_score, k_reg=self.k_reg, lam=self.lam,
                                                empty=self.empty or "top1").fit(P, codes, extra["group_columns"])
        else:
            predictor = self._predictor().fit(P, codes, groups=extra.get("groups"), weights=extra.get("weights"))
        self.predictor_ = predictor
        self.quantile_ = getattr(predictor, "quantile_", math.nan)
        for attr in ("quantiles_", "parameter_"):
            if hasattr(predictor, attr):
                value = getattr(predictor, attr)
                setattr(self, attr, value[: len(self.classes_)] if attr == "quantiles_" else value)
            elif attr in self.__dict__:  # from an earlier fit
                delattr(self, attr)

    def predict_sets(self, X, output: str = "labels", groups=None, *, weights=None, group_columns=None):
        """The predicted set of every sample (see :meth:`_SetClassifier.predict_sets`); ``groups``,
        ``weights``, ``group_columns``: the samples' own, each required when ``fit`` had it (and
        refused otherwise)."""
        if output not in _OUTPUTS:
            raise ValueError(f"output must be one of {', '.join(map(repr, _OUTPUTS))}, got {output!r}")
        return _format_sets(self._sets(self.predict_proba(X), groups, weights, group_columns), self.classes_, output)

    def score(self, X, y, sample_weight=None, groups=None, *, weights=None, group_columns=None) -> float:
        """Mean set utility of the predicted sets under ``utility`` (see
        :meth:`_SetClassifier.score`); ``groups``, ``weights``, ``group_columns`` as in :meth:`predict_sets`."""
        sets = self.predict_sets(X, output="indices", groups=groups, weights=weights, group_columns=group_columns)
        codes = encode_labels(column_or_1d(y), self.classes_)
        return _weighted_mean(_per_sample_utility(sets, codes, self.utility_), sample_weight)

    def _sets(self, P, groups=None, weights=None, group_columns=None) -> SetPredictions:
        check_is_fitted(self, "predictor_")
        from .conformal import ConditionalSetPredictor

        conditional = isinstance(self.predictor_, ConditionalSetPredictor)
        if conditional and group_columns is None:
            raise ValueError("group_columns is required: the classifier was calibrated with group_columns")
        if group_columns is not None and not conditional:
            raise ValueError("group_columns given but the classifier was calibrated without them: pass"
                             " fit(X, y, group_columns=...) too")

        def predict(P):
            if conditional:
                if groups is not None or weights is not None:
                    raise ValueError("groups and weights are not for a classifier calibrated with group_columns")
                return self.predictor_.predict(P, group_columns)
            return self.predictor_.predict(P, groups=groups, weights=weights)

        if not self._unseen_column_:
            return predict(P)
        P = np.asarray(P, dtype=np.float64)
        K = P.shape[1]
        sets = predict(np.hstack([P, np.zeros((P.shape[0], 1))]))
        keep = sets.indices < K
        kept_before = np.concatenate([[0], np.cumsum(keep)])  # kept entries before each position
        return SetPredictions(sets.indices[keep], kept_before[sets.indptr], K)


class RiskControlSetClassifier(_HeldOutSetClassifier):
    """Conformal risk control (:class:`svbop.conformal.RiskControlSetPredictor`) on top of any
    probabilistic classifier: sets ``{c : s(x, c) <= lambda_}`` with ``E[loss] <= alpha``.

    The estimator is fitted on one part of the data and ``lambda_`` chosen on the other
    (``cv="split"``, ``calibration_size``), or the estimator is already fitted and all of
    ``(X, y)`` calibrates (``cv="prefit"``).  ``loss``: ``"miscoverage"``, ``"class_cost"``
    (``cost``: one per class of ``classes_``, in that order), ``"hierarchical"`` (``hierarchy``:
    a tree whose leaves ``0 .. K-1`` are the classes of ``classes_``, in that order), or a callable
    ``loss(mask, y) -> (n,)`` in ``[0, B]`` (mask columns and ``y`` in the order of ``classes_``).
    Every calibration label must be a class the estimator has seen.

    Attributes
    ----------
    predictor_ : RiskControlSetPredictor
    lambda_ : float

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> X, y = load_iris(return_X_y=True)
    >>> crc = RiskControlSetClassifier(LogisticRegression(max_iter=1000), 0.1, random_state=0).fit(X, y)
    >>> len(crc.predict_sets(X[:3]))
    3
    """

    _holdout_name = "calibration_size"

    def __init__(self, estimator, alpha=0.1, *, loss="miscoverage", conformity_score="lac", cost=None,
                 hierarchy=None, B=None, k_reg=1, lam=None, empty="keep", utility="fbeta:beta=1", cv="split",
                 calibration_size=0.2, random_state=None, calibrate=None):
        self.estimator = estimator
        self.alpha = alpha
        self.loss = loss
        self.conformity_score = conformity_score
        self.cost = cost
        self.hierarchy = hierarchy
        self.B = B
        self.k_reg = k_reg
        self.lam = lam
        self.empty = empty
        self.utility = utility
        self.cv = cv
        self.calibration_size = calibration_size
        self.random_state = random_state
        self.calibrate = calibrate

    def _predictor(self):
        from .conformal import RiskControlSetPredictor

        return RiskControlSetPredictor(self.alpha, self.loss, self.conformity_score, cost=self.cost,
                                       hierarchy=self.hierarchy, B=self.B, k_reg=self.k_reg, lam=self.lam,
                                       empty=self.empty)

    def _check_params(self):
        super()._check_params()
        self._predictor()

    def _learn(self, P, codes):
        if np.any(codes < 0):
            raise ValueError("some calibration labels are classes the estimator never saw: risk control's losses are"
                             " over the estimator's classes_; give the estimator every class")
        self.predictor_ = self._predictor().fit(np.asarray(P, dtype=np.float64), codes)
        self.lambda_ = self.predictor_.lambda_

    def _sets(self, P) -> SetPredictions:
        check_is_fitted(self, "predictor_")
        return self.predictor_.predict(P)


class HierarchicalSetClassifier(_SetClassifier):
    """The best set made of at most ``max_nodes`` nodes of a class hierarchy.

    ``predict_sets`` returns, for every sample, the set ``Y`` with the largest expected utility
    ``g(|Y|) P(Y|x)`` among the unions of at most ``max_nodes`` nodes of ``hierarchy`` (a node
    stands for every class below it), computed exactly by :func:`svbop.predict_sets_hierarchical`
    under the wrapped estimator's probabilities.  ``max_nodes=1`` predicts one node of the tree
    (a class, or an internal node when unsure); ``max_nodes >= n_classes`` gives the
    unrestricted Bayes-optimal sets of :class:`SetValuedClassifier`.

    **Classes and leaves.**  Leaf ``j`` of the hierarchy (node ``j < hierarchy.n_classes``)
    stands for the label ``j`` when the labels seen in ``fit`` are exactly the integers
    ``0 .. n_classes - 1``; otherwise for the label whose ``str`` is the leaf's name in
    ``hierarchy.node_names``.  ``fit`` refuses a hierarchy whose leaves and the labels do not
    match one to one (a label without a leaf, a leaf without a label in the training data).
    Without a hierarchy (``None``, default) the tree is flat: one root over every class.

    Parameters
    ----------
    estimator : classifier
        Unfitted scikit-learn classifier with ``predict_proba`` (any classifier if
        ``calibrate`` is set); a clone is fitted.
    utility : str or Utility, default "fbeta:beta=1"
        The set utility (see :func:`svbop.utility`).
    hierarchy : svbop.datasets.Hierarchy, optional
        The tree over the classes; default a flat tree (root over every class).
    max_nodes : int, default 1
        The largest number of nodes whose union a set may be.
    calibrate : {None, "sigmoid", "isotonic"}, default None
        As in :class:`SetValuedClassifier`.

    Attributes
    ----------
    hierarchy_ : svbop.datasets.Hierarchy
        The tree used (``hierarchy``, or the flat tree built in ``fit``).
    leaf_of_class_ : ndarray of int64, shape (n_classes,)
        The hierarchy's leaf of every class of ``classes_``.

    :meth:`predict_nodes` returns the nodes whose union each set is (e.g. "animal" rather than
    its three classes).
    estimator_, classes_, utility_, n_features_in_, feature_names_in_
        As in :class:`SetValuedClassifier`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> from svbop.datasets import Hierarchy
    >>> X, y = load_iris(return_X_y=True)
    >>> tree = Hierarchy(np.array([4, 3, 3, 4, -1]), n_classes=3)  # {0, {1, 2}}
    >>> clf = HierarchicalSetClassifier(LogisticRegression(max_iter=1000), hierarchy=tree).fit(X, y)
    >>> clf.predict_sets(X[[0, 70]])
    [array([0]), array([2, 1])]
    """

    def __init__(self, estimator, utility="fbeta:beta=1", hierarchy=None, max_nodes=1, *, calibrate=None):
        self.estimator = estimator
        self.utility = utility
        self.hierarchy = hierarchy
        self.max_nodes = max_nodes
        self.calibrate = calibrate

    def _check_params(self):
        super()._check_params()
        if self.hierarchy is not None and not isinstance(self.hierarchy, Hierarchy):
            raise ValueError(
                f"hierarchy must be a svbop.datasets.Hierarchy or None, got {type(self.hierarchy).__name__}")
        if isinstance(self.max_nodes, bool) or not isinstance(self.max_nodes, numbers.Integral) or self.max_nodes < 1:
            raise ValueError(f"max_nodes must be an integer >= 1, got {self.max_nodes!r}")

    def _fit_model(self, X, y, fit_params):
        super()._fit_model(X, y, fit_params)
        self.hierarchy_, self.leaf_of_class_ = _leaves_of_classes(self.hierarchy, self.classes_)
        self._class_of_leaf = np.argsort(self.leaf_of_class_)

    def _predict_hierarchical(self, P, return_nodes: bool = False):
        check_is_fitted(self, "leaf_of_class_")
        P = np.asarray(P)
        # columns in leaf order; the sets' leaves go back to columns of classes_
        out = predict_sets_hierarchical(P[:, self._class_of_leaf], self.utility_, self.hierarchy_,
                                        int(self.max_nodes), return_nodes=return_nodes)
        leaf_sets = out[0] if return_nodes else out
        sets = SetPredictions(self._class_of_leaf[leaf_sets.indices], leaf_sets.indptr, len(self.classes_),
                              leaf_sets.expected_utility)
        return (sets, out[1]) if return_nodes else sets

    def _sets(self, P) -> SetPredictions:
        return self._predict_hierarchical(P)

    def predict_nodes(self, X) -> list[np.ndarray]:
        """The nodes of ``hierarchy_`` whose union is each predicted set.

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features)

        Returns
        -------
        list of ndarray of int64
            Per sample, the fewest nodes (ids of ``hierarchy_``, at most ``max_nodes``) whose
            classes are the set of :meth:`predict_sets`, in depth-first leaf order; name them
            with ``hierarchy_.node_names``.
        """
        _, nodes = self._predict_hierarchical(self.predict_proba(X), return_nodes=True)
        return [np.asarray(v) for v in nodes]


def _leaves_of_classes(hierarchy, classes: np.ndarray):
    """``(tree, leaf_of_class)``: the hierarchy to use and the leaf of every class of ``classes``."""
    K = len(classes)
    if hierarchy is None:  # flat: root K over the classes 0..K-1
        return Hierarchy(np.r_[np.full(K, K), -1], n_classes=K), np.arange(K, dtype=np.int64)
    if hierarchy.n_classes != K:
        raise ValueError(f"hierarchy has {hierarchy.n_classes} leaves but fit saw {K} classes: every leaf needs "
                         "its class in the training data, and every class its leaf")
    if classes.dtype.kind in "iu" and np.array_equal(classes, np.arange(K)):
        return hierarchy, np.arange(K, dtype=np.int64)
    if hierarchy.node_names is None:
        raise ValueError(f"hierarchy has no node_names, so its leaves are the labels 0..{K - 1}; got labels "
                         f"{classes[:5].tolist()}{' ...' if K > 5 else ''} (name the leaves to use other labels)")
    leaf_of_name = {str(name): j for j, name in enumerate(hierarchy.node_names[:K])}
    leaves = np.array([leaf_of_name.get(str(c), -1) for c in classes.tolist()], dtype=np.int64)
    missing = np.flatnonzero(leaves < 0)
    if missing.size:
        raise ValueError(f"label {classes.tolist()[missing[0]]!r} is not the name of a leaf of the hierarchy")
    if np.unique(leaves).size != K:  # two labels with the same str
        raise ValueError("two labels have the same name as text, so they name the same leaf of the hierarchy")
    return hierarchy, leaves


# --- scorers ---------------------------------------------------------------------------------------


def _utility_from_name(name: str) -> Utility:
    """``"set_fbeta_1"`` -> ``fbeta:beta=1``; ``"set_credal_2.2_1.2"`` -> ``credal:delta=2.2,gamma=1.2``."""
    family, *values = name[len("set_") :].split("_")
    cls = UTILITY_FAMILIES.get(family)
    if cls is None or len(values) != len(cls.param_specs):
        raise ValueError(
            f"utility={name!r} is not a scorer name like 'set_fbeta_1' or 'set_credal_2.2_1.2'"
            f" (families: {', '.join(UTILITY_FAMILIES)})"
        )
    body = ",".join(f"{p.name}={v}" for p, v in zip(cls.param_specs, values))
    return _check_utility(f"{family}:{body}" if body else family)


def _sets_of(estimator, X, u: Utility) -> tuple[SetPredictions, np.ndarray]:
    """The sets an estimator predicts for ``X`` and its ``classes_``.

    A set classifier of this module (alone or as the last step of a Pipeline) gives its own
    sets; any other estimator gives the Bayes-optimal sets of ``u`` under its ``predict_proba``.
    """
    final, Xt = estimator, X
    if isinstance(estimator, Pipeline) and isinstance(estimator.steps[-1][1], _SetClassifier):
        final = estimator.steps[-1][1]
        Xt = estimator[:-1].transform(X)
    if isinstance(final, _SetClassifier):
        return final.predict_sets(Xt, output="indices"), final.classes_
    if not hasattr(estimator, "predict_proba"):
        raise ValueError(f"a set scorer needs an estimator with predict_proba, got {estimator!r}")
    return _bayes_optimal_sets(estimator.predict_proba(X), u), np.asarray(estimator.classes_)


class SetScorer:
    """A scikit-learn scoring callable ``scorer(estimator, X, y, sample_weight=None) -> float``.

    Build it with :func:`make_set_scorer`.  The sets are the estimator's own when it is one of
    this module's set classifiers (alone or last in a ``Pipeline``); for any other estimator
    with ``predict_proba`` the scorer forms the Bayes-optimal sets of ``utility`` itself.  Labels
    of ``y`` that are not among the estimator's ``classes_`` are in no set.

    Parameters
    ----------
    utility : Utility
    metric : {"utility", "coverage", "size"}
        Mean set utility (via :func:`svbop.set_utility`), fraction of sets holding the true
        label, or mean set size.
    """

    def __init__(self, utility: Utility, metric: str = "utility") -> None:
        self.utility = utility
        self.metric = metric

    def __call__(self, estimator, X, y, sample_weight=None) -> float:
        sets, classes = _sets_of(estimator, X, self.utility)
        if self.metric == "size":
            return _weighted_mean(sets.sizes.astype(np.float64), sample_weight)
        codes = encode_labels(column_or_1d(y), classes)
        if self.metric == "coverage":
            if codes.size != len(sets):
                raise ValueError(f"y has {codes.size} labels but there are {len(sets)} sets")
            hit = np.zeros(len(sets))
            hit[codes >= 0] = sets.take(np.flatnonzero(codes >= 0)).contains(codes[codes >= 0])
            return _weighted_mean(hit, sample_weight)
        return _weighted_mean(_per_sample_utility(sets, codes, self.utility), sample_weight)

    def __repr__(self) -> str:
        u = self.utility.spec if self.utility.K is None else self.utility
        extra = "" if self.metric == "utility" else f", metric={self.metric!r}"
        return f"make_set_scorer({u!r}{extra})"


def make_set_scorer(utility="fbeta:beta=1", *, metric: str = "utility") -> SetScorer:
    """A ``scoring=`` callable for ``GridSearchCV``, ``cross_validate``, ``permutation_importance``.

    Parameters
    ----------
    utility : str or Utility, default "fbeta:beta=1"
        A spec string (``"fbeta:beta=1"``), a scorer name (``"set_fbeta_1"``, as the keys of
        :func:`set_scorers`), or a :class:`svbop.Utility`.
    metric : {"utility", "coverage", "size"}, default "utility"
        What to average over the samples: the set utility ``g(|Y|) [y in Y]``, the coverage
        ``[y in Y]`` or the set size ``|Y|`` (for reporting; larger is not better).

    Returns
    -------
    SetScorer
        ``scorer(estimator, X, y, sample_weight=None)``; see :class:`SetScorer` for which sets
        it scores.

    Notes
    -----
    scikit-learn's string registry (``scoring="..."``) has no public way to add scorers, so the
    names are the keys of :func:`set_scorers`' dictionary (multi-metric ``scoring=`` and
    ``refit="set_fbeta_1"``) or strings given to this function.
    """
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {', '.join(map(repr, _METRICS))}, got {metric!r}")
    if isinstance(utility, str) and utility.strip().lower().startswith("set_"):
        u = _utility_from_name(utility.strip().lower())
    else:
        u = _check_utility(utility)
    return SetScorer(u, metric)


def set_scorers(*utilities, coverage: bool = True, size: bool = True) -> dict[str, SetScorer]:
    """A multi-metric ``scoring=`` dictionary: ``{"set_<label>": scorer, ...}``.

    Parameters
    ----------
    *utilities : str or Utility
        One utility scorer each, keyed ``"set_" + utility.label`` (``"set_fbeta_1"``,
        ``"set_credal_2.2_1.2"``).  Default: ``"fbeta:beta=1"``.
    coverage, size : bool, default True
        Also ``"set_coverage"`` and ``"set_size"``.  For an estimator that is not a set
        classifier these use the Bayes-optimal sets of the first utility.

    Returns
    -------
    dict of str to SetScorer
    """
    us = [_check_utility(u) for u in (utilities or ("fbeta:beta=1",))]
    out = {f"set_{u.label}": SetScorer(u) for u in us}
    if coverage:
        out["set_coverage"] = SetScorer(us[0], "coverage")
    if size:
        out["set_size"] = SetScorer(us[0], "size")
    return out
