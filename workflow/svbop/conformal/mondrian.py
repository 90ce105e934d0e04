"""Group-conditional (Mondrian) calibration: the small-group rule, its warning, the fewest rows a
finite quantile needs, groups known at test time (:func:`predicted_groups`), and the merge of
per-group sets.  :meth:`svbop.conformal.ConformalSetPredictor.fit` with ``groups=`` uses them."""

from __future__ import annotations

import math

import numpy as np

from .._blocks import row_blocks
from .._prefix import DEFAULT_CHUNK_BYTES, as_score_matrix
from ..sets import SetPredictions
from ._common import _epsilon

__all__ = ["SMALL_GROUPS", "GroupCalibrationWarning", "min_calibration_rows", "GROUPINGS", "predicted_groups"]

#: What a group with too few calibration rows for a finite quantile gets (``small_groups=``).
SMALL_GROUPS = ("marginal", "full")


class GroupCalibrationWarning(UserWarning):
    """A group too small for its own threshold, or not seen at calibration, got a fallback."""


def min_calibration_rows(epsilon) -> int:
    """The fewest calibration rows ``n`` whose conformal quantile is finite at level ``epsilon``.

    The quantile is the ``k``-th smallest of ``n`` scores with ``k = ceil((n+1)(1-epsilon))``,
    finite iff ``k <= n``, i.e. iff ``(n+1)(1-epsilon) <= n``, i.e. ``n >= 1/epsilon - 1``
    (exact arithmetic): 9 rows at ``epsilon = 0.1``, 19 at 0.05, 99 at 0.01.
    """
    eps = _epsilon(epsilon)
    return max(1, math.ceil(1 / eps - 1))



def _group_list(labels: np.ndarray, counts: np.ndarray, most: int = 20) -> str:
    """``'a' (3 rows), 'b' (5 rows)``, at most ``most`` of them (then how many more)."""
    items = [f"{label!r} ({int(c)} rows)" for label, c in zip(labels.tolist()[:most], counts[:most])]
    if labels.size > most:
        items.append(f"and {labels.size - most} more")
    return ", ".join(items)



def _merge_rows(parts, n: int, K: int) -> SetPredictions:
    """One SetPredictions of ``n`` rows from ``(rows, sets)`` parts that partition ``0..n-1``."""
    sizes = np.zeros(n, dtype=np.int64)
    for rows, sets in parts:
        sizes[rows] = sets.sizes
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    ind = np.empty(int(ptr[-1]), dtype=np.int64)
    eu = np.empty(n) if parts and all(sets.expected_utility is not None for _, sets in parts) else None
    for rows, sets in parts:
        within = np.arange(sets.indices.size) - np.repeat(sets.indptr[:-1], sets.sizes)
        ind[np.repeat(ptr[rows], sets.sizes) + within] = sets.indices
        if eu is not None:
            eu[rows] = sets.expected_utility
    return SetPredictions(ind, ptr, K, eu)



#: Groups known at test time that :func:`predicted_groups` computes from the probabilities.
GROUPINGS = ("predicted_class", "predicted_top_node")


def predicted_groups(P, by: str, hierarchy=None) -> np.ndarray:
    """The group of every row that is known at test time, from its probabilities: for Mondrian
    calibration (``ConformalSetPredictor.fit(..., groups=...)``) and per-group coverage.

    ``by="predicted_class"``: the most probable class (ties: the lowest id).
    ``by="predicted_top_node"``: the top-level node of the hierarchy (a child of the root) above the
    most probable class (the class itself when it hangs from the root); needs ``hierarchy``.
    """
    P = as_score_matrix(P, "P")
    if by not in GROUPINGS:
        raise ValueError(f"by must be one of {', '.join(GROUPINGS)}, got {by!r}")
    top = np.empty(P.shape[0], dtype=np.int64)
    rows = max(1, DEFAULT_CHUNK_BYTES // max(1, P.shape[1] * 8))
    for lo, hi, block in row_blocks(P, rows):  # a mapped matrix: one chunk resident (svbop._blocks)
        top[lo:hi] = np.asarray(block).argmax(axis=1)
    if by == "predicted_class":
        return top
    from ..datasets.base import Hierarchy

    if not isinstance(hierarchy, Hierarchy):
        raise ValueError("by='predicted_top_node' needs hierarchy (a svbop.datasets.Hierarchy over the classes)")
    if hierarchy.n_classes != P.shape[1]:
        raise ValueError(f"hierarchy has {hierarchy.n_classes} classes but P has {P.shape[1]} columns")
    parent = np.asarray(hierarchy.parent)
    first = np.arange(hierarchy.n_classes)  # the ancestor of each class just below the root
    for _ in range(parent.size):
        up = parent[first]
        move = (up >= 0) & (parent[np.maximum(up, 0)] >= 0)
        if not move.any():
            break
        first = np.where(move, up, first)
    return first[top]
