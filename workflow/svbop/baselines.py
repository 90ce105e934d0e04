"""Baselines of the paper's experiments (Section 5.2): top-s, cumulative threshold, conformal.

All three return prefixes of the classes sorted by decreasing probability, computed with the
same partial-sorting engine as :func:`svbop.predict_sets`.

* **Top-s** returns the ``s`` most probable classes (ties: lower class index first).
* **Threshold** returns the smallest prefix whose probability mass reaches ``theta`` (Eq. 9);
  :class:`ThresholdSetPredictor` tunes ``theta`` for a utility on a validation set over a grid,
  by default ten equally spaced values ``0.1, 0.2, ..., 1.0`` (the paper tunes over "ten
  equally-spaced values" without giving them: this is one reading; the pipeline's default grid,
  ``baselines.threshold_grid``, is finer near both ends); ties go to the smaller ``theta``.
* **Inductive conformal prediction** (ICP) with nonconformity ``1 - P(y|x)``: the quantile of the
  calibration scores at the finite-sample level ``ceil((n+1)(1-epsilon))/n`` gives ``q``, and the
  set is ``{c : 1 - P(c|x) <= q}``.  Marginal coverage is then at least ``1 - epsilon``.
  **Empty sets**: when no class passes (possible when ``q < 1 - max_c P(c|x)``), the default
  ``empty="top1"`` returns the most probable class instead.  The paper's utilities are defined on
  non-empty sets only, and adding a class can only raise coverage, so the guarantee still holds;
  ``empty="keep"`` keeps the raw conformal set (empty, utility 0).

The conformal code (ICP's :func:`conformal_quantile` and :func:`conformal_sets`, and
:class:`ConformalSetPredictor` with the APS and RAPS scores, class-conditional and group-conditional
thresholds, and Bayes-optimal F-beta and credal sets with a coverage guarantee) lives in
:mod:`svbop.conformal`; this module re-exports it, so ``svbop.baselines.conformal_sets`` and
``svbop.baselines.ConformalSetPredictor`` keep working.
"""

from __future__ import annotations

import numpy as np

from ._blocks import row_blocks
from ._prefix import (
    DEFAULT_CHUNK_BYTES,
    SortedHeads,
    as_score_matrix,
    geometric_widening,
    prefix_search,
    row_stats,
)
from ._prefix import settle_all as _settle_all
from .conformal import (  # noqa: F401  (re-exported: the conformal code lived here)
    CONFORMAL_SCORES,
    ConformalSetPredictor,
    _calibrate_parameter,
    _calibration_scores,
    _covered,
    _epsilon,
    _family_utility,
    _no_calibration_rows,
    _order_statistic,
    _score_sets,
    _score_tolerance,
    _with_tolerance,
    conformal_quantile,
    conformal_sets,
)
from .metrics import check_labels
from .sets import SetPredictions
from .utilities import Utility, utility

__all__ = [
    "top_s_sets",
    "threshold_sets",
    "tune_threshold",
    "ThresholdSetPredictor",
    "conformal_quantile",
    "conformal_sets",
    "ConformalSetPredictor",
    "CONFORMAL_SCORES",
    "PAPER_THRESHOLDS",
]

#: Ten equally spaced cumulative-probability thresholds, one reading of the paper's "ten equally-spaced values".
PAPER_THRESHOLDS = tuple(round(0.1 * i, 1) for i in range(1, 11))

_MASS_RTOL = 1e-9



def top_s_sets(P, s: int, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> SetPredictions:
    """The ``s`` most probable classes of every row, in decreasing probability.

    Parameters
    ----------
    P : array-like of shape (n_samples, n_classes)
        Probabilities or proportional non-negative scores.
    s : int
        Set size, ``1 <= s <= n_classes``.

    Returns
    -------
    SetPredictions
    """
    P = as_score_matrix(P)
    K = P.shape[1]
    if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 1 <= s <= K:
        raise ValueError(f"top-s needs an integer s in 1..{K} (the number of classes), got s={s!r}")
    s = int(s)

    def first(X, rowmax, total):  # the s-th largest value of each row
        return rowmax if s == 1 else np.partition(X, K - s, axis=1)[:, K - s]

    sets, _ = prefix_search(
        P,
        lambda heads, t, total, K: _settle_all(np.minimum(s, heads.counts)),
        first,
        geometric_widening(),
        chunk_bytes=chunk_bytes,
    )
    return sets


def threshold_sets(P, theta: float, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> SetPredictions:
    """Smallest prefix of the sorted classes whose probability mass is at least ``theta``.

    Parameters
    ----------
    P : array-like of shape (n_samples, n_classes)
        Probabilities or proportional non-negative scores (normalised per row here).
    theta : float
        Cumulative-probability threshold in [0, 1].  Masses within a relative 1e-9 of
        ``theta`` count as reaching it (so ``theta = 1`` stops at the last non-zero class
        despite rounding).

    Returns
    -------
    SetPredictions
    """
    theta = float(theta)
    if not 0.0 <= theta <= 1.0:
        raise ValueError(f"threshold theta must be in [0, 1], got {theta!r}")

    def decide(heads: SortedHeads, t, total, K):
        W = heads.values.shape[1]
        valid = np.arange(W) < heads.counts[:, None]
        reach = valid & (np.cumsum(heads.values, axis=1) >= (theta * (1 - _MASS_RTOL)) * total[:, None])
        hit = reach.any(axis=1)
        size = np.where(hit, reach.argmax(axis=1) + 1, heads.counts)
        return hit | (heads.counts >= K), size, np.full(size.size, np.nan)

    sets, _ = prefix_search(
        P, decide, lambda X, rowmax, total: rowmax * 1e-2, geometric_widening(), chunk_bytes=chunk_bytes
    )
    return sets


def _threshold_sizes(P: np.ndarray, y: np.ndarray, thetas: np.ndarray, name: str,
                     chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """The sizes of :func:`threshold_sets` ``(P, theta)`` for every ``theta`` at once, and each
    label's rank, from one sort and one cumulative sum per row.

    Returns
    -------
    sizes : ndarray of shape (len(thetas), n_samples)
        ``sizes[j, i] = |threshold_sets(P, thetas[j])[i]|``, bit for bit: the same row sums (the
        same chunks, :func:`svbop._prefix.row_stats`), the same float64 cumulative sums of the
        sorted values (the sum of a prefix does not depend on how far the row is sorted) and the
        same comparison with ``theta (1 - 1e-9)`` times the row sum.
    ranks : ndarray of shape (n_samples,)
        The number of classes before ``y[i]`` in the sets' order (decreasing value, ties in
        increasing class index): ``y[i]`` is in a set of size ``s`` exactly when ``ranks[i] < s``.
    """
    n, K = P.shape
    rows_per_chunk = max(1, int(chunk_bytes) // max(1, K * P.dtype.itemsize))  # as prefix_search's
    sizes = np.empty((n, thetas.size), dtype=np.int64)
    ranks = np.empty(n, dtype=np.int64)
    levels = thetas * (1 - _MASS_RTOL)
    labels = y.astype(np.int64)
    for row0, _, X in row_blocks(P, rows_per_chunk):  # a mapped matrix: one chunk resident (svbop._blocks)
        X = np.ascontiguousarray(X)
        _, total = row_stats(X, row0, name)
        # each row's cumulative masses in decreasing order of value, one row per column: the
        # running sum down the columns adds every row's values in the same order as a per-row
        # cumsum, several times faster (non-decreasing: the values are non-negative)
        masses = np.empty((K, X.shape[0]))
        masses[...] = np.sort(X, axis=1)[:, ::-1].T
        np.cumsum(masses, axis=0, out=masses)
        thr = total[:, None] * levels[None, :]
        # the first mass reaching each level: a binary search of every row and level at once
        lo = np.zeros(thr.shape, dtype=np.int64)
        hi = np.full(thr.shape, K, dtype=np.int64)
        rr = np.arange(X.shape[0])[:, None]
        while True:
            active = lo < hi
            if not active.any():
                break
            mid = (lo + hi) // 2
            reach = masses[np.minimum(mid, K - 1), rr] >= thr
            hi = np.where(active & reach, mid, hi)
            lo = np.where(active & ~reach, mid + 1, lo)
        sizes[row0 : row0 + X.shape[0]] = np.minimum(lo + 1, K)
        del masses
        yc = labels[row0 : row0 + X.shape[0]]
        py = X[np.arange(X.shape[0]), yc][:, None]
        ranks[row0 : row0 + X.shape[0]] = (np.count_nonzero(X > py, axis=1)
                                           + np.count_nonzero((X == py) & (np.arange(K) < yc[:, None]), axis=1))
    return np.ascontiguousarray(sizes.T), ranks


#: Mean utilities this close (relative) are ties in :func:`tune_threshold`.
_SCORE_RTOL = 1e-9


def tune_threshold(P_val, y_val, u: Utility | str, thetas=PAPER_THRESHOLDS) -> tuple[float, np.ndarray]:
    """Pick the threshold with the highest mean utility on a validation set.

    Every candidate is scored from one sort and one running sum per validation row (the sets of
    :func:`threshold_sets` for all ``thetas`` at once, bit for bit), so the cost hardly grows with
    the number of candidates.

    Returns
    -------
    theta : float
        The best threshold: the smallest among equally good ones, where scores within a relative
        1e-9 of the best count as equal (so that floating-point noise in the utility, e.g.
        ``2/3`` computed two ways, cannot decide between thresholds that tie exactly).
    scores : ndarray of shape (len(thetas),)
        Mean validation utility of each threshold.
    """
    P_val = as_score_matrix(P_val, "P_val")
    y_val = check_labels(y_val, P_val.shape, "y_val")
    thetas = np.asarray(thetas, dtype=np.float64).reshape(-1)
    if thetas.size == 0:
        raise ValueError("thetas must not be empty")
    for th in thetas:
        if not 0.0 <= th <= 1.0:
            raise ValueError(f"threshold theta must be in [0, 1], got {float(th)!r}")
    u = utility(u)
    g = u.values(P_val.shape[1])
    sizes, ranks = _threshold_sizes(P_val, y_val, thetas, "P_val")
    # per row and threshold g(|Y|) [y in Y], as set_utility gives for threshold_sets(P_val, theta);
    # one contiguous row of utilities per threshold, so that each mean is the same sum
    gains = np.where(ranks[None, :] < sizes, g[sizes - 1], 0.0)
    scores = np.array([gains[j].mean() for j in range(thetas.size)])
    best = scores.max()
    candidates = thetas[scores >= best - _SCORE_RTOL * max(1.0, abs(best))]
    return float(candidates.min()), scores


class ThresholdSetPredictor:
    """Cumulative-threshold sets with ``theta`` tuned for a utility (scikit-learn style).

    Parameters
    ----------
    u : Utility or str
        The utility to tune for.
    thetas : sequence of float
        Candidate thresholds (default: the paper's ``0.1, ..., 1.0``).

    Attributes
    ----------
    theta_ : float
        The tuned threshold (after :meth:`fit`).
    scores_ : ndarray
        Mean validation utility per candidate threshold.
    """

    def __init__(self, u: Utility | str, thetas=PAPER_THRESHOLDS) -> None:
        self.u = utility(u)
        self.thetas = tuple(float(t) for t in thetas)

    def fit(self, P_val, y_val) -> "ThresholdSetPredictor":
        self.theta_, self.scores_ = tune_threshold(P_val, y_val, self.u, self.thetas)
        return self

    def predict(self, P) -> SetPredictions:
        if not hasattr(self, "theta_"):
            raise ValueError("ThresholdSetPredictor is not fitted: call fit(P_val, y_val) first")
        return threshold_sets(P, self.theta_)
