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

Scale: likelihood ratios are defined up to a constant factor, and the sets depend on the weights only
through the ratios ``w_i / (W + w(x))``.  Every weight (calibration and test) is therefore divided by
one scale fixed at ``fit``, the largest calibration weight, before any sum: a sum of ``n`` normalised
weights is at most ``n``, so finite weights never overflow to ``inf`` (equal weights of ``1e306``
summed to ``inf`` and gave the threshold of a test weight ``1e306`` against a total ``inf``: coverage
0.35 for 0.9), and any constant multiple of the weights gives the same sets (exactly for a power of
two; to the last bits of the cumulative sums otherwise).  A test weight that is still ``inf`` after
the division (``w(x) > 1.8e308 max_i w_i``) holds all the mass: its threshold is ``+inf``, every
class, as in exact arithmetic.

Arithmetic: the level ``(1 - epsilon)(W + w)`` is lowered by 8 units of its last bit before the
search, so that a cumulative weight equal to it in exact arithmetic (equal weights, ``k/(n+1) = 1
- epsilon`` exactly) is never missed by rounding; that can only add a score within 2e-15 of the
level (relative).
"""

from __future__ import annotations

import numpy as np

from .._row_checks import check_weights

__all__ = ["check_weights", "effective_size", "WeightedQuantiles"]

_LOWER = 1.0 - 8 * float(np.finfo(np.float64).eps)


def effective_size(weights) -> float:
    """Kish's effective sample size ``(sum w)^2 / sum w^2`` of non-negative weights, computed on the
    weights divided by their largest (the same value in exact arithmetic; never an overflow: weights
    of 1e200 gave ``inf / inf = nan``); 0 when every weight is 0."""
    w = np.asarray(weights, dtype=np.float64)
    top = float(w.max()) if w.size else 0.0
    if not top > 0:
        return 0.0
    w = w / top
    return float(w.sum() ** 2 / (w @ w))


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
        top = float(weights.max()) if weights.size else 0.0
        if not top > 0:
            raise ValueError("weights of the calibration rows sum to 0: at least one must be > 0")
        #: the largest calibration weight: every weight, calibration and test, is divided by it
        self.scale = top
        weights = weights / top
        #: the mean calibration weight, normalised (``quantile_``'s reference test row)
        self.mean_weight = float(weights.mean())
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

    def _normalised(self, w_test) -> np.ndarray:
        """Test weights divided by the calibration scale (``inf`` past float64's range: all the mass)."""
        with np.errstate(over="ignore"):
            return np.asarray(w_test, dtype=np.float64) / self.scale

    def _search(self, sorted_, cum, w_test):
        if sorted_.size == 0:
            return np.full(w_test.size, np.inf)
        total = cum[-1]
        k = np.searchsorted(cum, self.level * (total + w_test) * _LOWER, side="left")
        return np.where(k < sorted_.size, sorted_[np.minimum(k, sorted_.size - 1)], np.inf)

    def row_thresholds(self, w_test: np.ndarray, *, normalised: bool = False) -> np.ndarray:
        """One threshold per test row (marginal); ``w_test`` as given to ``predict`` (on the
        calibration weights' scale), or already divided by :attr:`scale` (``normalised=True``)."""
        return self._search(self.sorted, self.cum, w_test if normalised else self._normalised(w_test))

    def cell_thresholds(self, w_test: np.ndarray, *, normalised: bool = False) -> np.ndarray:
        """``Q[i, c]``: the threshold of class ``c`` for test row ``i`` (class-conditional)."""
        if not normalised:
            w_test = self._normalised(w_test)
        Q = np.empty((w_test.size, self.per_class))
        for c in range(self.per_class):
            a, b = self.bounds[c], self.bounds[c + 1]
            Q[:, c] = self._search(self.sorted[a:b], self.cum[a:b], w_test)
        return Q
