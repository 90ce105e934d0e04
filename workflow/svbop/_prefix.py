"""The engine behind every prefix-based set predictor: sort each row only as far as needed.

SVBOP-Full, the cumulative threshold baseline, top-s and conformal sets are all *prefixes* of the
classes sorted by decreasing probability.  Sorting all ``K`` classes of every row is wasteful when
the answer uses a few of them, so each row is processed in rounds:

1. keep the candidates ``P[i, c] >= t_i`` (a threshold per row, e.g. a fraction of the row's
   maximum), found with one vectorised comparison;
2. sort only those candidates (rows are grouped by candidate count into power-of-two widths so
   each group is one padded 2-D array);
3. let a *decision rule* scan the sorted prefix; it either settles the row, using the fact that
   every class left out has probability ``< t_i``, or asks for more;
4. rows that asked for more get a lower threshold (finally ``0``: every class) in the next round.

All work runs on chunks of rows small enough to stay in the CPU cache, so the validation passes
(max, min, sum) and the comparison read main memory about once.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
from threadpoolctl import threadpool_limits

from ._arrays import as_host_array
from ._blocks import release_rows
from ._threads import _chunk_workers
from .sets import SetPredictions

#: Default working-set size of one chunk of rows (bytes of the input matrix).
DEFAULT_CHUNK_BYTES = 32 * 1024 * 1024


def as_score_matrix(P, name: str = "P") -> np.ndarray:
    """Check the shape and dtype of a probability/score matrix; return it as a float array.

    ``P`` may be anything :func:`svbop._arrays.as_host_array` reads (numpy, torch on any device,
    JAX, pandas, ``__array__`` / ``__dlpack__`` objects): it is moved to host memory here, once
    (a numpy array passes through).
    float32 stays float32 (the engine sums rows and scans sorted candidates in float64), narrower
    floats and integers become float64.  Values (non-negative, finite, positive row sums) are
    checked chunk by chunk by the engine.
    """
    if isinstance(P, SetPredictions) or P is None:
        raise ValueError(f"{name} must be an (n_samples, n_classes) array of probabilities")
    arr = as_host_array(P, name)  # refuses sparse matrices and non-numeric dtypes, naming P
    if arr.ndim != 2:
        hint = " (use P.reshape(1, -1) for a single sample)" if arr.ndim == 1 else ""
        raise ValueError(
            f"{name} must be 2-D of shape (n_samples, n_classes), got shape {arr.shape}{hint}"
        )
    if arr.shape[1] < 1:
        raise ValueError(f"{name} has no classes (shape {arr.shape})")
    if not np.issubdtype(arr.dtype, np.floating) or arr.dtype.itemsize < 4:
        arr = arr.astype(np.float64)
    return arr


_UINT = {np.dtype(np.float64): (np.uint64, 0x7FF0000000000000), np.dtype(np.float32): (np.uint32, 0x7F800000)}


def row_stats(X: np.ndarray, row0: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Row maxima and row sums of a chunk; raise ``ValueError`` naming the first bad row.

    One pass finds the row maxima *and* every NaN, infinity or negative value: read as unsigned
    integers, non-negative finite floats keep their order and lie below the bit pattern of
    ``+inf``, while NaN, ``+inf`` and anything with the sign bit set lie at or above it.
    """
    if X.dtype in _UINT:
        utype, inf_bits = _UINT[X.dtype]
        bits = X.view(utype).max(axis=1)
        rowmax = bits.view(X.dtype).copy()
        bad = bits >= inf_bits
        if bad.any():
            sub = X[bad]
            if np.isnan(sub).any() or np.isinf(sub).any() or (sub < 0).any():
                _raise_bad_row(X, row0, name)
            rowmax[bad] = sub.max(axis=1)  # only negative zeros: fine
    else:  # other float types (float16, longdouble)
        rowmax = X.max(axis=1)
        if not (X.min() >= 0) or not np.all(np.isfinite(rowmax)):
            _raise_bad_row(X, row0, name)
    if X.dtype == np.float64:
        # BLAS matrix-vector product: several times faster than a pairwise sum, and exact enough
        # (relative error <= K * 2**-53, far below the tie tolerance)
        total = X @ np.ones(X.shape[1])
    else:  # float32 sums must accumulate in float64
        total = X.sum(axis=1, dtype=np.float64)
    if not np.all(total > 0):
        _raise_bad_row(X, row0, name)
    if not np.all(np.isfinite(total)):
        i = int(np.flatnonzero(~np.isfinite(total))[0])
        raise ValueError(f"{name}: row {row0 + i} sums to infinity (scores too large; rescale them)")
    return rowmax, total


def _raise_bad_row(X: np.ndarray, row0: int, name: str) -> None:
    nan = np.isnan(X).any(axis=1)
    if nan.any():
        i = int(np.flatnonzero(nan)[0])
        raise ValueError(f"{name}: row {row0 + i} contains NaN")
    inf = np.isinf(X).any(axis=1)
    if inf.any():
        i = int(np.flatnonzero(inf)[0])
        raise ValueError(f"{name}: row {row0 + i} contains an infinite value")
    neg = (X < 0).any(axis=1)
    if neg.any():
        i = int(np.flatnonzero(neg)[0])
        j = int(np.flatnonzero(X[i] < 0)[0])
        raise ValueError(
            f"{name}: row {row0 + i} has a negative probability P[{row0 + i}, {j}] = {X[i, j]!r}"
        )
    i = int(np.flatnonzero(~(X.sum(axis=1) > 0))[0])
    raise ValueError(f"{name}: row {row0 + i} is all zeros (no probability mass)")


def _candidates(
    X: np.ndarray, t: np.ndarray, buf: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flat positions (row-major, ascending) of ``X[i, c] >= t[i]``, their rows, and the count per row.

    ``buf`` is an optional reusable boolean buffer of at least ``X.size`` entries (a fresh
    array per chunk would cost page faults comparable to the comparison itself).
    """
    r, K = X.shape
    mask = np.empty(X.shape, dtype=bool) if buf is None else buf[: X.size].reshape(X.shape)
    np.greater_equal(X, t[:, None], out=mask)
    pos = np.flatnonzero(mask)  # numpy's boolean nonzero is SIMD: cheaper than any trick here
    rows = pos // K
    return pos, rows, np.bincount(rows, minlength=r)


@dataclass
class SortedHeads:
    """Sorted candidate prefixes of a group of rows of equal padded width ``W``.

    ``values[j, :counts[j]]`` are the candidates of row ``rows[j]`` in decreasing order (ties in
    increasing class index), padded with zeros; ``classes`` holds their class indices.
    """

    rows: np.ndarray
    values: np.ndarray
    classes: np.ndarray
    counts: np.ndarray


def sorted_heads(X: np.ndarray, t: np.ndarray, buf: np.ndarray | None = None) -> list[SortedHeads]:
    """All classes with ``X[i, c] >= t[i]``, sorted per row, grouped by padded width."""
    r, K = X.shape
    pos, rows, counts = _candidates(X, t, buf)
    if pos.size == 0:
        return []
    cols = pos - rows * K
    raw = X.reshape(-1)[pos]
    # float32 (the pipeline's scores): one int64 key per candidate, (0x7FFFFFFF - bits) << 32 | class,
    # orders by decreasing value and then increasing class (a non-negative float's bits keep its
    # order), so one sort of the keys gives the values and classes in the order of the general path
    # below, ties included, at about a third of its cost; -0.0 (sign bit set) takes the general path
    packed = raw.dtype == np.float32 and K < 2**32 - 1 and not np.signbit(raw).any()
    if packed:
        keys = ((0x7FFFFFFF - raw.view(np.uint32).astype(np.int64)) << 32) | cols
    else:
        vals = raw.astype(np.float64)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    offset = np.arange(pos.size) - start[rows]
    width = np.maximum(8, 1 << np.ceil(np.log2(np.maximum(counts, 1))).astype(np.int64))
    groups = []
    for W in np.unique(width[counts > 0]):
        grows = np.flatnonzero((width == W) & (counts > 0))
        local = np.full(r, -1, dtype=np.int64)
        local[grows] = np.arange(grows.size)
        sel = local[rows] >= 0
        lr, lo = local[rows[sel]], offset[sel]
        if packed:
            S = np.full((grows.size, W), np.iinfo(np.int64).max)  # padding sorts last
            S[lr, lo] = keys[sel]
            S.sort(axis=1)
            pad = np.arange(W) >= counts[grows][:, None]
            Cs = S & 0xFFFFFFFF
            Cs[pad] = 0
            S >>= 32
            np.subtract(0x7FFFFFFF, S, out=S)
            S[pad] = 0
            Vs = S.astype(np.uint32).view(np.float32).astype(np.float64)
            groups.append(SortedHeads(grows, Vs, Cs, counts[grows]))
            continue
        V = np.full((grows.size, W), -np.inf)
        C = np.zeros((grows.size, W), dtype=np.int64)
        V[lr, lo] = vals[sel]
        C[lr, lo] = cols[sel]
        negV = -V  # each row's candidates are in increasing class index
        order = np.argsort(negV, axis=1)  # SIMD quicksort: faster than a stable sort
        Vs = np.take_along_axis(V, order, axis=1)
        Cs = np.take_along_axis(C, order, axis=1)
        # tied probabilities must come in increasing class index: sort the rows where quicksort
        # broke a tie the other way again, stably (cheaper than a lexsort on (class, value))
        tied = np.flatnonzero(((Vs[:, 1:] == Vs[:, :-1]) & (Cs[:, 1:] < Cs[:, :-1])).any(axis=1))
        if tied.size:
            order = np.argsort(negV[tied], axis=1, kind="stable")
            Vs[tied] = np.take_along_axis(V[tied], order, axis=1)
            Cs[tied] = np.take_along_axis(C[tied], order, axis=1)
        Vs[np.isneginf(Vs)] = 0.0
        groups.append(SortedHeads(grows, Vs, Cs, counts[grows]))
    return groups


class Decision(Protocol):
    """Decides the set size of rows from their sorted candidate prefixes.

    Called with a :class:`SortedHeads` group and, for its rows, the threshold ``t`` (every class
    left out has a value ``< t``), the row sums ``total``, and ``K``.  Returns ``(settled, size,
    value)``: which rows are decided, their set sizes (``1..counts``), and a per-row number to
    keep (e.g. the expected utility).  Rows not settled are retried with a lower threshold.
    """

    def __call__(
        self, heads: SortedHeads, t: np.ndarray, total: np.ndarray, K: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


def prefix_search(
    P: np.ndarray,
    decide: Decision,
    first_threshold: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    next_threshold: Callable[[np.ndarray, np.ndarray, int], np.ndarray],
    *,
    name: str = "P",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    n_jobs: int | None = None,
) -> tuple[SetPredictions, np.ndarray]:
    """Run a prefix decision rule over all rows of ``P``.

    Parameters
    ----------
    P : ndarray of shape (n, K)
        Non-negative scores, proportional to class probabilities per row.
    decide : Decision
        The rule that picks each row's prefix length.
    first_threshold : callable ``(X, rowmax, total) -> t``
        Initial per-row threshold for a chunk ``X`` of rows (values ``>= t`` are candidates).
    next_threshold : callable ``(t, rowmax, round) -> t``
        Lower threshold for rows not settled after ``round`` (1-based); must reach 0 eventually.
    chunk_bytes : int
        Rows are processed in chunks of about this many bytes of ``P``.
    n_jobs : int or None
        Threads working on chunks in parallel (``None``/1: one; -1: all cores).

    Returns
    -------
    sets : SetPredictions
        The chosen prefixes, classes in decreasing order.
    value : ndarray of shape (n,)
        The per-row value returned by ``decide`` for the chosen prefix.
    """
    P = as_score_matrix(P, name)
    n, K = P.shape
    rows_per_chunk = max(1, int(chunk_bytes) // max(1, K * P.dtype.itemsize))
    sizes = np.zeros(n, dtype=np.int64)
    value = np.zeros(n, dtype=np.float64)
    local = threading.local()

    def process(row0: int) -> np.ndarray:
        """Settle the rows of one chunk; returns the classes of its sets, concatenated in row order."""
        if getattr(local, "buf", None) is None:
            local.buf = np.empty(min(n, rows_per_chunk) * K, dtype=bool)
        pieces = []
        X = np.ascontiguousarray(P[row0 : row0 + rows_per_chunk])
        rowmax, total = row_stats(X, row0, name)
        t = np.clip(first_threshold(X, rowmax, total), 0, rowmax).astype(X.dtype)
        active = np.arange(X.shape[0])
        Xa = X
        rnd = 0
        while active.size:
            rnd += 1
            unsettled = []
            for heads in sorted_heads(Xa, t, local.buf):
                settled, size, val = decide(heads, t[heads.rows].astype(np.float64), total[active[heads.rows]], K)
                g_rows = row0 + active[heads.rows[settled]]
                sizes[g_rows] = size[settled]
                value[g_rows] = val[settled]
                pieces.append((g_rows, heads.classes[settled]))
                unsettled.append(heads.rows[~settled])
            left = np.concatenate(unsettled) if unsettled else np.empty(0, dtype=np.int64)
            if left.size == 0:
                break
            if np.all(t[left] <= 0):  # pragma: no cover - a decision rule must settle full rows
                raise RuntimeError("prefix decision did not settle rows even with every class")
            new_t = next_threshold(t[left], rowmax[active[left]], rnd)
            active = active[left]
            t = np.clip(new_t, 0, rowmax[active]).astype(X.dtype)
            Xa = X[active]
        # the chunk's sets without the padding, at once: padded to powers of two, the sets of all
        # rows would need up to twice their size (when sets hold thousands of classes, GBs)
        ptr = np.concatenate([[0], np.cumsum(sizes[row0 : row0 + X.shape[0]])])
        out = np.empty(ptr[-1], dtype=np.int64)
        for g_rows, classes in pieces:
            keep = np.arange(classes.shape[1]) < sizes[g_rows][:, None]
            out[(ptr[g_rows - row0][:, None] + np.arange(classes.shape[1]))[keep]] = classes[keep]
        release_rows(P, row0, row0 + rows_per_chunk)  # a mapped matrix: one chunk resident (svbop._blocks)
        return out

    starts = range(0, n, rows_per_chunk)
    workers = _chunk_workers(n_jobs, len(starts))
    if workers == 1:
        results = [process(r0) for r0 in starts]
    else:
        # numpy releases the GIL in the passes over the data, so chunks run in parallel; BLAS
        # (the row sums) is held to one thread per worker so that workers do not oversubscribe
        with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(process, starts))
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    indices = np.empty(indptr[-1], dtype=np.int64)  # pages are committed as written, chunks freed as copied
    for i, row0 in enumerate(starts):
        indices[indptr[row0] : indptr[row0] + results[i].size] = results[i]
        results[i] = None
    return SetPredictions(indices, indptr, K), value


def geometric_widening(factor: float = 1 / 16, rounds: int = 3):
    """``next_threshold`` that divides the threshold by ``1/factor`` and then drops it to 0."""

    def next_threshold(t: np.ndarray, rowmax: np.ndarray, rnd: int) -> np.ndarray:
        if rnd >= rounds:
            return np.zeros_like(t)
        return t * factor

    return next_threshold


def settle_all(size: np.ndarray):
    """Decision output for rules that settle every row at once (no per-row value)."""
    return np.ones(size.size, dtype=bool), size, np.full(size.size, np.nan)
