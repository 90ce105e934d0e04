"""Compiled kernels (numba) of svbop's own search of an NMSLIB HNSW graph, for sparse queries.

NMSLIB builds the graph of :class:`svbop.index.HNSWIndex`; for a dense index (the ``negdotprod``
space) and a *sparse* query ``x`` (tf-idf rows), NMSLIB's query can only take ``x`` dense and
computes every inner product over all ``D + 1`` dimensions, although ``x`` has a few hundred
non-zeros among tens of thousands: ``D`` multiply-adds and ``4 D`` bytes read per visited class.
These kernels walk the same graph with the same search (greedy descent through the upper levels,
then a beam of width ``ef`` on level 0, Malkov and Yashunin 2018, Algorithm 2 and 5) and compute
each visited class's inner product over ``x``'s non-zeros alone: ``nnz(x)`` multiply-adds.

Called by :mod:`svbop.index`, which validates the graph read from NMSLIB's file first (every
neighbour id in range, every count within its level's width, every neighbour on level ``l`` itself
on level ``l`` or above, so that its row of level ``l`` exists; finite vectors); the kernels trust
it and release the GIL (the index runs blocks of rows in threads).  The queries' column indices
are checked against ``D`` at the index's boundary (:func:`svbop._checks.check_sparse_structure`).

Graph layout (``n`` nodes, internal ids ``0..n-1``):

* ``links0`` (n, maxM0) int32 and ``count0`` (n,): node ``i``'s level-0 neighbours are
  ``links0[i, :count0[i]]``;
* ``upper`` (m, maxM) int32, ``upper_count`` (m,), ``upper_ptr`` (n + 1,): node ``i``'s neighbours on
  level ``l >= 1`` are row ``upper_ptr[i] + l - 1`` of ``upper`` (``upper_ptr[i + 1] - upper_ptr[i]``
  is the node's top level);
* ``vectors`` (n, D + 1) float32: NMSLIB's copy of the indexed ``[w_c, b_c - shift]``.

The distance is NMSLIB's: the negative inner product ``-(x . w + w[D])`` (the query is ``[x, 1]``),
accumulated in float64 in the order of ``x``'s non-zeros.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_JIT = {"nogil": True, "cache": True}


@njit(**_JIT)
def _dist(vectors, node, xind, xval, last):
    s = 0.0
    for a in range(xind.shape[0]):
        s += xval[a] * vectors[node, xind[a]]
    return -(s + vectors[node, last])


@njit(**_JIT)
def _heap_push(keys, vals, size, key, val, sign):
    """Push onto a binary heap of ``size`` items: a min-heap of ``sign * key``."""
    i = size
    keys[i], vals[i] = key, val
    while i > 0:
        p = (i - 1) >> 1
        if sign * keys[p] <= sign * keys[i]:
            break
        keys[p], keys[i] = keys[i], keys[p]
        vals[p], vals[i] = vals[i], vals[p]
        i = p
    return size + 1


@njit(**_JIT)
def _heap_pop(keys, vals, size, sign):
    """Remove the top of a heap of ``size`` items (its key and value stay readable at ``size - 1``)."""
    size -= 1
    keys[0], keys[size] = keys[size], keys[0]
    vals[0], vals[size] = vals[size], vals[0]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        best = left
        if left + 1 < size and sign * keys[left + 1] < sign * keys[left]:
            best = left + 1
        if sign * keys[i] <= sign * keys[best]:
            break
        keys[i], keys[best] = keys[best], keys[i]
        vals[i], vals[best] = vals[best], vals[i]
        i = best
    return size


@njit(**_JIT)
def _search_row(links0, count0, upper, upper_count, upper_ptr, vectors, entry, max_level, xind, xval,
                k, ef, visited, stamp, ckeys, cvals, rkeys, rvals, out_ids, out_dist):
    last = vectors.shape[1] - 1
    cur = entry
    cur_d = _dist(vectors, cur, xind, xval, last)
    for level in range(max_level, 0, -1):
        changed = True
        while changed:
            changed = False
            if upper_ptr[cur + 1] - upper_ptr[cur] < level:
                break
            row = upper_ptr[cur] + level - 1
            for e in range(upper_count[row]):
                nb = upper[row, e]
                d = _dist(vectors, nb, xind, xval, last)
                if d < cur_d:
                    cur_d, cur, changed = d, nb, True
    # level 0: candidates in a min-heap, the ef best so far in a max-heap
    visited[cur] = stamp
    nc = _heap_push(ckeys, cvals, 0, cur_d, cur, 1.0)
    nr = _heap_push(rkeys, rvals, 0, cur_d, cur, -1.0)
    while nc > 0:
        c_d, c = ckeys[0], cvals[0]
        if c_d > rkeys[0] and nr >= ef:
            break
        nc = _heap_pop(ckeys, cvals, nc, 1.0)
        for e in range(count0[c]):
            nb = links0[c, e]
            if visited[nb] == stamp:
                continue
            visited[nb] = stamp
            d = _dist(vectors, nb, xind, xval, last)
            if nr < ef or d < rkeys[0]:
                nc = _heap_push(ckeys, cvals, nc, d, nb, 1.0)
                nr = _heap_push(rkeys, rvals, nr, d, nb, -1.0)
                if nr > ef:
                    nr = _heap_pop(rkeys, rvals, nr, -1.0)
    # pop the max-heap: the results come out worst first
    m = nr
    while nr > 0:
        nr = _heap_pop(rkeys, rvals, nr, -1.0)
        if nr < k:
            out_ids[nr] = rvals[nr]
            out_dist[nr] = rkeys[nr]
    return min(m, k)


@njit(**_JIT)
def search_sparse(links0, count0, upper, upper_count, upper_ptr, vectors, entry, max_level,
                  xptr, xind, xval, k, ef, lo, hi, out_ids, out_dist, out_found):
    """The ``k`` nearest nodes (smallest negative inner product) of CSR query rows ``lo..hi-1``.

    ``out_ids[i]`` (``k`` int64) gets internal node ids by increasing distance, ``out_dist[i]`` their
    distances, ``out_found[i]`` how many were found (``< k`` only on a disconnected graph).  Work
    buffers are the call's own, so threads may run disjoint row ranges at once.
    """
    n_nodes = links0.shape[0]
    visited = np.zeros(n_nodes, dtype=np.int32)
    ckeys = np.empty(n_nodes + 1, dtype=np.float64)
    cvals = np.empty(n_nodes + 1, dtype=np.int64)
    cap = ef + links0.shape[1] + 2
    rkeys = np.empty(cap, dtype=np.float64)
    rvals = np.empty(cap, dtype=np.int64)
    for i in range(lo, hi):
        out_found[i] = _search_row(links0, count0, upper, upper_count, upper_ptr, vectors, entry,
                                   max_level, xind[xptr[i]:xptr[i + 1]], xval[xptr[i]:xptr[i + 1]],
                                   k, ef, visited, i - lo + 1, ckeys, cvals, rkeys, rvals,
                                   out_ids[i], out_dist[i])
