"""Calibration of a model's class probabilities before any set is made (temperature scaling,
Venn-Abers).

The Bayes-optimal sets of the paper (and every set built from ``P(c|x)``) are optimal only when
the probabilities are calibrated.  A deep network's softmax is often over-confident and
one-vs-rest scores pushed through a softmax rarely sum to a calibrated distribution.  This
module fits one temperature ``T`` on held-out rows (Guo, Pleiss, Sun, Weinberger, "On calibration
of modern neural networks", ICML 2017) and measures calibration before and after:

- :func:`fit_temperature`: ``T`` minimising the negative log-likelihood (NLL) of
  ``softmax(z / T)`` on the validation rows, by a bounded 1-D search over ``log T``;
- :func:`fit_conformal_temperature`: conformal temperature scaling (ConfTS, Xi et al. 2024,
  TorchCP's ``ConfTSTrainer``): ``T`` minimising the squared gap between the APS threshold and
  the APS scores of the true labels; ``calibrate: conftemp`` in the pipeline;
- :func:`outputs_to_probabilities`: logits (or probabilities) -> ``P(c|x)`` at a temperature;
- :class:`VennAbers` and :class:`VennAbersMultiClass` (from :mod:`svbop.venn_abers`): inductive
  Venn-Abers predictors (Vovk and Petej 2014), binary and one-vs-rest multi-class, whose
  probabilities come with a validity guarantee; ``calibrate: venn_abers`` in the pipeline;
- :func:`negative_log_likelihood`, :func:`expected_calibration_error` (top-label ECE over
  equal-mass bins: each bin holds the same number of rows, so no bin is empty and none is
  decided by a handful of rows) and :func:`reliability_curve` (the reliability diagram's points).

Logits ``z`` are taken as they are; probabilities are turned into ``z = log P`` first (a zero
probability becomes ``log`` of the smallest positive double, ``-708``, so that a temperature above
1 may give it a little mass back, as softening does).  The temperature never changes which class
is most probable, nor the order of the classes in a row: a temperature changes the sets of
SVBOP-Full (their size), never their ranking.

Every function takes numpy arrays, torch tensors (on any device: copied to the host once), JAX
arrays and pandas frames (:func:`svbop._arrays.as_host_array`) and computes in float64, in blocks of rows, so the
extra memory is a few blocks of ``K`` doubles besides the input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from ._arrays import as_host_array
from ._blocks import release_rows, row_blocks
from .metrics import check_labels
from .venn_abers import VennAbers, VennAbersMultiClass

__all__ = [
    "CALIBRATION_METHODS",
    "VennAbers",
    "VennAbersMultiClass",
    "ECE_BINS",
    "TemperatureScaling",
    "calibrate_streams",
    "calibration_metrics",
    "expected_calibration_error",
    "fit_conformal_temperature",
    "fit_temperature",
    "negative_log_likelihood",
    "outputs_to_probabilities",
    "read_temperature",
    "reliability_curve",
    "separable",
]

#: ``calibrate:`` values: ``none`` keeps the model's probabilities, ``temperature`` fits one T,
#: ``venn_abers`` fits one-vs-rest inductive Venn-Abers predictors (:mod:`svbop.venn_abers`),
#: ``conftemp`` fits one T for conformal sets (ConfTS, :func:`fit_conformal_temperature`).
CALIBRATION_METHODS = ("none", "temperature", "venn_abers", "conftemp")
#: The significance level ConfTS fits for (TorchCP's examples use alpha = 0.1).
CONFTS_EPSILON = 0.1
#: Bins of the top-label ECE and the reliability diagram (equal-mass; 15 as in Guo et al.).
ECE_BINS = 15
#: The bounds of the temperature search (T in [1/100, 100]): beyond them a model's scores carry
#: no information (T -> inf gives the uniform distribution) or are hard labels (T -> 0).
T_BOUNDS = (0.01, 100.0)
#: log of the smallest positive normal double: log P for P = 0 (probabilities given as such).
_LOG_TINY = math.log(np.finfo(np.float64).tiny)
_BLOCK_ROWS = 4096


def _as_scores(scores, name: str) -> np.ndarray:
    arr = as_host_array(scores, name)  # numpy, torch (any device, copied once), JAX, pandas
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"{name}: expected a numeric matrix, got dtype {arr.dtype}")
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise ValueError(f"{name}: expected a 2-D (n_samples, n_classes) matrix, got shape {arr.shape}")
    return arr


def _as_labels(y, n: int, K: int, name: str = "y") -> np.ndarray:
    return check_labels(y, (n, K), name)


def _logits(block: np.ndarray, outputs: str) -> np.ndarray:
    """float64 logits of a block: the scores themselves, or log P for probabilities."""
    z = np.array(block, dtype=np.float64)
    if outputs == "probabilities":
        with np.errstate(divide="ignore"):
            np.log(z, out=z)
        np.maximum(z, _LOG_TINY, out=z)
    elif outputs != "logits":
        raise ValueError(f"outputs: expected 'logits' or 'probabilities', got {outputs!r}")
    return z


#: Below this ``max |z| / T`` the logits are divided by T as they are; above it, ``z / T`` or
#: ``z - max z`` could overflow (finite logits reach 1.8e308), and :func:`_shifted` scales them.
_PLAIN_LIMIT = 1e300


def _scale(Z: np.ndarray, outputs: str, t_min: float) -> float:
    """The power of two ``c`` the logits are divided by before they are shifted and tempered: 1 when
    ``max |z| / t_min`` stays below :data:`_PLAIN_LIMIT` (every ordinary model), else ``2**e >= max |z|``
    (at most ``2**1023``), so that ``z / c - max(z) / c`` lies in ``[-4, 0]`` and never overflows."""
    if outputs == "probabilities" or Z.size == 0:
        top = -_LOG_TINY  # log P lies in [-708, 0]
    else:  # by blocks of rows: a mapped matrix's pages are given back after each (svbop._blocks)
        top = 0.0
        for _, _, block in row_blocks(Z, _BLOCK_ROWS):
            top = max(top, float(np.max(block)), -float(np.min(block)))
    if not math.isfinite(top):
        raise ValueError("scores: non-finite logits (NaN or inf)")
    if top / t_min < _PLAIN_LIMIT:
        return 1.0
    return math.ldexp(1.0, min(1023, math.frexp(top)[1]))


def _shifted(z: np.ndarray, T: float, c: float) -> tuple[np.ndarray, np.ndarray]:
    """``s = (z - max z) / T`` per row (in ``[-inf, 0]``, never NaN, never a warning) and ``d / T`` with
    ``d = (z - max z) / c`` (finite: the log-likelihood divided by ``c``).  ``z`` is overwritten."""
    if c != 1.0:
        z /= c
    z -= z.max(axis=1, keepdims=True)
    z /= T
    if c == 1.0:
        return z, z
    with np.errstate(over="ignore"):  # a gap beyond 1.8e308 is exp(-inf) = 0: the right probability
        s = z * c
    return s, z


def _softmax_inplace(s: np.ndarray) -> np.ndarray:
    """softmax of rows whose largest entry is 0 (:func:`_shifted`); -inf entries get probability 0."""
    np.exp(s, out=s)
    s /= s.sum(axis=1, keepdims=True)
    return s


def outputs_to_probabilities(scores, *, outputs: str = "logits", temperature: float = 1.0,
                             dtype=np.float64) -> np.ndarray:
    """``P(c|x) = softmax(z / T)`` for logits ``z``, or for ``z = log P`` given probabilities.

    With ``outputs="probabilities"`` and ``temperature=1`` the rows are only renormalised (they
    sum to 1 within rounding already when they pass the readers' checks).

    Parameters
    ----------
    scores : array-like, shape (n_samples, n_classes)
    outputs : {"logits", "probabilities"}
    temperature : float > 0
    dtype : numpy dtype of the result (float64; float32 halves its memory)
    """
    Z = _as_scores(scores, "scores")
    T = _check_temperature(temperature)
    if outputs not in ("logits", "probabilities"):
        raise ValueError(f"outputs: expected 'logits' or 'probabilities', got {outputs!r}")
    c = _scale(Z, outputs, T)
    out = np.empty(Z.shape, dtype=dtype)
    for lo, hi, block in row_blocks(Z, _BLOCK_ROWS):
        out[lo:hi] = _probability_block(block, outputs, T, c)
    return out


def _probability_block(block: np.ndarray, outputs: str, T: float, c: float) -> np.ndarray:
    """``softmax(z / T)`` of one block of rows (float64), ``c`` the scale of :func:`_scale`."""
    s, _ = _shifted(_logits(block, outputs), T, c)
    return _softmax_inplace(s)


def _check_temperature(temperature) -> float:
    try:
        T = float(temperature)
    except (TypeError, ValueError):
        raise ValueError(f"temperature: expected a positive number, got {temperature!r}") from None
    if not (math.isfinite(T) and T > 0):
        raise ValueError(f"temperature: expected a finite number > 0, got {temperature!r}")
    return T


def _nll_curve(Z: np.ndarray, y: np.ndarray, outputs: str, t_min: float):
    """A function T -> mean NLL of softmax(z / T), divided by the scale ``c`` of :func:`_scale` (1 for
    every ordinary model; a positive constant, so its minimiser is the NLL's), over blocks of rows.

    Per row, ``NLL / c = log(sum exp((z - max z) / T)) / c - (z_y - max z) / (c T)``: the first term
    lies in ``[0, log K / c]`` and the second is finite however large the logits, so the curve is
    finite at every temperature (logits of 1e308 included)."""
    n = Z.shape[0]
    c = _scale(Z, outputs, t_min)
    keep = Z.shape[0] * Z.shape[1] <= 4 * 10**7  # up to 320 MB of float64 logits: convert them once
    whole = _logits(Z, outputs) if keep else None
    work = np.empty_like(whole) if keep else None  # one buffer for every T (fresh pages cost here)

    def nll(T: float) -> float:
        total = 0.0
        for lo in range(0, n, n if keep else _BLOCK_ROWS):
            if keep:
                np.copyto(work, whole)
                z = work
            else:
                z = _logits(Z[lo: lo + _BLOCK_ROWS], outputs)
                release_rows(Z, lo, lo + _BLOCK_ROWS)  # a mapped matrix: one block resident
            s, d = _shifted(z, T, c)
            dy = d[np.arange(s.shape[0]), y[lo: lo + s.shape[0]]]  # before s (perhaps d itself) is exponentiated
            lse = np.log(np.exp(s, out=s).sum(axis=1))
            total += float(np.sum(lse / c - dy))
        return total / n

    return nll


def fit_temperature(scores, y, *, outputs: str = "logits", bounds: tuple[float, float] = T_BOUNDS,
                    xatol: float = 1e-5) -> float:
    """The temperature ``T`` minimising the mean NLL of ``softmax(z / T)`` on ``(scores, y)``.

    A bounded Brent search over ``log T`` in ``bounds`` (scipy's ``minimize_scalar``): the NLL of
    a temperature-scaled softmax is a smooth function of one variable (convex in ``1 / T``), so
    the 1-D search finds its minimum to ``xatol`` in ``log T`` in a few dozen evaluations.

    Parameters
    ----------
    scores : array-like, shape (n_samples, n_classes)
        Logits, or probabilities (``outputs="probabilities"``: fitted on ``log P``).
    y : array-like of int, shape (n_samples,)
        True classes in ``0 .. n_classes - 1``.
    outputs : {"logits", "probabilities"}
    bounds : (float, float)
        The smallest and largest temperature searched.

    Returns
    -------
    float
        The fitted temperature; a value at a bound means the minimum lies at or beyond it.  When
        the top class of every row is its label, the NLL falls all the way to 0 as T -> 0 and has no
        minimiser: the lower bound is returned (:class:`TemperatureScaling` and
        :func:`calibrate_parts` then keep T = 1 instead, and say why).

    Raises
    ------
    ValueError
        No rows, non-finite scores, or labels outside ``0 .. n_classes - 1``.
    """
    from scipy.optimize import minimize_scalar

    Z = _as_scores(scores, "scores")
    n, K = Z.shape
    if n == 0:
        raise ValueError("scores: no rows to fit a temperature on")
    yy = _as_labels(y, n, K)
    if outputs == "logits" and not all(np.isfinite(b).all() for _, _, b in row_blocks(Z, _BLOCK_ROWS)):
        raise ValueError("scores: non-finite logits (NaN or inf)")
    lo, hi = (float(b) for b in bounds)
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"bounds: expected 0 < low < high, got {bounds!r}")
    if separable(Z, yy):
        return lo
    nll = _nll_curve(Z, yy, outputs, lo)
    res = minimize_scalar(lambda t: nll(math.exp(t)), bounds=(math.log(lo), math.log(hi)), method="bounded",
                          options={"xatol": xatol})
    return float(math.exp(res.x))


def _confts_curve(Z: np.ndarray, y: np.ndarray, outputs: str, epsilon: float, fraction: float):
    """``T -> (loss, dloss/dT)`` of ConfTS with the threshold held fixed (TorchCP computes it on
    detached logits): the rows' logits sorted once (a temperature never changes a row's ranking),
    then per ``T`` the APS scores of the labels, the threshold of the first rows and the mean
    squared gap on the others."""
    n = Z.shape[0]
    z = _logits(Z, outputs)
    order = np.argsort(-z, axis=1, kind="stable")
    zs = np.take_along_axis(z, order, axis=1)
    zs -= zs[:, :1]  # <= 0, the top class 0
    rank = np.argmax(order == y[:, None], axis=1)  # the label's place in its row's ranking
    rows = np.arange(n)
    m = int(fraction * n)
    k = math.ceil((m + 1) * (1 - epsilon))

    def loss(T: float) -> tuple[float, float]:
        e = np.exp(zs / T)
        c, cz = np.cumsum(e, axis=1), np.cumsum(zs * e, axis=1)
        A, B = c[rows, rank], c[:, -1]
        s = A / B  # APS (u = 0): the mass ranked at or before the label
        ds = (-cz[rows, rank] * B + A * cz[:, -1]) / (T * T * B * B)  # d s / d T
        tau = float(np.partition(s[:m], k - 1)[k - 1])
        gap = tau - s[m:]
        return float(np.mean(gap**2)), float(np.mean(-2.0 * gap * ds[m:]))

    return loss


def fit_conformal_temperature(scores, y, *, epsilon: float = CONFTS_EPSILON, outputs: str = "logits",
                              init_temperature: float = 1.0, lr: float = 1e-3, steps: int = 100,
                              fraction: float = 0.5, bounds: tuple[float, float] = T_BOUNDS) -> float:
    """Conformal temperature scaling (ConfTS: Xi, Huang, Liu, Feng and Wei 2024, *Delving into
    temperature scaling for adaptive conformal prediction*), as TorchCP 1.2.1's ``ConfTSTrainer``
    fits it, made deterministic.

    The rows are split as TorchCP splits a batch: the first ``m = floor(fraction * n)`` calibrate, the
    others are scored.  At temperature ``T``, with ``s_T(x, y)`` the deterministic APS score (the
    mass of ``softmax(z / T)`` ranked at or before ``y``: TorchCP's ``APS(randomized=False)``) and
    ``tau(T)`` the split-conformal threshold of the first rows at level ``1 - epsilon`` (their
    ``ceil((m + 1)(1 - epsilon))``-th smallest score, TorchCP's ``soft_qunatile=False``), the loss
    is ``mean over the other rows of (tau(T) - s_T(x, y))^2``.  ``steps`` Adam steps (TorchCP's
    optimiser and its default rate ``lr = 1e-3``; one full batch per step, betas 0.9 and 0.999) on
    ``T`` from ``init_temperature``, with the gradient of the loss at a fixed ``tau`` (TorchCP
    computes the threshold on detached logits), ``T`` kept within ``bounds``.

    **The loss has no interior minimiser in general**: as ``T -> 0`` every APS score tends to 1,
    and so does the threshold, and the loss falls to 0 (on the digits' outputs of the tests, it
    falls monotonically from ``T = 5`` down to ``T = 0.01``), with sets that then hold every class
    above the threshold.  ConfTS is therefore a short descent from ``init_temperature``, as in
    TorchCP (its ``train`` ignores its ``lr`` argument: Adam's default rate); the steps and the rate
    are what a user tunes.  ``tests/test_calibration_conftemp.py`` checks the loss and the descent
    against TorchCP's own on the same logits.

    Parameters
    ----------
    scores : (n, K) logits, or probabilities (``outputs="probabilities"``: ``z = log P``)
    y : (n,) labels
    epsilon : the significance level the sets will be made at
    fraction : the share of rows that calibrate the threshold, in (0, 1)

    Memory: the logits as float64, their ranking and two cumulative sums, ``40 n K`` bytes.
    """
    Z = _as_scores(scores, "scores")
    n, K = Z.shape
    yy = _as_labels(y, n, K)
    if not (isinstance(epsilon, (int, float, np.floating)) and 0 < epsilon < 1):
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
    if not (isinstance(fraction, (int, float, np.floating)) and 0 < fraction < 1):
        raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
    if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    if not (isinstance(lr, (int, float, np.floating)) and 0 < lr < math.inf):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    lo, hi = (float(b) for b in bounds)
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"bounds: expected 0 < low < high, got {bounds!r}")
    if not (isinstance(init_temperature, (int, float, np.floating)) and lo <= init_temperature <= hi):
        raise ValueError(f"init_temperature must lie within bounds {bounds!r}, got {init_temperature!r}")
    m = int(fraction * n)
    if math.ceil((m + 1) * (1 - epsilon)) > m or m == n:
        raise ValueError(f"scores: {n} rows are too few for ConfTS at epsilon={epsilon} (the first {m} give no finite"
                         " threshold, or none are left to score)")
    if outputs == "logits" and not np.all(np.isfinite(np.asarray(Z))):
        raise ValueError("scores: non-finite logits (NaN or inf)")
    loss = _confts_curve(np.asarray(Z), yy, outputs, float(epsilon), float(fraction))
    T, m1, m2 = float(init_temperature), 0.0, 0.0
    for t in range(1, int(steps) + 1):  # Adam (torch.optim.Adam's defaults)
        _, g = loss(T)
        m1 = 0.9 * m1 + 0.1 * g
        m2 = 0.999 * m2 + 0.001 * g * g
        T -= lr * (m1 / (1 - 0.9**t)) / (math.sqrt(m2 / (1 - 0.999**t)) + 1e-8)
        T = min(max(T, lo), hi)
    return T


def _conftemp(scores, y, outputs: str) -> tuple[float, bool]:
    """``calibrate: conftemp``: ConfTS's temperature on the validation rows (the descent starts at the
    NLL's temperature, :func:`fit_temperature`, or 1 when the rows are separable), and whether it is at
    a bound."""
    start = 1.0 if separable(scores, y) else fit_temperature(scores, y, outputs=outputs)
    T = fit_conformal_temperature(scores, y, outputs=outputs, init_temperature=start)
    lo, hi = T_BOUNDS
    return T, bool(T <= lo * 1.001 or T >= hi / 1.001)


def separable(scores, y) -> bool:
    """Whether the top class of every row (ties: the lowest id) is its label: then sharpening lowers
    the NLL without end, and a fitted temperature would only overfit the validation rows."""
    Z = _as_scores(scores, "scores")
    yy = _as_labels(y, Z.shape[0], Z.shape[1])
    return bool(Z.shape[0]) and all(bool(np.all(b.argmax(axis=1) == yy[lo:hi])) for lo, hi, b in row_blocks(Z, _BLOCK_ROWS))


def negative_log_likelihood(P, y) -> float:
    """Mean ``-log P(y|x)`` (natural log); a zero probability counts as the smallest positive double."""
    P = _as_scores(P, "P")
    yy = _as_labels(y, P.shape[0], P.shape[1])
    if P.shape[0] == 0:
        raise ValueError("P: no rows")
    p = np.empty(P.shape[0], dtype=np.float64)
    for lo, hi, block in row_blocks(P, _BLOCK_ROWS):
        p[lo:hi] = block[np.arange(hi - lo), yy[lo:hi]]
    return _mean_nll(p)


def _mean_nll(p: np.ndarray) -> float:
    """Mean ``-log p`` of each row's probability of its label (float64; 0 counts as the smallest double)."""
    return float(-np.mean(np.log(np.maximum(p, np.finfo(np.float64).tiny))))


def _top_label(P: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's top probability and whether its top class (ties: the lowest id) is y."""
    conf = np.empty(P.shape[0], dtype=np.float64)
    hit = np.empty(P.shape[0], dtype=bool)
    for lo, hi, block in row_blocks(P, _BLOCK_ROWS):
        _top_label_block(np.asarray(block), y[lo:hi], conf[lo:hi], hit[lo:hi])
    return conf, hit


def _top_label_block(block: np.ndarray, y: np.ndarray, conf: np.ndarray, hit: np.ndarray) -> None:
    top = block.argmax(axis=1)
    conf[:] = block[np.arange(len(top)), top]
    hit[:] = top == y


def reliability_curve(P, y, n_bins: int = ECE_BINS) -> dict[str, list]:
    """The reliability diagram's points: equal-mass bins of the top-label confidence.

    Rows are sorted by their top probability and cut into ``n_bins`` groups of (nearly) equal
    size (fewer when there are fewer rows).  Per bin: ``confidence`` (mean top probability),
    ``accuracy`` (share of rows whose top class is right) and ``count``.
    """
    P = _as_scores(P, "P")
    yy = _as_labels(y, P.shape[0], P.shape[1])
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins: expected a positive int, got {n_bins!r}")
    conf, hit = _top_label(P, yy)
    return _curve(conf, hit, n_bins)


def _curve(conf: np.ndarray, hit: np.ndarray, n_bins: int) -> dict[str, list]:
    """:func:`reliability_curve` from each row's top probability and whether its top class is right."""
    order = np.argsort(conf, kind="stable")
    out = {"confidence": [], "accuracy": [], "count": []}
    for idx in np.array_split(order, min(int(n_bins), max(1, len(order)))):
        if len(idx) == 0:
            continue
        out["confidence"].append(float(conf[idx].mean()))
        out["accuracy"].append(float(hit[idx].mean()))
        out["count"].append(int(len(idx)))
    return out


def expected_calibration_error(P, y, n_bins: int = ECE_BINS) -> float:
    """Top-label ECE over ``n_bins`` equal-mass bins: ``sum_b (n_b / n) |accuracy_b - confidence_b|``."""
    curve = reliability_curve(P, y, n_bins)
    n = sum(curve["count"])
    if n == 0:
        raise ValueError("P: no rows")
    return float(sum(c * abs(a - f) for c, a, f in zip(curve["count"], curve["accuracy"], curve["confidence"])) / n)


def calibration_metrics(P, y, n_bins: int = ECE_BINS) -> dict[str, object]:
    """``{"nll", "ece", "top1_pct", "reliability"}`` of probabilities ``P`` on labels ``y``.

    Raises
    ------
    ValueError
        ``"P: no rows (calibration metrics need at least one labelled row)"``.
    """
    curve = reliability_curve(P, y, n_bins)
    if sum(curve["count"]) == 0:
        raise ValueError("P: no rows (calibration metrics need at least one labelled row)")
    return _metrics(curve, negative_log_likelihood(P, y))


def _metrics(curve: dict[str, list], nll: float) -> dict[str, object]:
    n = sum(curve["count"])
    if n == 0:
        raise ValueError("P: no rows (calibration metrics need at least one labelled row)")
    ece = float(sum(c * abs(a - f) for c, a, f in zip(curve["count"], curve["accuracy"], curve["confidence"])) / n)
    top1 = float(sum(c * a for c, a in zip(curve["count"], curve["accuracy"])) / n)
    return {"nll": nll, "ece": ece, "top1_pct": 100.0 * top1, "reliability": curve}


class TemperatureScaling:
    """Temperature scaling of a model's outputs (scikit-learn style).

    Parameters
    ----------
    outputs : {"logits", "probabilities"}
        What the scores given to :meth:`fit` and :meth:`transform` are.
    bounds : (float, float)
        Range of the temperature search.

    Attributes
    ----------
    temperature_ : float
        The fitted temperature (> 1: the model was over-confident).

    Examples
    --------
    >>> import numpy as np
    >>> z = np.array([[4.0, 0.0], [0.0, 4.0], [4.0, 0.0], [4.0, 0.0]])
    >>> ts = TemperatureScaling().fit(z, [0, 1, 1, 0])
    >>> bool(ts.temperature_ > 1)
    True
    """

    def __init__(self, outputs: str = "logits", bounds: tuple[float, float] = T_BOUNDS) -> None:
        self.outputs = outputs
        self.bounds = bounds

    def fit(self, scores, y) -> "TemperatureScaling":
        """Fit ``temperature_``; rows that are all classified right (:func:`separable`) keep 1.0, with
        ``skipped_`` saying why (no finite temperature minimises their NLL)."""
        self.skipped_ = None
        if separable(scores, y):
            self.temperature_ = 1.0
            self.skipped_ = ("every validation row's top class is its label: the NLL falls without end as T -> 0, "
                             "so no temperature is fitted (T = 1)")
        else:
            self.temperature_ = fit_temperature(scores, y, outputs=self.outputs, bounds=self.bounds)
        return self

    def transform(self, scores, dtype=np.float64) -> np.ndarray:
        """Calibrated probabilities ``softmax(z / temperature_)``."""
        if not hasattr(self, "temperature_"):
            raise ValueError("TemperatureScaling: call fit first")
        return outputs_to_probabilities(scores, outputs=self.outputs, temperature=self.temperature_, dtype=dtype)

    def at_bound(self) -> bool:
        """Whether the fitted temperature is at an end of ``bounds`` (within 0.1 %)."""
        lo, hi = self.bounds
        return bool(self.temperature_ <= lo * 1.001 or self.temperature_ >= hi / 1.001)


def read_temperature(paths) -> float:
    """The temperature of a calibration record written by the pipeline (1.0 when ``paths`` is empty:
    the dataset is not calibrated)."""
    from .io import read_json_object

    paths = [paths] if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__") else list(paths)
    if not paths:
        return 1.0
    return _check_temperature(read_json_object(paths[0], "the calibration record").get("temperature", 1.0))


def describe(record: Mapping[str, object]) -> str:
    """One line for a log: temperature and the test rows' ECE and NLL before -> after.

    Examples
    --------
    >>> m = {"ece": 0.05, "nll": 0.9}
    >>> describe({"method": "temperature", "temperature": 2.0, "test": {"before": m, "after": {"ece": 0.01, "nll": 0.7}}})
    'temperature: T = 2; test ECE 0.0500 -> 0.0100, NLL 0.9000 -> 0.7000'
    >>> describe({"method": "none", "temperature": 1.0})
    'none: T = 1; no labelled test rows'
    """
    test = record.get("test") or {}
    head = (f"{record.get('method')}: one-vs-rest Venn-Abers" if record.get("method") == "venn_abers"
            else f"{record.get('method')}: T = {record.get('temperature', 1.0):.4g}")
    if not test:
        return f"{head}; no labelled test rows"
    before, after = test["before"], test["after"]
    return (f"{head}; test ECE {before['ece']:.4f} -> {after['ece']:.4f}, NLL "
            f"{before['nll']:.4f} -> {after['nll']:.4f}")


def calibrate_parts(
    scores: Mapping[str, object],
    labels: Mapping[str, object],
    *,
    outputs: str = "logits",
    method: str = "temperature",
    utilities=(),
    dtype=np.float32,
    n_bins: int = ECE_BINS,
) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """Probabilities of every part, calibrated on the validation rows, and a record of what changed.

    Parameters
    ----------
    scores, labels : mappings of part name (``validation``, ``calibration``, ``test``) to arrays
        A model's scores (``outputs``) and true classes per part.  The temperature is fitted on
        ``validation`` only; ``test`` is only ever measured.
    outputs : {"logits", "probabilities"}
    method : {"none", "temperature", "venn_abers"}
        ``none``: the probabilities as given (``softmax`` of logits), measured all the same;
        ``venn_abers``: one-vs-rest inductive Venn-Abers (:class:`VennAbersMultiClass`) fitted on the
        validation rows' probabilities (``temperature`` stays 1 in the record).
    utilities : sequence of utility specs
        SVBOP-Full's sets on the test rows under each, before and after calibration (their mean
        utility and size go into the record: what calibration changed in the sets).
    dtype : numpy dtype of the returned probabilities (float32, as the pipeline stores them)

    Returns
    -------
    probabilities : dict of part name to (n_part, K) arrays
    record : dict
        ``method``, ``outputs``, ``temperature`` (1 for ``none``), ``at_bound``, ``ece_bins`` and
        ``ece_binning``, per part ``rows``, ``validation`` and ``test`` each with ``before`` and
        ``after`` (``nll``, ``ece``, ``top1_pct``, ``reliability``), and ``sets``: one entry per
        utility with SVBOP-Full's mean utility (%) and mean size before and after.
    """
    from .metrics import set_utility
    from .search import predict_sets

    if method not in CALIBRATION_METHODS:
        raise ValueError(f"calibrate: expected one of {', '.join(CALIBRATION_METHODS)}, got {method!r}")
    if "test" not in scores:
        raise ValueError("scores: no test part")
    T, at_bound, skipped, venn_abers = 1.0, False, None, None
    if method in ("temperature", "venn_abers", "conftemp") and (
            "validation" not in scores or np.asarray(labels["validation"]).size == 0):
        raise ValueError(f"calibrate: {method} is fitted on the validation rows, and there are none "
                         "(give a validation part or a split.validation size)")
    if method == "temperature":
        scaler = TemperatureScaling(outputs).fit(scores["validation"], labels["validation"])
        T, at_bound, skipped = scaler.temperature_, scaler.at_bound(), scaler.skipped_
    elif method == "conftemp":
        T, at_bound = _conftemp(scores["validation"], labels["validation"], outputs)
    elif method == "venn_abers":
        venn_abers = VennAbersMultiClass().fit(
            outputs_to_probabilities(scores["validation"], outputs=outputs, dtype=np.float64), labels["validation"])
    probs, record = {}, {
        "method": method, "outputs": outputs, "temperature": T, "at_bound": at_bound, "bounds": list(T_BOUNDS),
        "ece_bins": int(n_bins), "ece_binning": "equal-mass (each bin the same number of rows), top-label",
        "fitted_on": "validation" if method != "none" else None, "not_fitted": skipped,
        "rows": {p: int(np.asarray(labels[p]).size) for p in scores},
    }
    before_test = None
    for part in scores:
        probs[part] = outputs_to_probabilities(scores[part], outputs=outputs, temperature=T,
                                               dtype=np.float64 if venn_abers is not None else dtype)
        changed = T != 1.0 or venn_abers is not None
        if venn_abers is not None:
            given = probs[part]
            probs[part] = venn_abers.predict_proba(given).astype(dtype)
        if part in ("validation", "test") and np.asarray(labels[part]).size:
            if venn_abers is not None:
                before = given
            else:
                before = outputs_to_probabilities(scores[part], outputs=outputs, dtype=np.float64) if changed else None
            after_m = calibration_metrics(probs[part], labels[part], n_bins)
            before_m = calibration_metrics(before, labels[part], n_bins) if before is not None else after_m
            record[part] = {"before": before_m, "after": after_m}
            if part == "test":
                before_test = before if before is not None else probs[part]
    y_test = np.asarray(labels["test"])
    record["sets"] = []
    for spec in utilities:
        row = {"utility": str(spec)}
        for when, P in (("before", before_test), ("after", probs["test"])):
            sets = predict_sets(P, spec)
            row[when] = {"utility_pct": 100.0 * float(np.mean(set_utility(sets, y_test, spec))),
                         "mean_size": float(np.mean(sets.sizes))}
        record["sets"].append(row)
    return probs, record


def calibrate_streams(
    scores: Mapping[str, object],
    labels: Mapping[str, object],
    *,
    outputs: str = "logits",
    method: str = "temperature",
    utilities=(),
    dtype=np.float32,
    n_bins: int = ECE_BINS,
    block_rows: int = _BLOCK_ROWS,
):
    """:func:`calibrate_parts` for scores larger than memory: the same probabilities and record, bit
    for bit, with one block of rows resident at a time.

    ``scores`` may be memory maps (``np.load(path, mmap_mode="r")``, the pipeline's mapped files):
    the temperature is fitted on the validation rows by blocks, and each part's probabilities are
    not returned but *streamed*: ``streams[part]`` is an :class:`svbop.io.RowStream` of blocks of
    ``block_rows`` rows, to be written with :func:`svbop.io.save_arrays` (``compress=False``) or
    consumed otherwise, in the order of ``scores``.  The pass that makes them also measures them,
    so the record is complete once every stream has been consumed: call ``record()`` then.
    ``method="venn_abers"`` is made in memory (:func:`calibrate_parts`) and then streamed.

    Returns
    -------
    streams : dict of part name to RowStream
    record : callable returning the record of :func:`calibrate_parts`
    """
    from .io import RowStream
    from .metrics import set_utility
    from .search import predict_sets

    if method not in CALIBRATION_METHODS:
        raise ValueError(f"calibrate: expected one of {', '.join(CALIBRATION_METHODS)}, got {method!r}")
    if "test" not in scores:
        raise ValueError("scores: no test part")
    if outputs not in ("logits", "probabilities"):
        raise ValueError(f"outputs: expected 'logits' or 'probabilities', got {outputs!r}")
    if method == "venn_abers":  # one isotonic fit per class on the validation rows: made in memory, then streamed
        probs, made = calibrate_parts(scores, labels, outputs=outputs, method=method, utilities=utilities,
                                      dtype=dtype, n_bins=n_bins)
        def blocks_of(P):  # each part's own rows (a generator expression here would read the last part's)
            return (P[lo:lo + block_rows] for lo in range(0, P.shape[0], block_rows))

        return {p: RowStream(P.shape, P.dtype, blocks_of(P)) for p, P in probs.items()}, lambda: made
    T, at_bound, skipped = 1.0, False, None
    if method == "temperature":
        if "validation" not in scores or np.asarray(labels["validation"]).size == 0:
            raise ValueError("calibrate: temperature is fitted on the validation rows, and there are none "
                             "(give a validation part or a split.validation size)")
        scaler = TemperatureScaling(outputs).fit(scores["validation"], labels["validation"])
        T, at_bound, skipped = scaler.temperature_, scaler.at_bound(), scaler.skipped_
    elif method == "conftemp":
        if "validation" not in scores or np.asarray(labels["validation"]).size == 0:
            raise ValueError("calibrate: conftemp is fitted on the validation rows, and there are none "
                             "(give a validation part or a split.validation size)")
        T, at_bound = _conftemp(scores["validation"], labels["validation"], outputs)
    record = {
        "method": method, "outputs": outputs, "temperature": T, "at_bound": at_bound, "bounds": list(T_BOUNDS),
        "ece_bins": int(n_bins), "ece_binning": "equal-mass (each bin the same number of rows), top-label",
        "fitted_on": "validation" if method in ("temperature", "conftemp") else None, "not_fitted": skipped,
        "rows": {p: int(np.asarray(labels[p]).size) for p in scores},
    }
    specs = list(utilities)
    done: dict[str, dict] = {}

    def blocks(part: str):
        Z = _as_scores(scores[part], f"scores[{part!r}]")
        y = np.asarray(labels[part])
        measured = part in ("validation", "test") and y.size
        if measured:
            y = _as_labels(y, Z.shape[0], Z.shape[1])
        sets_of = part == "test" and specs
        n = Z.shape[0]
        acc = {k: {"conf": np.empty(n), "hit": np.empty(n, dtype=bool), "p": np.empty(n)} for k in ("before", "after")}
        per_set = {(i, w): (np.empty(n), np.empty(n, dtype=np.int64)) for i in range(len(specs)) for w in ("before", "after")}
        c_after = _scale(Z, outputs, T)
        c_before = _scale(Z, outputs, 1.0) if T != 1.0 else c_after
        for lo, hi, block in row_blocks(Z, block_rows):
            after = _probability_block(block, outputs, T, c_after).astype(dtype, copy=False)
            if measured or sets_of:
                before = _probability_block(block, outputs, 1.0, c_before) if T != 1.0 else None
                for when, P in (("before", before if before is not None else after), ("after", after)):
                    a = acc[when]
                    if measured:
                        _top_label_block(P, y[lo:hi], a["conf"][lo:hi], a["hit"][lo:hi])
                        a["p"][lo:hi] = P[np.arange(hi - lo), y[lo:hi]]
                    if sets_of:
                        yy = np.asarray(labels["test"])[lo:hi]
                        for i, spec in enumerate(specs):
                            sets = predict_sets(P, spec)
                            per_set[i, when][0][lo:hi] = set_utility(sets, yy, spec)
                            per_set[i, when][1][lo:hi] = sets.sizes
            yield after
        if measured:
            done[part] = {w: _metrics(_curve(acc[w]["conf"], acc[w]["hit"], n_bins), _mean_nll(acc[w]["p"]))
                          for w in ("after", "before")}
        if sets_of:
            done["sets"] = [{"utility": str(spec), **{w: {"utility_pct": 100.0 * float(np.mean(per_set[i, w][0])),
                                                         "mean_size": float(np.mean(per_set[i, w][1]))}
                                                     for w in ("before", "after")}}
                            for i, spec in enumerate(specs)]

    streams = {part: RowStream((np.shape(scores[part])[0], np.shape(scores[part])[1]), dtype, blocks(part))
               for part in scores}

    def finish() -> dict[str, object]:
        missing = [p for p in scores if p in ("validation", "test") and np.asarray(labels[p]).size and p not in done]
        if missing:
            raise RuntimeError(f"calibrate_streams: the stream of part {missing[0]!r} was not consumed")
        for part in scores:
            if part in done:
                record[part] = {"before": done[part]["before"], "after": done[part]["after"]}
        record["sets"] = done.get("sets", [])
        return record

    return streams, finish
