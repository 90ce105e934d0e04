"""Compiled kernels (numba) behind :mod:`svbop.trees`: class profiles, column compaction and the
balanced 2-means of the 2-means tree.

At extreme K (10^5-10^6 classes, 10^6-10^7 features) a node of the tree holds a few classes whose
profiles use a few thousand of the feature ids.  Everything here therefore works on a node's rows
with their columns renumbered ``0..u-1`` (:func:`compact_rows`), so that a node costs time and
memory in proportion to its non-zeros, never to the number of features.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_JIT = {"nogil": True, "cache": True}


@njit(**_JIT)
def normalise_rows(indptr, data):
    """Scale every CSR row to unit L2 norm, in place (zero rows stay zero)."""
    for r in range(indptr.size - 1):
        s = 0.0
        for a in range(indptr[r], indptr[r + 1]):
            s += data[a] * data[a]
        if s > 0.0:
            inv = 1.0 / np.sqrt(s)
            for a in range(indptr[r], indptr[r + 1]):
                data[a] *= inv


@njit(**_JIT)
def _number_columns(indptr, indices, rows, pos, n_entries):
    """The features of the CSR rows ``rows`` (``n_entries`` non-zeros in all), sorted; ``pos[j]`` is
    set to feature ``j``'s place among them (``pos`` is -1 elsewhere: reset it with :func:`_forget`)."""
    columns = np.empty(min(n_entries, pos.size), dtype=np.int64)
    u = 0
    for i in range(rows.size):
        r = rows[i]
        for a in range(indptr[r], indptr[r + 1]):
            j = indices[a]
            if pos[j] < 0:
                pos[j] = u
                columns[u] = j
                u += 1
    columns = np.sort(columns[:u])
    for k in range(u):
        pos[columns[k]] = k
    return columns


@njit(**_JIT)
def _forget(pos, columns):
    for k in range(columns.size):
        pos[columns[k]] = -1


@njit(**_JIT)
def compact_rows(indptr, indices, data, rows, pos):
    """The CSR rows ``rows`` with their columns renumbered ``0..u-1`` in increasing feature order.

    ``pos`` is a scratch array of int64 over every feature id, all -1 on entry and on return.
    Returns ``(indptr, local_indices, data, columns)``: ``columns[j]`` is the feature id of local
    column ``j`` (sorted).
    """
    m = rows.size
    out_ptr = np.zeros(m + 1, dtype=np.int64)
    for i in range(m):
        r = rows[i]
        out_ptr[i + 1] = out_ptr[i] + indptr[r + 1] - indptr[r]
    nnz = out_ptr[m]
    out_ind = np.empty(nnz, dtype=np.int32)
    out_val = np.empty(nnz, dtype=data.dtype)
    columns = _number_columns(indptr, indices, rows, pos, nnz)
    for i in range(m):
        r = rows[i]
        o = out_ptr[i]
        for a in range(indptr[r], indptr[r + 1]):
            out_ind[o] = pos[indices[a]]
            out_val[o] = data[a]
            o += 1
    _forget(pos, columns)
    return out_ptr, out_ind, out_val, columns


@njit(**_JIT)
def _similarities(indptr, indices, data, c0, c1, s0, s1):
    for r in range(indptr.size - 1):
        a0 = 0.0
        a1 = 0.0
        for a in range(indptr[r], indptr[r + 1]):
            v = data[a]
            j = indices[a]
            a0 += v * c0[j]
            a1 += v * c1[j]
        s0[r] = a0
        s1[r] = a1


@njit(**_JIT)
def _unit(c):
    s = 0.0
    for j in range(c.size):
        s += c[j] * c[j]
    if s > 0.0:
        inv = 1.0 / np.sqrt(s)
        for j in range(c.size):
            c[j] *= inv


@njit(**_JIT)
def refine_2means(indptr, indices, data, n_cols, first, second, eps, max_iter, left):
    """Balanced spherical 2-means on CSR rows (local columns ``0..n_cols-1``) from the rows
    ``first`` and ``second`` as centroids; writes cluster 0 into ``left`` (``ceil(n / 2)`` rows:
    those of smallest ``sim(row, c1) - sim(row, c0)``, ties in row order) and returns its mean
    similarity.  Stops when the mean similarity gains less than ``eps`` or after ``max_iter``
    iterations (see :func:`svbop.trees.balanced_2means`)."""
    n = indptr.size - 1
    half = (n + 1) // 2
    c0 = np.zeros(n_cols)
    c1 = np.zeros(n_cols)
    for a in range(indptr[first], indptr[first + 1]):
        c0[indices[a]] = data[a]
    for a in range(indptr[second], indptr[second + 1]):
        c1[indices[a]] = data[a]
    s0 = np.empty(n)
    s1 = np.empty(n)
    diff = np.empty(n)
    previous = -np.inf
    score = -np.inf
    for _ in range(max_iter):
        _similarities(indptr, indices, data, c0, c1, s0, s1)
        for r in range(n):
            diff[r] = s1[r] - s0[r]
        order = np.argsort(diff, kind="mergesort")  # stable: ties (empty profiles) keep their order
        for r in range(n):
            left[r] = False
        for k in range(half):
            left[order[k]] = True
        score = 0.0
        for r in range(n):
            score += s0[r] if left[r] else s1[r]
        score /= n
        if score - previous < eps:
            break
        previous = score
        c0[:] = 0.0
        c1[:] = 0.0
        for r in range(n):
            c = c0 if left[r] else c1
            for a in range(indptr[r], indptr[r + 1]):
                c[indices[a]] += data[a]
        _unit(c0)
        _unit(c1)
    return score


@njit(**_JIT)
def copy_segments(chunk, lo, seg_src, seg_len, seg_dst, first, out):
    """Copy the parts of segments ``first, first + 1, ...`` (sorted by ``seg_src``, global offsets)
    that lie in the chunk holding global offsets ``lo .. lo + chunk.size - 1`` to
    ``out[seg_dst + (offset - seg_src)]``; returns the first segment that goes on past the chunk."""
    hi = lo + chunk.size
    s = first
    while s < seg_src.size and seg_src[s] < hi:
        a = max(seg_src[s], lo)
        b = min(seg_src[s] + seg_len[s], hi)
        d = seg_dst[s] + (a - seg_src[s])
        for k in range(a, b):
            out[d] = chunk[k - lo]
            d += 1
        if seg_src[s] + seg_len[s] > hi:
            return s
        s += 1
    return s


@njit(**_JIT)
def fill_problem(indptr, indices, data, rows, pos, bias, x_index, x_value, rowptr):
    """A node's liblinear problem written straight from the CSR rows ``rows`` (sorted indices):
    each row's features with 1-based local ids (the node's features renumbered ``1..u`` in
    increasing feature order), a bias node ``(u + 1, bias)`` (index -1 when ``bias < 0``) and the
    terminator -1, into ``x_index``/``x_value`` (the fields of liblinear's ``feature_node`` array,
    ``sum(row lengths) + 2 * rows.size`` long); ``rowptr[i]`` is where row ``i`` starts.

    ``pos`` is a scratch array of int64 over every feature id, all -1 on entry and on return.
    Returns the node's features (sorted): local id ``j + 1`` is feature ``columns[j]``.
    """
    m = rows.size
    n_entries = 0
    for i in range(m):
        n_entries += indptr[rows[i] + 1] - indptr[rows[i]]
    columns = _number_columns(indptr, indices, rows, pos, n_entries)
    u = columns.size
    bias_index = u + 1 if bias >= 0 else -1
    o = 0
    for i in range(m):
        r = rows[i]
        rowptr[i] = o
        for a in range(indptr[r], indptr[r + 1]):
            x_index[o] = pos[indices[a]] + 1
            x_value[o] = data[a]
            o += 1
        x_index[o] = bias_index
        x_value[o] = bias
        x_index[o + 1] = -1
        x_value[o + 1] = 0.0
        o += 2
    rowptr[m] = o
    _forget(pos, columns)
    return columns


@njit(**_JIT)
def leaf_ranges(child_ptr, children, root, n_classes):
    """Depth-first order of the leaves: ``leaf_pos[c]`` (class ``c``'s place in it) and, for every
    node, the range ``first[v] .. last[v] - 1`` of the places of the leaves below it."""
    n = child_ptr.size - 1
    leaf_pos = np.full(n_classes, -1, dtype=np.int64)
    first = np.zeros(n, dtype=np.int64)
    last = np.zeros(n, dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    done = np.zeros(n, dtype=np.bool_)
    top = 0
    stack[0] = root
    at = 0
    while top >= 0:
        v = stack[top]
        if not done[v]:
            done[v] = True
            first[v] = at
            if v < n_classes:
                leaf_pos[v] = at
                at += 1
                last[v] = at
                top -= 1
            else:
                for k in range(child_ptr[v + 1] - 1, child_ptr[v] - 1, -1):
                    top += 1
                    stack[top] = children[k]
        else:
            last[v] = at
            top -= 1
    return leaf_pos, first, last


@njit(**_JIT)
def class_sums(indptr, indices, data, order, start, n_features):
    """The sum of every class's rows (CSR, float64, sorted indices): class ``c``'s rows are
    ``order[start[c]:start[c + 1]]`` (increasing), summed in that order as scipy's ``Y @ X`` sums them."""
    K = start.size - 1
    acc = np.zeros(n_features)
    pos = np.full(n_features, -1, dtype=np.int64)
    out_ptr = np.zeros(K + 1, dtype=np.int64)
    # first pass: the number of distinct features of each class
    for c in range(K):
        u = 0
        for k in range(start[c], start[c + 1]):
            r = order[k]
            for a in range(indptr[r], indptr[r + 1]):
                j = indices[a]
                if pos[j] != c:
                    pos[j] = c
                    u += 1
        out_ptr[c + 1] = out_ptr[c] + u
    pos[:] = -1
    out_ind = np.empty(out_ptr[K], dtype=np.int32)
    out_val = np.empty(out_ptr[K])
    for c in range(K):
        o = out_ptr[c]
        for k in range(start[c], start[c + 1]):
            r = order[k]
            for a in range(indptr[r], indptr[r + 1]):
                j = indices[a]
                if pos[j] != c:
                    pos[j] = c
                    out_ind[o] = j
                    o += 1
                acc[j] += np.float64(data[a])
        lo = out_ptr[c]
        out_ind[lo:o] = np.sort(out_ind[lo:o])
        for t in range(lo, o):
            out_val[t] = acc[out_ind[t]]
            acc[out_ind[t]] = 0.0
    return out_ptr, out_ind, out_val
