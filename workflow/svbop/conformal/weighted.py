r"""Weighted conformal quantiles for covariate shift (Tibshirani, Barber, Candès, Ramdas 2019,
*Conformal prediction under covariate shift*): ``ConformalSetPredictor.fit(..., weights=w_cal)``
and ``predict(..., weights=w_test)``.

When the test rows' covariates follow ``Q_X`` and the calibration rows' ``P_X`` (the label given
``x`` unchanged), and ``w(x) = dQ_X/dP_X (x)`` (known, or estimated: a probabilistic classifier of
test against calibration rows gives ``w = p/(1-p)`` up to a constant, which cancels), the
threshold of a test row ``x`` is the ``1 - epsilon`` quantile of the weighted distribution

``sum_i p_i(x) delta_{s_i} + p_{n+1}(x) delta_{+inf}``,  ``p_i(x) = w_i / (sum_j w_j + w(x))``,
``p_{n+1}(x) = w(x) / (sum_j w_j + w(x))``:

the smallest calibration score ``s_(k)`` (sorted) whose cumulative weight reaches
``(1 - epsilon)(W + w(x))``, ``W = sum_j w_j``; ``+inf`` (every class) when even ``W`` does not.
Then ``P(y in C(x)) >= 1 - epsilon`` under the test distribution (their Corollary 1).  With equal
weights this is split-conformal's ``ceil((n+1)(1-epsilon))``-th smallest score.

The threshold depends on the test row only through ``w(x)``: the scores are sorted once at
``fit`` and each test row costs one binary search in the cumulative weights.  Class-conditional
(``class_conditional=True``): the same within the calibration rows of each class, for every
candidate class of every test row (``K`` binary searches per row).

Arithmetic: the level ``(1 - epsilon)(W + w)`` is lowered by 8 units of its last bit before the
search, so that a cumulative weight equal to it in exact arithmetic (equal weights, ``k/(n+1) = 1
- epsilon`` exactly) is never missed by rounding; that can only add a score within 2e-15 of the
level (relative).
"""

from __future__ import annotations

import numpy as np

from .._row_checks import check_weights

__all__ = ["check_weights", "WeightedQuantiles"]

_LOWER = 1.0 - 8 * float(np.finfo(np.float64).eps)


class WeightedQuantiles:
    """Sorted calibration scores and their cumulative weights, overall or per class.

    Parameters
    ----------
    scores, weights : ndarray of shape (n,)
    level : float
        ``1 - epsilon``.
    labels, K : the calibration labels and the number of classes, for per-class quantiles.
    """

    def __init__(self, scores: np.ndarray, weights: np.ndarray, level: float, labels=None, K: int | None = None):
        self.level = float(level)
        if weights.sum() <= 0:
            raise ValueError("weights of the calibration rows sum to 0: at least one must be > 0")
        if labels is None:
            order = np.argsort(scores, kind="stable")
            self.sorted, self.cum = scores[order], np.cumsum(weights[order])
            self.per_class = None
            return
        order = np.lexsort((scores, labels))
        counts = np.bincount(labels, minlength=K)
        self.bounds = np.concatenate([[0], np.cumsum(counts)])
        self.sorted = scores[order]
        w = weights[order]
        self.cum = np.empty_like(w)
        for c in range(K):  # cumulative weights restart at every class
            a, b = self.bounds[c], self.bounds[c + 1]
            self.cum[a:b] = np.cumsum(w[a:b])
        self.per_class = K

    def _search(self, sorted_, cum, w_test):
        if sorted_.size == 0:
            return np.full(w_test.size, np.inf)
        total = cum[-1]
        k = np.searchsorted(cum, self.level * (total + w_test) * _LOWER, side="left")
        return np.where(k < sorted_.size, sorted_[np.minimum(k, sorted_.size - 1)], np.inf)

    def row_thresholds(self, w_test: np.ndarray) -> np.ndarray:
        """One threshold per test row (marginal)."""
        return self._search(self.sorted, self.cum, w_test)

    def cell_thresholds(self, w_test: np.ndarray) -> np.ndarray:
        """``Q[i, c]``: the threshold of class ``c`` for test row ``i`` (class-conditional)."""
        Q = np.empty((w_test.size, self.per_class))
        for c in range(self.per_class):
            a, b = self.bounds[c], self.bounds[c + 1]
            Q[:, c] = self._search(self.sorted[a:b], self.cum[a:b], w_test)
        return Q
