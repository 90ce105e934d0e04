"""Helpers every conformal score shares (every module of :mod:`svbop.conformal`):
the significance level as an exact fraction, the exact order statistic, the tolerance of score
comparisons, and rows normalised in chunks."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from .._blocks import row_blocks
from .._prefix import row_stats

__all__ = ["_epsilon", "_normalised_chunks", "_summed_chunks", "_no_calibration_rows", "_order_statistic", "_score_tolerance",
           "_with_tolerance", "_NORMAL_MIN"]


def _epsilon(epsilon) -> Fraction:
    try:
        eps = Fraction(str(epsilon))
    except (ValueError, TypeError):
        raise ValueError(f"significance level epsilon must be a number in (0, 1), got {epsilon!r}") from None
    if not 0 < eps < 1:
        raise ValueError(f"significance level epsilon must be in (0, 1), got {epsilon!r}")
    return eps


def _score_tolerance(K: int) -> float:
    """Relative tolerance of ``s(x, c) <= q`` for the APS/RAPS (and class-conditional LAC) scores.

    A score is a cumulative sum of up to ``K`` normalised probabilities, so two scores that are
    equal in exact arithmetic (a test row's total mass and a calibration row's, both 1) can differ
    in float64 by the rounding of that sum, at most about ``K`` units of ``2**-53`` of its value:
    ``1.0`` against ``0.9999999999999999``.  A class is kept when ``s <= q + tol * max(1, |q|)``
    with ``tol = 4 K 2**-52``: twice the bound, so that rounding never drops a class that the exact
    scores keep.  It can only add classes whose exact score exceeds ``q`` by less than that
    (coverage is kept).  MAPIE compares with an absolute ``EPSILON`` (1e-8 in MAPIE 1.x); ours
    is at most that for ``K`` up to 11 million, and follows ``K``.
    """
    return 4.0 * K * float(np.finfo(np.float64).eps)


def _with_tolerance(q, K: int):
    """``q + tol * max(1, |q|)`` (a float or one per class; ``inf`` stays ``inf``)."""
    tol = _score_tolerance(K)
    if np.ndim(q) == 1:
        q = np.asarray(q, dtype=np.float64)
        return q + tol * np.maximum(1.0, np.abs(q))
    q = float(q)
    return q + tol * max(1.0, abs(q))


def _normalised_chunks(P: np.ndarray, name: str, chunk_bytes: int, offset: int = 0):
    """Yield ``(row0, Pn)``: chunks of rows of ``P`` validated, as float64 and divided by their sums.

    The row sum is numpy's ``sum`` of the float64 row (pairwise, the same for a row alone or in
    any chunk), so a score computed here equals the one computed from the row by itself.
    """
    n, K = P.shape
    rows = max(1, int(chunk_bytes) // max(1, K * 8))
    for row0, _, X in row_blocks(P, rows):  # a mapped matrix: one chunk resident (svbop._blocks)
        X = np.ascontiguousarray(X)
        row_stats(X, offset + row0, name)  # NaN, infinity, negative or all-zero rows: named, one line
        Xn = X.astype(np.float64)  # a copy: divided in place
        Xn /= Xn.sum(axis=1)[:, None]
        yield row0, Xn


def _summed_chunks(P: np.ndarray, chunk_bytes: int):
    """Yield ``(row0, X, total)``: chunks of rows of ``P`` as float64 (no copy of a float64 matrix)
    for a kernel that divides each row by its sum as it reads it, ``X / total[:, None]`` being
    :func:`_normalised_chunks`' ``Pn`` bit for bit.  ``total`` is empty when the kernels sum each
    row themselves as numpy does (:func:`svbop.conformal._ranked.kernel_sums_are_numpys`: one pass
    fewer), numpy's ``sum`` otherwise.

    Nothing is checked here: the kernel checks every value and every sum, and on a bad row
    :func:`svbop._prefix.row_stats` names it (NaN, infinity, a negative value, no mass), one line."""
    from ._ranked import kernel_sums_are_numpys

    own = kernel_sums_are_numpys()
    n, K = P.shape
    rows = max(1, int(chunk_bytes) // max(1, K * 8))
    for row0, _, X in row_blocks(P, rows):
        X = np.ascontiguousarray(X).astype(np.float64, copy=False)
        yield row0, X, np.empty(0) if own else X.sum(axis=1)


def _order_statistic(scores: np.ndarray, eps: Fraction) -> float:
    """The ``ceil((n+1)(1-eps))``-th smallest score (exact level), ``inf`` when that exceeds ``n``."""
    n = scores.size
    k = math.ceil((n + 1) * (1 - eps))
    if k > n:
        return math.inf
    return float(np.partition(scores, k - 1)[k - 1])


def _no_calibration_rows(P_cal: np.ndarray) -> None:
    if P_cal.shape[0] == 0:
        raise ValueError(f"P_cal has no rows (shape {P_cal.shape}, dtype {P_cal.dtype}): the calibration set is empty")



#: Smallest positive normal float64: ``lam`` and ``gamma`` are 0 (``lam`` only) or at least this,
#: as the utilities' parameters are (a subnormal has too few bits to compute with).
_NORMAL_MIN = float(np.finfo(np.float64).tiny)


def _seed(random_state) -> int:
    """The seed of one ``fit``: the integer given, one drawn from a numpy Generator or RandomState
    (consumed, as scikit-learn does), or fresh entropy for ``None``."""
    if random_state is None:
        return int(np.random.SeedSequence().entropy)
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**63))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(2**31))
    return int(random_state)


def _check_level(value, name: str, upper: float = 1.0) -> Fraction:
    """``value`` as an exact fraction in ``(0, upper)`` (``upper``: a loss's bound), or a ValueError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating, Fraction)) \
            or not math.isfinite(value):
        raise ValueError(f"{name} must be a number in (0, {upper:g}), got {value!r}")
    level = Fraction(str(value)) if not isinstance(value, Fraction) else value
    if not 0 < level < Fraction(upper):
        raise ValueError(f"{name} must be in (0, {upper:g}) (the loss's bound), got {value!r}")
    return level


def row_uniforms(seed: int, row_seeds, n: int) -> np.ndarray:
    """One uniform in [0, 1) per row from ``seed`` and the row's integer ``row_seeds[i]``
    (SplitMix64 of both: independent of the batch a row comes in)."""
    r = np.asarray(row_seeds)
    if r.shape != (n,) or not np.issubdtype(r.dtype, np.integer):
        raise ValueError(f"row_seeds: expected {n} integers (one per row), got {r.dtype} of shape {r.shape}")
    with np.errstate(over="ignore"):
        z = r.astype(np.uint64) + np.uint64(int(seed) % 2**64) * np.uint64(0x9E3779B97F4A7C15)
        for _ in range(2):  # SplitMix64's finaliser, twice: the seed and the row number mixed
            z = z + np.uint64(0x9E3779B97F4A7C15)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)
