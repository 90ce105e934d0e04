r"""Conformal sets under label shift: the class weights ``w(y) = q(y)/p(y)`` estimated from unlabelled
test outputs, and the weighted calibration of Podkopaev and Ramdas (UAI 2021, *Distribution-free
uncertainty quantification for classification under label shift*).

*Label shift.*  The test rows follow ``Q(x, y) = q(y) P(x | y)``: the class frequencies change from
``p(y)`` (calibration) to ``q(y)``, the class-conditional outputs do not.  Then
``dQ/dP (x, y) = w(y) = q(y)/p(y)``, and weighted exchangeability (Tibshirani et al. 2019) gives,
for a test row whose label were ``c``, the threshold

``Q(w(c))``: the ``1 - epsilon`` quantile of ``sum_i w(y_i) delta_{s_i} + w(c) delta_{+inf}``
(normalised by ``sum_i w(y_i) + w(c)``),

and the set ``C(x) = {c : s(x, c) <= Q(w(c))}`` covers the test label with probability at least
``1 - epsilon`` under ``Q`` (Podkopaev and Ramdas, Theorem 1: the weight of the test point depends on
its unknown label, so each candidate class is tested at its own weight).  The thresholds do not
depend on ``x``: one per class, computed once at ``fit`` with :class:`svbop.conformal.weighted.
WeightedQuantiles` (weights valid up to a constant give the same thresholds: the level scales
with the total weight).  ``ConformalSetPredictor.fit(P_cal, y_cal, class_weights=w)``.

*Estimating the weights* (:func:`estimate_label_shift`) from the calibration outputs and labels
and the test outputs alone:

* ``"bbse"`` (black-box shift estimation, Lipton, Wang and Smola, ICML 2018): with
  ``C[i, j] = P_cal(yhat = i, y = j)`` (the joint confusion matrix of the hard predictions
  ``yhat = argmax P(.|x)`` on the calibration rows) and ``mu[i] = Q(yhat = i)`` (their frequency
  on the test rows), label shift gives ``C w = mu``; ``w`` is the least-squares solution.  It
  needs no calibrated probabilities, only an invertible ``C``.  Sampling noise can make entries
  negative: **they are set to 0**, and the weights are then rescaled so that
  ``sum_y p(y) w(y) = 1`` (the implied ``q = p w`` is a distribution).
* ``"em"`` (Saerens, Latinne and Decaestecker, Neural Computation 2002): the priors ``q`` are
  the fixed point of ``q(y) = mean_x P_q(y | x)``, with ``P_q(y|x) ~ P(y|x) q(y)/p(y)`` the
  outputs re-weighted to the new priors, iterated from ``q = p``.  It assumes calibrated outputs
  (``P(y|x)`` the true posterior under ``p``); its weights are never negative.

The cost of estimating: the sets use ``w_hat`` in place of ``w``, and the coverage guarantee
holds for ``w``; ``workflow/docs/set_kinds.md`` gives the measured coverage with estimated and
with true weights.

A class with no calibration rows has ``p(y) = 0`` and an infinite weight: refused, with the class
named.
"""

from __future__ import annotations

import numpy as np

from .._prefix import as_score_matrix
from ..metrics import check_labels

__all__ = ["LABEL_SHIFT_METHODS", "check_class_weights", "estimate_label_shift", "label_shift_thresholds"]

#: The estimators of :func:`estimate_label_shift`.
LABEL_SHIFT_METHODS = ("bbse", "em")


def check_class_weights(class_weights, K: int, y_cal: np.ndarray | None = None,
                        name: str = "class_weights") -> np.ndarray:
    """``class_weights`` as ``K`` finite, non-negative float64 weights ``w(y)``, or a one-line
    ValueError naming ``name``; with ``y_cal``, at least one calibration row must weigh > 0."""
    w = np.asarray(class_weights)
    if w.dtype == object or w.dtype.kind not in "iuf" or w.dtype == bool:
        raise ValueError(f"{name} must hold numbers (one weight q(y)/p(y) per class), got dtype {w.dtype}")
    if w.shape != (K,):
        raise ValueError(f"{name} must have shape ({K},) (one weight per class), got {w.shape}")
    w = w.astype(np.float64)
    bad = np.flatnonzero(~(np.isfinite(w) & (w >= 0)))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] = {float(w[bad[0]])!r}: a class weight must be finite and >= 0")
    if y_cal is not None and not (w[y_cal] > 0).any():
        raise ValueError(f"{name}: every calibration row's class has weight 0; at least one must be > 0")
    return w


def label_shift_thresholds(scores: np.ndarray, y_cal: np.ndarray, class_weights: np.ndarray,
                           level: float) -> np.ndarray:
    """``Q[c]``: the threshold of candidate class ``c``, the ``level`` quantile of
    ``sum_i w(y_i) delta_{s_i} + w(c) delta_{+inf}`` (``+inf`` when even all calibration weight
    falls short of the level).

    Parameters
    ----------
    scores : ndarray of shape (n,)
        The calibration scores ``s(x_i, y_i)``.
    y_cal : ndarray of int, shape (n,)
    class_weights : ndarray of shape (K,)
        ``w(y)``, checked (:func:`check_class_weights`).
    level : float
        ``1 - epsilon``.
    """
    from .weighted import WeightedQuantiles

    return WeightedQuantiles(scores, class_weights[y_cal], level).row_thresholds(class_weights)


def _check_method(method) -> str:
    if not isinstance(method, str) or method not in LABEL_SHIFT_METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, LABEL_SHIFT_METHODS))}, got {method!r}")
    return method


def estimate_label_shift(P_cal, y_cal, P_test, method: str = "bbse", *, max_iter: int = 1000,
                         tol: float = 1e-10) -> np.ndarray:
    """Class weights ``w(y) = q(y)/p(y)`` from labelled calibration outputs and unlabelled test outputs.

    Parameters
    ----------
    P_cal : array-like of shape (n, K)
        The model's outputs on the calibration rows (rows need not sum to 1; ``"em"`` normalises them).
    y_cal : array-like of int, shape (n,)
        Their labels; every class must have at least one row (else its weight is infinite).
    P_test : array-like of shape (m, K)
        The model's outputs on the (unlabelled) test rows.
    method : {"bbse", "em"}
        Black-box shift estimation (Lipton et al. 2018; negative solutions clipped to 0, then
        rescaled so that ``sum_y p(y) w(y) = 1``) or the EM re-estimation of the priors (Saerens
        et al. 2002).  See the module docstring.
    max_iter, tol : ``"em"`` only: at most ``max_iter`` iterations, stopped when no prior moves by
        more than ``tol``.

    Returns
    -------
    ndarray of shape (K,)
        ``w``, with ``sum_y p(y) w(y) = 1`` (``p`` the calibration class frequencies).
    """
    method = _check_method(method)
    P_cal = as_score_matrix(P_cal, "P_cal")
    P_test = as_score_matrix(P_test, "P_test")
    y_cal = check_labels(y_cal, P_cal.shape, "y_cal")
    n, K = P_cal.shape
    if n == 0:
        raise ValueError("P_cal has no rows: the calibration class frequencies are undefined")
    if P_test.shape[1] != K:
        raise ValueError(f"P_test has {P_test.shape[1]} classes but P_cal has {K}")
    if P_test.shape[0] == 0:
        raise ValueError("P_test has no rows: the test class frequencies cannot be estimated")
    if isinstance(max_iter, (bool, np.bool_)) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    if not (isinstance(tol, (int, float, np.integer, np.floating)) and tol > 0 and np.isfinite(tol)):
        raise ValueError(f"tol must be a finite number > 0, got {tol!r}")
    counts = np.bincount(y_cal, minlength=K)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise ValueError(
            f"y_cal: class {int(empty[0])} has no calibration rows ({empty.size} class(es) have none): its"
            " label-shift weight q(y)/p(y) would be infinite; add calibration rows of every class"
        )
    for name, M in (("P_cal", P_cal), ("P_test", P_test)):
        if not np.all(np.isfinite(M)):
            raise ValueError(f"{name} holds NaN or infinite values")
        if (M < 0).any():
            raise ValueError(f"{name} holds negative values: expected probabilities")
    p = counts / n
    if method == "bbse":
        C = np.zeros((K, K))
        np.add.at(C, (np.argmax(P_cal, axis=1), y_cal), 1.0 / n)
        mu = np.bincount(np.argmax(P_test, axis=1), minlength=K) / P_test.shape[0]
        w = np.linalg.lstsq(C, mu, rcond=None)[0]
        w = np.maximum(w, 0.0)  # sampling noise: negative solutions clipped (stated in the docstring)
        total = float(p @ w)
        if not total > 0:
            raise ValueError("method='bbse': every estimated weight is <= 0 (the confusion matrix is too noisy);"
                             " use method='em' or more calibration rows")
        return w / total
    return _em_weights(P_test, p, max_iter, float(tol))


def _em_weights(P_test: np.ndarray, p: np.ndarray, max_iter: int, tol: float) -> np.ndarray:
    """Saerens et al.'s EM: priors ``q`` with ``q = mean_x normalise(P(.|x) q/p)``, from ``q = p``."""
    sums = P_test.sum(axis=1, keepdims=True)
    if (sums <= 0).any():
        raise ValueError(f"P_test row {int(np.flatnonzero(sums[:, 0] <= 0)[0])} sums to 0: expected probabilities")
    Pt = P_test / sums
    q = p.copy()
    for _ in range(max_iter):
        A = Pt * (q / p)
        A /= A.sum(axis=1, keepdims=True)
        new = A.mean(axis=0)
        done = np.max(np.abs(new - q)) <= tol
        q = new
        if done:
            break
    return q / p
