"""Every class's score at once: the ``(n, K)`` matrix ``s(x_i, c)`` of a ranked score (for the
predictors whose threshold depends on the row *and* the class, or that search over all of a row's
scores: risk control, weighted class-conditional sets)."""

from __future__ import annotations

import numpy as np

from .._prefix import DEFAULT_CHUNK_BYTES
from ._common import _normalised_chunks, _with_tolerance
from .scores import _ranked_scores

__all__ = ["score_matrix", "threshold_mask"]


def score_matrix(P: np.ndarray, score: str, k_reg: int = 1, lam: float = 0.0, U: np.ndarray | None = None,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, name: str = "P") -> np.ndarray:
    """``S[i, c] = s(x_i, c)`` for every class of every row (``U``: one uniform per row for the
    randomised scores, ``None`` for the deterministic ones).

    The classes of a row are ranked by a stable sort of ``-P`` (decreasing, ties by class index)
    and the scores computed along that ranking by :func:`svbop.conformal.scores._ranked_scores`:
    the same operations, in the same order, as the set kernels, so ``S[i, c] <= q`` is the kernel's
    test (before its tolerance).  Memory: ``8 n K`` bytes for the result.
    """
    n, K = P.shape
    k_reg = min(k_reg, K)
    S = np.empty((n, K))
    for row0, Xn in _normalised_chunks(P, name, chunk_bytes):
        r = Xn.shape[0]
        if score == "lac":
            S[row0 : row0 + r] = 1.0 - Xn
            continue
        order = np.argsort(-Xn, axis=1, kind="stable")
        V = np.take_along_axis(Xn, order, axis=1)
        u = None if U is None else U[row0 : row0 + r]
        ranked = _ranked_scores(V, score, k_reg, lam, u)
        out = np.empty((r, K))
        np.put_along_axis(out, order, ranked, axis=1)
        S[row0 : row0 + r] = out
    return S


def threshold_mask(S: np.ndarray, Q, top1: bool) -> np.ndarray:
    """``S <= Q`` with the kernels' tolerance (:func:`svbop.conformal._common._with_tolerance`);
    ``Q`` broadcasts against ``S`` (one per row as ``(n, 1)``, one per class, one per cell).  An
    empty row gets its lowest-score class (the top of its ranking) when ``top1``."""
    K = S.shape[1]
    Q = np.asarray(Q, dtype=np.float64)
    finite = np.isfinite(Q)
    Qt = np.where(finite, _with_tolerance(np.where(finite, Q, 0.0).reshape(-1), K).reshape(Q.shape), Q)
    mask = S <= Qt
    if top1 and S.shape[0]:
        empty = ~mask.any(axis=1)
        if empty.any():
            rows = np.flatnonzero(empty)
            mask[rows, np.argmin(S[rows], axis=1)] = True
    return mask
