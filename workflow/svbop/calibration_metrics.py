r"""How well a model's probabilities are calibrated, and how well its confidence ranks its errors, each
with a bootstrap interval: classwise, adaptive (equal-mass) and smooth ECE, AUROC and AUARC of the
confidence.  Re-exported by :mod:`svbop.metrics`.

Every function takes ``P`` (n, K) probabilities (rows are used as given: normalise them first if
they do not sum to 1) and ``y`` (n,) labels.  The *confidence* of a row is its top probability
``max_c P(c|x)``, and the row is *correct* when its top class (ties: the lowest index) is ``y``.

* :func:`classwise_ece` (Kull et al. 2019): ``(1/K) sum_c sum_b (n_b/n) |mean_b 1{y = c} -
  mean_b P(c|x)|`` over ``n_bins`` equal-width bins ``(b/B, (b+1)/B]`` of ``P(c|x)`` (0 in the first):
  MAPIE's ``expected_calibration_error(classwise=True, split_strategy="uniform", num_bins=B + 1)``
  on rows without an exact 0 (MAPIE's edges ``linspace(0, 1, B + 1)`` give 0 a bin of its own).
* :func:`adaptive_ece` (Nixon et al. 2019; Guo et al.'s reliability diagram with equal-mass bins):
  the top-label ECE over ``n_bins`` bins of the rows sorted by confidence, each of (nearly) equal
  size (numpy's ``array_split``), :func:`svbop.calibration.expected_calibration_error`'s binning.
* :func:`smooth_ece` (Błasiok and Nakkiran 2023, *Smooth ECE*; relplot's ``smECE``): with
  ``r_i = 1{correct_i} - conf_i`` and the reflected Gaussian kernel ``K_sigma`` on [0, 1],
  ``smECE_sigma = int_0^1 |(1/n) sum_i K_sigma(t, conf_i) r_i| dt``, at the bandwidth ``sigma*`` with
  ``smECE_{sigma*} = sigma*`` (the fixed point, found by bisection as relplot finds it: the value at
  the upper end of a bracket of width ``2**-20``).  The kernel sums are computed on a grid of
  ``grid`` points (each confidence's mass split linearly between its two grid neighbours, as relplot
  does) and convolved with the sampled kernel, reflected at 0 and 1 as often as needed.  relplot
  1.0.3 reflects the grid without its end points, so a mass at 0 or 1 gets half its kernel, and it
  divides the residuals' sum by the density's: on an over-confident model, whose confidences round
  to 1, its smECE is too large (the digits' outputs of ``tests/digits_outputs.py``: relplot 0.0568,
  the definition 0.0494, ours 0.0494; CIFAR-100-like outputs: 0.121 against 0.092).  Away from the
  ends the two agree to 1e-3, and ``ends="relplot"`` reproduces relplot's sums
  (``tests/test_calibration_metrics.py``).
* :func:`auarc`: the area under the accuracy-rejection curve (Nadeem et al. 2009), the mean over
  ``k = 1..n`` of the accuracy of the ``k`` most confident rows (ties in the order of the rows:
  MAPIE's ``auarc``).
* :func:`confidence_auroc`: the AUROC of the confidence as a score of correctness (ties count one
  half: scikit-learn's ``roc_auc_score``, MAPIE's ``auroc``).

*Intervals.*  ``n_boot > 0`` returns an :class:`Estimate` ``(value, low, high)``: the value on
all rows and the ``(1 - confidence)/2`` and ``(1 + confidence)/2`` percentiles of the metric over
``n_boot`` bootstrap resamples of the rows (drawn from ``random_state``).  The percentile
bootstrap: an interval for the metric of *this* model on the rows' distribution, approximate (the
binned ECEs are biased upward at small ``n``, and the bootstrap does not remove that bias).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ._arrays import as_host_array

__all__ = ["Estimate", "adaptive_ece", "auarc", "classwise_ece", "confidence_auroc", "smooth_ece"]


class Estimate(NamedTuple):
    """A metric's value on all rows and its bootstrap interval ``[low, high]``."""

    value: float
    low: float
    high: float


def _inputs(P, y, name: str = "P") -> tuple[np.ndarray, np.ndarray]:
    from ._row_checks import check_labels

    P = as_host_array(P, name)
    if P.dtype == object or not np.issubdtype(P.dtype, np.number) or np.issubdtype(P.dtype, np.complexfloating):
        raise ValueError(f"{name}: expected a numeric (n, K) matrix of probabilities, got dtype {P.dtype}")
    if P.ndim != 2 or P.shape[1] < 1:
        raise ValueError(f"{name}: expected a 2-D (n_samples, n_classes) matrix, got shape {P.shape}")
    if P.shape[0] == 0:
        raise ValueError(f"{name} has no rows: a calibration metric needs at least one labelled row")
    P = np.asarray(P, dtype=np.float64)
    if not np.all(np.isfinite(P)):
        raise ValueError(f"{name} holds NaN or infinite values")
    if P.min() < 0 or P.max() > 1:
        raise ValueError(f"{name} holds values outside [0, 1]: expected probabilities")
    return P, check_labels(y, P.shape, "y")


def _bins(n_bins) -> int:
    if isinstance(n_bins, (bool, np.bool_)) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}")
    return int(n_bins)


def _interval(metric, n: int, n_boot, confidence, random_state) -> Estimate | float:
    """``metric(rows)`` on all rows, and with ``n_boot`` its percentile bootstrap interval."""
    if isinstance(n_boot, (bool, np.bool_)) or not isinstance(n_boot, (int, np.integer)) or n_boot < 0:
        raise ValueError(f"n_boot must be an integer >= 0 (0: no interval), got {n_boot!r}")
    if not (isinstance(confidence, (int, float, np.floating)) and 0 < confidence < 1):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    value = float(metric(np.arange(n)))
    if n_boot == 0:
        return value
    rng = np.random.default_rng(random_state)
    draws = np.array([metric(rng.integers(0, n, n)) for _ in range(int(n_boot))], dtype=np.float64)
    low, high = np.quantile(draws, [(1 - confidence) / 2, (1 + confidence) / 2])
    return Estimate(value, float(low), float(high))


def _top(P: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    top = P.argmax(axis=1)
    return P[np.arange(P.shape[0]), top], (top == y).astype(np.float64)


def _binned_gap(hit: np.ndarray, conf: np.ndarray, idx: np.ndarray, n_bins: int) -> float:
    """``sum_b (n_b / n) |mean_b hit - mean_b conf|`` for bin indices ``idx``."""
    counts = np.bincount(idx, minlength=n_bins)
    gap = np.abs(np.bincount(idx, weights=hit, minlength=n_bins) - np.bincount(idx, weights=conf, minlength=n_bins))
    return float(gap.sum() / counts.sum())


def classwise_ece(P, y, n_bins: int = 15, *, n_boot: int = 0, confidence: float = 0.95,
                  random_state=None) -> float | Estimate:
    """Classwise ECE over ``n_bins`` equal-width bins (see the module docstring); with ``n_boot``, an
    :class:`Estimate` with its bootstrap interval."""
    P, y = _inputs(P, y)
    B = _bins(n_bins)
    n, K = P.shape
    edges = np.linspace(0.0, 1.0, B + 1)[1:-1]
    idx = np.digitize(P, edges, right=True)  # bin b: (b/B, (b+1)/B], 0 in bin 0
    onehot = np.zeros((n, K))
    onehot[np.arange(n), y] = 1.0

    def metric(rows):
        return np.mean([_binned_gap(onehot[rows, c], P[rows, c], idx[rows, c], B) for c in range(K)])

    return _interval(metric, n, n_boot, confidence, random_state)


def adaptive_ece(P, y, n_bins: int = 15, *, n_boot: int = 0, confidence: float = 0.95,
                 random_state=None) -> float | Estimate:
    """Top-label ECE over ``n_bins`` equal-mass bins (see the module docstring)."""
    P, y = _inputs(P, y)
    B = _bins(n_bins)
    conf, hit = _top(P, y)

    def metric(rows):
        c, h = conf[rows], hit[rows]
        order = np.argsort(c, kind="stable")
        idx = np.empty(rows.size, dtype=np.int64)
        for b, part in enumerate(np.array_split(order, min(B, rows.size))):
            idx[part] = b
        return _binned_gap(h, c, idx, B)

    return _interval(metric, P.shape[0], n_boot, confidence, random_state)


class _SmoothGrid:
    """The confidences' masses on a grid of ``G`` points of [0, 1], and the kernel sums at a bandwidth."""

    def __init__(self, conf: np.ndarray, resid: np.ndarray, G: int, ends: str = "reflect"):
        self.G, self.ends = G, ends
        pos = np.clip(conf, 0.0, 1.0) * (G - 1)
        lo = np.minimum(np.floor(pos).astype(np.int64), G - 2)
        frac = pos - lo
        n = conf.size
        self.r = (np.bincount(lo, resid * (1 - frac), G) + np.bincount(lo + 1, resid * frac, G)) / n
        self.d = (np.bincount(lo, 1 - frac, G) + np.bincount(lo + 1, frac, G)) / n

    def smece(self, sigma: float) -> float:
        """``int_0^1 |(1/n) sum_i K_sigma(t, conf_i) r_i| dt`` (trapezoid rule on the grid); with
        ``ends="relplot"``, relplot 1.0.3's sum: the end points' masses counted once, and the sum of
        ``|smoothed residual|`` divided by the sum of the smoothed density."""
        from scipy.signal import fftconvolve

        G, h = self.G, 1.0 / (self.G - 1)
        L = min(int(math.ceil(6 * sigma / h)), 40 * (G - 1))
        offsets = np.arange(-L, L + 1)
        kern = np.exp(-0.5 * (offsets * h / sigma) ** 2) * (h / (sigma * math.sqrt(2 * math.pi)))
        # the grid extended by L points each side, folded back into [0, 1] (reflections at 0 and 1)
        j = np.arange(-L, G + L) % (2 * (G - 1))
        j = np.where(j > G - 1, 2 * (G - 1) - j, j)
        # a mass at 0 or 1 is its own mirror image: the reflected kernel counts it twice (relplot 1.0.3
        # counts it once, so that rows whose confidence rounds to 1 weigh half: see the module docstring)
        if self.ends == "relplot":
            a = np.abs(fftconvolve(self.r[j], kern, mode="valid"))
            return float(a.sum() / fftconvolve(self.d[j], kern, mode="valid").sum())
        ext = self.r[j] * np.where((j == 0) | (j == G - 1), 2.0, 1.0)
        smooth = fftconvolve(ext, kern, mode="valid") / h  # a density: mass per unit of t
        a = np.abs(smooth)
        return float(h * (a.sum() - 0.5 * (a[0] + a[-1])))


def _fixed_point(grid: _SmoothGrid, steps: int = 20) -> float:
    """relplot's bandwidth search: ``1`` if ``smECE_1 >= 1``, else the upper end of a bisection
    bracket of ``sigma <= smECE_sigma`` (or ``sigma < 0.001``) after ``steps`` halvings."""
    def below(sigma):
        return sigma < 1e-3 or sigma < grid.smece(sigma)

    if below(1.0):
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        if below(mid):
            lo = mid
        else:
            hi = mid
    return hi


def smooth_ece(P, y, *, sigma: float | None = None, grid: int | None = None, ends: str = "reflect", n_boot: int = 0,
               confidence: float = 0.95, random_state=None, return_sigma: bool = False):
    """Smooth ECE of the top-label confidence (Błasiok and Nakkiran 2023; see the module docstring).

    ``sigma=None`` finds the bandwidth's fixed point (relplot's ``smECE``); a number fixes it
    (relplot's ``smECE_sigma``).  ``ends="reflect"`` (default) is the definition: the kernel reflected
    at 0 and 1, every row's kernel of mass 1 on [0, 1]; ``ends="relplot"`` reproduces relplot 1.0.3
    (within 2e-3 in the tests): a confidence on the grid's end point gets half its kernel, and the
    residuals' sum is divided by the density's, which up-weights the rows away from the ends (on an
    over-confident model, whose right rows sit at confidence 1, a larger value: 0.121 against 0.092 on
    CIFAR-100-like outputs).  ``grid``: points of [0, 1] (default 4001; 1001 with ``ends="relplot"``,
    relplot's).  ``return_sigma=True`` returns ``(value, sigma)`` (the interval's resamples each find
    their own bandwidth).
    """
    P, y = _inputs(P, y)
    if sigma is not None and not (isinstance(sigma, (int, float, np.floating)) and 0 < sigma <= 10
                                  and not isinstance(sigma, bool)):
        raise ValueError(f"sigma must be None (the fixed point) or a number in (0, 10], got {sigma!r}")
    if ends not in ("reflect", "relplot"):
        raise ValueError(f"ends must be 'reflect' (the definition) or 'relplot' (relplot 1.0.3's sums), got {ends!r}")
    if grid is None:
        grid = 1001 if ends == "relplot" else 4001
    if isinstance(grid, (bool, np.bool_)) or not isinstance(grid, (int, np.integer)) or grid < 101:
        raise ValueError(f"grid must be an integer >= 101 (points of [0, 1]), got {grid!r}")
    conf, hit = _top(P, y)
    found = {}

    def metric(rows):
        g = _SmoothGrid(conf[rows], hit[rows] - conf[rows], int(grid), ends)
        s = _fixed_point(g) if sigma is None else float(sigma)
        found.setdefault("sigma", s)
        return g.smece(s)

    out = _interval(metric, P.shape[0], n_boot, confidence, random_state)
    return (out, found["sigma"]) if return_sigma else out


def auarc(P, y, *, n_boot: int = 0, confidence: float = 0.95, random_state=None) -> float | Estimate:
    """Area under the accuracy-rejection curve of the top-label confidence (see the module docstring)."""
    P, y = _inputs(P, y)
    conf, hit = _top(P, y)

    def metric(rows):
        h = hit[rows][np.argsort(-conf[rows], kind="stable")]
        return float(np.mean(np.cumsum(h) / np.arange(1, h.size + 1)))

    return _interval(metric, P.shape[0], n_boot, confidence, random_state)


def confidence_auroc(P, y, *, n_boot: int = 0, confidence: float = 0.95, random_state=None) -> float | Estimate:
    """AUROC of the top-label confidence as a score of correctness (Mann-Whitney, ties one half).

    Refused when every row is correct or every row wrong (the AUROC is undefined); a bootstrap
    resample of one kind only counts as 0.5.
    """
    from scipy.stats import rankdata

    P, y = _inputs(P, y)
    conf, hit = _top(P, y)
    if hit.min() == hit.max():
        raise ValueError("y: every row is " + ("correct" if hit[0] else "wrong") + " (the AUROC of the confidence"
                         " needs both correct and wrong rows)")

    def metric(rows):
        h = hit[rows]
        pos = h.sum()
        neg = h.size - pos
        if pos == 0 or neg == 0:
            return 0.5
        ranks = rankdata(conf[rows])
        return float((ranks[h == 1].sum() - pos * (pos + 1) / 2) / (pos * neg))

    return _interval(metric, P.shape[0], n_boot, confidence, random_state)
