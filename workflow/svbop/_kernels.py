"""Compiled kernels (numba) behind SVBOP-Full from a model, SVBOP-HSG and SVBOP-HF.

Everything here works on plain arrays (CSR parts, padded matrices) and is called by
:mod:`svbop.full`, :mod:`svbop.hsg` and :mod:`svbop.hf`, which validate their inputs first.  The
kernels release the GIL (``nogil``) so that callers run chunks of rows in Python threads.

Arithmetic order
    A score ``w . x + b`` is always summed as scipy's sparse product sums it: the products
    ``x_j w_j`` in increasing feature order ``j``, then ``+ b``.  So scores computed here equal
    ``X @ W.T + b`` (sparse ``X``, sorted indices) bit for bit, and a set found by a search equals
    the set :func:`svbop.predict_sets` finds on the exhaustively computed probabilities, ties
    included.

Algorithm 1 (the paper's SVBOP loop) appears in each search in the same form as in
:mod:`svbop.search`: class ``n`` (1-based) with probability ``p`` is accepted when
``g(n) * mass_n >= (1 - rho) * max_{j <= n} g(j) * mass_j``; a set of equal or nearly equal
expected utility replaces the best one (ties go to the larger set).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._threads import _n_workers

_JIT = {"nogil": True, "cache": True}


# --- scores ------------------------------------------------------------------------------------


@njit(**_JIT)
def _score_row(row, a0, a1, xind, xval, wt_ptr, wt_ind, wt_val, b):
    """``row = x W^T + b`` for the CSR entries ``a0:a1`` of one row, ``W^T`` in CSR form."""
    for c in range(b.size):
        row[c] = 0.0
    for a in range(a0, a1):
        v = xval[a]
        j = xind[a]
        for e in range(wt_ptr[j], wt_ptr[j + 1]):
            row[wt_ind[e]] += v * wt_val[e]
    for c in range(b.size):
        row[c] += b[c]


@njit(**_JIT)
def score_rows(xptr, xind, xval, wt_ptr, wt_ind, wt_val, b, out):
    """Dense scores ``X W^T + b`` for CSR ``X`` and ``W^T`` in CSR form (one row per feature)."""
    for i in range(xptr.size - 1):
        _score_row(out[i], xptr[i], xptr[i + 1], xind, xval, wt_ptr, wt_ind, wt_val, b)


@njit(**_JIT)
def gather_scores_dense(W, b, ids, xptr, xind, xval, out):
    """``out[i, q] = W[ids[i, q]] . x_i + b`` for dense weights; ids ``< 0`` give ``-inf``."""
    for i in range(ids.shape[0]):
        for q in range(ids.shape[1]):
            c = ids[i, q]
            if c < 0:
                out[i, q] = -np.inf
                continue
            s = 0.0
            for a in range(xptr[i], xptr[i + 1]):
                s += xval[a] * W[c, xind[a]]
            out[i, q] = s + b[c]


# --- SVBOP-Full on one row of scores -------------------------------------------------------------


@njit(**_JIT)
def _full_row(s, g, rho, f, rounds, idx, neg, out_row, want_total):
    """Algorithm 1 on the softmax of the score row ``s`` without exponentiating every class.

    Candidates are the classes with ``exp(s_c - max s) >= t`` (``t = f`` first, then ``t / 16``
    ... and finally 0); Theorem 2's stop decides the row once a class fails, or once even a
    class of probability ``t`` could not be accepted.  Returns (set size, utility in units of
    the largest class, sum of ``exp(s - max)`` if ``want_total`` else 1).
    """
    K = s.size
    m = s[0]
    for c in range(1, K):
        if s[c] > m:
            m = s[c]
    t = f
    rnd = 0
    size = 0
    chosen_u = 0.0
    while True:
        thr = m + np.log(t) - 1e-12 if t > 0 else -np.inf
        cnt = 0
        for c in range(K):
            if s[c] >= thr:
                idx[cnt] = c
                cnt += 1
        for q in range(cnt):
            neg[q] = -np.exp(s[idx[q]] - m)
        order = np.argsort(neg[:cnt], kind="mergesort")  # stable: ties in increasing class id
        mass = 0.0
        best = -np.inf
        size = 0
        failed = False
        for q in range(cnt):
            mass += -neg[order[q]]
            U = g[q] * mass
            if U >= (1.0 - rho) * best:
                size = q + 1
                chosen_u = U
                if U > best:
                    best = U
            else:
                failed = True
                break
        settled = failed or cnt >= K
        if not settled:
            settled = g[cnt] * (mass + t) < (1.0 - rho) * best
        if settled:
            for q in range(min(size, out_row.size)):
                out_row[q] = idx[order[q]]
            break
        rnd += 1
        t = 0.0 if rnd >= rounds else t / 16.0
    total = 1.0
    if want_total:
        total = 0.0
        for c in range(K):
            total += np.exp(s[c] - m)
    return size, chosen_u, total


@njit(**_JIT)
def full_dense(S, g, rho, f, rounds, out_cls, out_size, out_val, want_total):
    """SVBOP-Full on every row of a dense score matrix (early-stop utilities)."""
    K = S.shape[1]
    idx = np.empty(K, dtype=np.int64)
    neg = np.empty(K)
    for i in range(S.shape[0]):
        size, u, total = _full_row(S[i], g, rho, f, rounds, idx, neg, out_cls[i], want_total)
        out_size[i] = size
        out_val[i] = u / total


@njit(**_JIT)
def full_sparse(xptr, xind, xval, wt_ptr, wt_ind, wt_val, b, g, rho, f, rounds, out_cls, out_size, out_val,
                want_total):
    """Scores of one row at a time (as :func:`score_rows`), then SVBOP-Full on it: no score matrix."""
    K = b.size
    s = np.empty(K)
    idx = np.empty(K, dtype=np.int64)
    neg = np.empty(K)
    for i in range(xptr.size - 1):
        _score_row(s, xptr[i], xptr[i + 1], xind, xval, wt_ptr, wt_ind, wt_val, b)
        size, u, total = _full_row(s, g, rho, f, rounds, idx, neg, out_cls[i], want_total)
        out_size[i] = size
        out_val[i] = u / total


# --- SVBOP-Full as the paper runs it (Algorithms 1-3, napkinXC's cost model) --------------------


@njit(**_JIT)
def _naive_row(s, g, rho, early, p, out_row):
    """The paper's SVBOP-Full on one row of scores: the softmax over all ``K`` classes, a full sort
    (stable: ties in increasing class id), then Algorithm 1 on the sorted list.

    Returns (set size, expected utility of the set).
    """
    K = s.size
    m = s[0]
    for c in range(1, K):
        if s[c] > m:
            m = s[c]
    z = 0.0
    for c in range(K):
        p[c] = np.exp(s[c] - m)
        z += p[c]
    for c in range(K):
        p[c] = -(p[c] / z)  # negated: argsort then gives decreasing probability
    order = np.argsort(p, kind="mergesort")
    mass = 0.0
    best = -np.inf
    size = 0
    chosen_u = 0.0
    for q in range(K):
        mass -= p[order[q]]
        U = g[q] * mass
        if U >= (1.0 - rho) * best:
            size = q + 1
            chosen_u = U
            if U > best:
                best = U
        elif early:
            break
    for q in range(min(size, out_row.size)):
        out_row[q] = order[q]
    return size, chosen_u


@njit(**_JIT)
def full_naive_dense(W, b, xptr, xind, xval, g, rho, early, out_cls, out_size, out_val):
    """The paper's SVBOP-Full on CSR rows with dense weights: each class scored in turn
    (``w_c . x + b_c``, products in increasing feature order), then :func:`_naive_row`."""
    K = b.size
    s = np.empty(K)
    p = np.empty(K)
    for i in range(xptr.size - 1):
        for c in range(K):
            t = 0.0
            for a in range(xptr[i], xptr[i + 1]):
                t += xval[a] * W[c, xind[a]]
            s[c] = t + b[c]
        size, u = _naive_row(s, g, rho, early, p, out_cls[i])
        out_size[i] = size
        out_val[i] = u


@njit(**_JIT)
def full_naive_sparse(w_ptr, w_ind, w_val, b, n_features, xptr, xind, xval, g, rho, early, out_cls, out_size,
                      out_val):
    """The paper's SVBOP-Full on CSR rows with CSR weights: each class scored in turn against a
    dense copy of the row (as ``_hsg_kernels`` does for a few classes), then :func:`_naive_row`."""
    K = b.size
    s = np.empty(K)
    p = np.empty(K)
    buf = np.zeros(n_features)
    for i in range(xptr.size - 1):
        for a in range(xptr[i], xptr[i + 1]):
            buf[xind[a]] = xval[a]
        for c in range(K):
            t = 0.0
            for e in range(w_ptr[c], w_ptr[c + 1]):
                x = buf[w_ind[e]]
                if x != 0.0:
                    t += x * w_val[e]
            s[c] = t + b[c]
        for a in range(xptr[i], xptr[i + 1]):
            buf[xind[a]] = 0.0
        size, u = _naive_row(s, g, rho, early, p, out_cls[i])
        out_size[i] = size
        out_val[i] = u


# --- Algorithm 1 continued over appended classes (SVBOP-HSG) -------------------------------------


@njit(**_JIT)
def continue_stream(vals, counts, rows, g, rho, early, mass, best, n_seen, size, chosen_u, done):
    """Feed each row's next ``counts[r]`` values (already in stream order) to Algorithm 1.

    ``rows[r]`` is the global row of line ``r`` of ``vals``; the state arrays (indexed by global
    row) carry Algorithm 1 across rounds.  A row is ``done`` when a class fails (early-stop
    utilities) or when it has seen all ``K`` classes.
    """
    K = g.size
    for r in range(rows.size):
        i = rows[r]
        for q in range(counts[r]):
            p = vals[r, q]
            n = n_seen[i]
            mass[i] += p
            U = g[n] * mass[i]
            n_seen[i] = n + 1
            if U >= (1.0 - rho) * best[i]:
                size[i] = n + 1
                chosen_u[i] = U
                if U > best[i]:
                    best[i] = U
            elif early:
                done[i] = True
                break
        if n_seen[i] >= K:
            done[i] = True


# --- SVBOP-HF: best-first search over a probabilistic tree --------------------------------------


@njit(**_JIT)
def _before(k1, s1, k2, s2):
    """Heap order: larger log-probability first; on ties internal nodes (-1), then lower class id."""
    return k1 > k2 or (k1 == k2 and s1 < s2)


@njit(**_JIT)
def _push(qkey, qsec, qnode, n, key, sec, node):
    j = n
    while j > 0:
        parent = (j - 1) >> 1
        if _before(key, sec, qkey[parent], qsec[parent]):
            qkey[j] = qkey[parent]
            qsec[j] = qsec[parent]
            qnode[j] = qnode[parent]
            j = parent
        else:
            break
    qkey[j] = key
    qsec[j] = sec
    qnode[j] = node
    return n + 1


@njit(**_JIT)
def _pop(qkey, qsec, qnode, n):
    """Remove the top of the heap (returned by the caller beforehand); returns the new size."""
    n -= 1
    key = qkey[n]
    sec = qsec[n]
    node = qnode[n]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and _before(qkey[c + 1], qsec[c + 1], qkey[c], qsec[c]):
            c += 1
        if _before(qkey[c], qsec[c], key, sec):
            qkey[j] = qkey[c]
            qsec[j] = qsec[c]
            qnode[j] = qnode[c]
            j = c
        else:
            break
    if n > 0:
        qkey[j] = key
        qsec[j] = sec
        qnode[j] = node
    return n


#: How a node keeps its weighted children's weights (``TreeSearchLayout.nmode``): sparse entries
#: (feature, child, weight) sorted by feature, a dense block of the children's weights on each of its
#: features, or a block over every feature id.
NODE_SPARSE, NODE_DENSE, NODE_DIRECT = 0, 1, 2


@njit(**_JIT)
def count_node_weights(parents, child_ptr, children, w_indptr, w_indices, stamp, out_nnz, out_nfeat):
    """For every internal node ``v`` in ``parents``: its children's weights (``out_nnz[v]``) and the
    distinct features they use (``out_nfeat[v]``); ``stamp`` (one entry per feature id, -1) marks the
    features seen at the current node, so no sort is needed."""
    for v in parents:
        nnz = 0
        nfeat = 0
        for c in range(child_ptr[v], child_ptr[v + 1]):
            child = children[c]
            for e in range(w_indptr[child], w_indptr[child + 1]):
                j = w_indices[e]
                if stamp[j] != v:
                    stamp[j] = v
                    nfeat += 1
            nnz += w_indptr[child + 1] - w_indptr[child]
        out_nnz[v] = nnz
        out_nfeat[v] = nfeat


@njit(**_JIT)
def fill_node_weights(parents, child_ptr, children, weighted_index, n_weighted, w_indptr, w_indices, w_data, nmode,
                      eptr, sfeat, schild, sval, dfeat, dptr, dval, vptr, vval):
    """Write every node's weights in its layout (:class:`svbop.hf.TreeSearchLayout`), one node at a
    time: its entries are sorted by (feature, weighted child) in a buffer the size of that node's
    weights only, so the build needs no array of all the model's weights besides the layout's."""
    for v in parents:
        na = n_weighted[v]
        if na == 0:
            continue
        nnz = 0
        for c in range(child_ptr[v], child_ptr[v + 1]):
            child = children[c]
            nnz += w_indptr[child + 1] - w_indptr[child]
        if nnz == 0:
            continue
        key = np.empty(nnz, dtype=np.int64)
        val = np.empty(nnz)
        k = 0
        for c in range(child_ptr[v], child_ptr[v + 1]):
            child = children[c]
            a = weighted_index[child]
            for e in range(w_indptr[child], w_indptr[child + 1]):
                key[k] = np.int64(w_indices[e]) * na + a
                val[k] = w_data[e]
                k += 1
        mode = nmode[v]
        if mode == NODE_DIRECT:
            for k in range(nnz):
                vval[vptr[v] + key[k]] = val[k]
            continue
        order = np.argsort(key)  # keys are unique: (feature, child) pairs
        if mode == NODE_SPARSE:
            e0 = eptr[v]
            for k in range(nnz):
                o = order[k]
                sfeat[e0 + k] = key[o] // na
                schild[e0 + k] = key[o] % na
                sval[e0 + k] = val[o]
        else:
            e = eptr[v] - 1
            last = -1
            base = dptr[v] - eptr[v] * na  # dval of group e, child a: base + e * na + a
            for k in range(nnz):
                o = order[k]
                j = key[o] // na
                if j != last:
                    e += 1
                    dfeat[e] = j
                    last = j
                dval[base + e * na + key[o] % na] = val[o]


_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@njit(**_JIT)
def _popcount(x):
    """Set bits of the uint64 ``x`` (SWAR)."""
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return np.int64((x * _H01) >> np.uint64(56))


@njit(**_JIT)
def fill_rank_directories(nodes, rptr, eptr, nmode, sfeat, dfeat, words, rbits, rrank):
    """For every node in ``nodes``: a bit per feature id it uses (``rbits[rptr[v]:rptr[v] + words]``) and,
    per 64-bit word, the number of its features in the words before (``rrank``): feature ``j``'s position
    among the node's features is ``rrank[w] + popcount(rbits[w] & (bit(j) - 1))``, ``w = j >> 6``."""
    for v in nodes:
        r = rptr[v]
        feat = dfeat if nmode[v] == NODE_DENSE else sfeat
        for e in range(eptr[v, 0], eptr[v, 1]):
            j = np.int64(feat[e])
            rbits[r + (j >> 6)] |= np.uint64(1) << np.uint64(j & 63)
        total = 0
        for w in range(words):
            rrank[r + w] = total
            total += _popcount(rbits[r + w])


@njit(**_JIT)
def _lower_bound(feat, lo, hi, j):
    """The first position in ``feat[lo:hi]`` (sorted) whose value is ``>= j`` (``hi`` if none)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if feat[mid] < j:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(**_JIT)
def _children_scores(node, xind, xval, a0, a1, xbuf, xfilled, nmode, eptr, sfeat, schild, sval, dfeat, dptr, dval,
                     vptr, vval, rptr, rbits, rrank, scan_max, sbuf, na):
    """Scores ``w . x`` (no intercept) of ``node``'s ``na`` weighted children into ``sbuf[:na]``,
    products in increasing feature order.

    A node kept over every feature id (``NODE_DIRECT``) reads one row of its block per feature of
    ``x``.  Otherwise its features are sorted (``sfeat`` per weight for a sparse node, ``dfeat`` per
    feature for a dense block): a node with at most ``scan_max`` times the row's non-zeros reads its
    features from the dense copy ``xbuf`` of the row (cost: its features); a node with more finds each
    of the row's features by binary search, from where the previous one was found (the row's features
    are sorted too).  A node with a rank directory (``rptr[node] >= 0``: a dense block, or sparse entries
    with one entry a feature) finds each of the row's features by one bit test and a popcount instead.
    Dense blocks hold zeros where a child has no weight (``s + v * 0.0 = s``, so the sums are the same).
    """
    for q in range(na):
        sbuf[q] = 0.0
    mode = nmode[node]
    if mode == NODE_DIRECT:  # a block over every feature id: no lookup, one read per feature of x
        d = vptr[node]
        if na == 1:
            s = 0.0
            for a in range(a0, a1):
                s += xval[a] * vval[d + xind[a]]
            sbuf[0] = s
            return
        a = a0
        while a + 4 <= a1:  # four features at a time, each child's sum still in feature order
            v0, v1, v2, v3 = xval[a], xval[a + 1], xval[a + 2], xval[a + 3]
            b0, b1, b2, b3 = d + xind[a] * na, d + xind[a + 1] * na, d + xind[a + 2] * na, d + xind[a + 3] * na
            for q in range(na):
                sbuf[q] = (((sbuf[q] + v0 * vval[b0 + q]) + v1 * vval[b1 + q]) + v2 * vval[b2 + q]) + v3 * vval[b3 + q]
            a += 4
        for a in range(a, a1):
            v = xval[a]
            base = d + xind[a] * na
            for q in range(na):
                sbuf[q] += v * vval[base + q]
        return
    e0 = eptr[node, 0]
    e1 = eptr[node, 1]
    r = rptr[node]
    if r >= 0:  # rank directory: a bit test and a popcount per feature of x
        if mode == NODE_DENSE:
            base = dptr[node]
            for a in range(a0, a1):
                j = xind[a]
                word = rbits[r + (j >> 6)]
                bit = np.uint64(1) << np.uint64(j & 63)
                if word & bit:
                    b = base + (rrank[r + (j >> 6)] + _popcount(word & (bit - np.uint64(1)))) * na
                    v = xval[a]
                    for q in range(na):
                        sbuf[q] += v * dval[b + q]
            return
        for a in range(a0, a1):
            j = xind[a]
            word = rbits[r + (j >> 6)]
            bit = np.uint64(1) << np.uint64(j & 63)
            if word & bit:
                e = e0 + rrank[r + (j >> 6)] + _popcount(word & (bit - np.uint64(1)))
                sbuf[schild[e]] += xval[a] * sval[e]
        return
    scan = e1 - e0 <= scan_max * (a1 - a0)
    if scan and xfilled[0] == 0:  # the row's dense copy, made on first use
        for a in range(a0, a1):
            xbuf[xind[a]] = xval[a]
        xfilled[0] = 1
    if mode == NODE_DENSE:
        base = dptr[node] - e0 * na
        if scan:
            for e in range(e0, e1):
                v = xbuf[dfeat[e]]
                if v != 0.0:
                    b = base + e * na
                    for q in range(na):
                        sbuf[q] += v * dval[b + q]
            return
        lo = e0
        for a in range(a0, a1):
            j = xind[a]
            lo = _lower_bound(dfeat, lo, e1, j)
            if lo == e1:
                break
            if dfeat[lo] == j:
                v = xval[a]
                b = base + lo * na
                for q in range(na):
                    sbuf[q] += v * dval[b + q]
        return
    if scan:
        for e in range(e0, e1):
            v = xbuf[sfeat[e]]
            if v != 0.0:
                sbuf[schild[e]] += v * sval[e]
        return
    lo = e0
    for a in range(a0, a1):
        j = xind[a]
        lo = _lower_bound(sfeat, lo, e1, j)
        v = xval[a]
        while lo < e1 and sfeat[lo] == j:
            sbuf[schild[lo]] += v * sval[lo]
            lo += 1
        if lo == e1:
            break


@njit(**_JIT)
def _search_buffers(child_ptr, n_features):
    """A tree search's scratch: children's scores (two buffers as wide as the widest node), the row's dense
    copy (filled on first use, ``xfilled[0]``) and its flag."""
    max_children = 1
    for v in range(child_ptr.size - 1):
        if child_ptr[v + 1] - child_ptr[v] > max_children:
            max_children = child_ptr[v + 1] - child_ptr[v]
    return np.empty(max_children), np.empty(max_children), np.zeros(n_features), np.zeros(1, dtype=np.int64)


@njit(**_JIT)
def _clear_row(xbuf, xfilled, xind, a0, a1):
    """Zero the row's dense copy where the row wrote it (if it was made), for the next row."""
    if xfilled[0]:
        for a in range(a0, a1):
            xbuf[xind[a]] = 0.0
        xfilled[0] = 0


@njit(**_JIT)
def _child_softmax(node, xind, xval, a0, a1, xbuf, xfilled, child_ptr, children, aptr, active, nmode, eptr, sfeat,
                   schild, sval, dfeat, dptr, dval, vptr, vval, rptr, rbits, rrank, scan_max, bias, sbuf, abuf):
    """The scores ``s_q = w . x + b`` of ``node``'s children in ``sbuf[q]``, their largest ``m`` and
    ``lz = log sum_q exp(s_q - m)``: ``(nc, m, lz)``.  A child's log-probability is then
    ``((s_q - m) - lz) + log P(node | x)`` (a softmax over the children).  :func:`hf_enumerate` and
    :func:`hf_path_log_proba` expand a node with it; :func:`hf_search` does the same operations in the
    same order written out in its loop (calling this from SVBOP-HF's search, or its buffer helpers, made it
    5-10 % slower: 0.103-0.110 against 0.093-0.102 ms a row, K = 10^5, interleaved runs), so a class's
    value is the same whichever search finds it."""
    c0 = child_ptr[node]
    nc = child_ptr[node + 1] - c0
    na = aptr[node + 1] - aptr[node]
    _children_scores(node, xind, xval, a0, a1, xbuf, xfilled, nmode, eptr, sfeat, schild, sval, dfeat, dptr, dval,
                     vptr, vval, rptr, rbits, rrank, scan_max, abuf, na)
    for q in range(nc):
        sbuf[q] = 0.0  # a child without weights scores 0 + b
    for q in range(na):
        sbuf[active[aptr[node] + q]] = abuf[q]
    m = -np.inf
    for q in range(nc):
        sbuf[q] += bias[children[c0 + q]]
        if sbuf[q] > m:
            m = sbuf[q]
    z = 0.0
    for q in range(nc):
        z += np.exp(sbuf[q] - m)
    return nc, m, np.log(z)


@njit(**_JIT)
def hf_search(rows, xptr, xind, xval, n_features, child_ptr, children, aptr, active, nmode, eptr, sfeat, schild, sval,
              dfeat, dptr, dval, vptr, vval, rptr, rbits, rrank, scan_max, bias, n_classes, root, g, g_suffix, early, rho, total, out_cls,
              out_size, out_val, out_visits, out_pulled):
    """SVBOP-HF (Algorithms 1, 6 and 7) for the CSR rows ``rows``; results at the same positions.

    A priority queue holds nodes keyed by ``log P(v | x)``; a popped leaf is the next class of
    Algorithm 1, a popped internal node pushes its children with ``log P(v|x) + log P(child|v,x)``
    (a softmax over the children's scores).  ``out_cls[r]`` receives the first
    ``min(size, out_cls.shape[1])`` classes of the set; callers rerun rows whose set is longer.
    ``total`` bounds the leaves' total mass (1 up to rounding) for the stop of non-(1/x)-convex
    utilities.  With a (1/x)-convex utility a row also stops before expanding a node of
    probability ``p`` when even a class of probability ``p`` would fail Algorithm 1's test: every
    class left has at most ``p`` (the queue's top), the test is monotone in it, and Theorem 2's stop
    would end the row at that class anyway, so the set is the same and the nodes that only lead
    to the failing class are never scored.
    """
    n_nodes = child_ptr.size - 1
    K = n_classes
    qkey = np.empty(n_nodes)
    qsec = np.empty(n_nodes, dtype=np.int64)
    qnode = np.empty(n_nodes, dtype=np.int64)
    delivered = np.empty(K, dtype=np.int64)
    max_children = 1
    for v in range(n_nodes):
        if child_ptr[v + 1] - child_ptr[v] > max_children:
            max_children = child_ptr[v + 1] - child_ptr[v]
    sbuf = np.empty(max_children)
    abuf = np.empty(max_children)
    xbuf = np.zeros(n_features)
    xfilled = np.zeros(1, dtype=np.int64)
    cap = out_cls.shape[1]
    for r in range(rows.size):
        i = rows[r]
        a0 = xptr[i]
        a1 = xptr[i + 1]
        hn = _push(qkey, qsec, qnode, 0, 0.0, -1, root)
        n = 0
        mass = 0.0
        best = -np.inf
        size = 0
        chosen_u = 0.0
        visits = 0
        while hn > 0:
            key = qkey[0]
            node = qnode[0]
            hn = _pop(qkey, qsec, qnode, hn)
            if node < K:  # a leaf: the next class of Algorithm 1
                delivered[n] = node
                mass += np.exp(key)
                U = g[n] * mass
                n += 1
                if U >= (1.0 - rho) * best:
                    size = n
                    chosen_u = U
                    if U > best:
                        best = U
                elif early:
                    break
                if n >= K:
                    break
                if not early and g_suffix[n] * total < (1.0 - rho) * best:
                    break
                continue
            if early and n > 0 and g[n] * (mass + np.exp(key)) < (1.0 - rho) * best:
                break  # every class left has P <= exp(key): the next one would fail the test above
            visits += 1
            c0 = child_ptr[node]
            nc = child_ptr[node + 1] - c0
            na = aptr[node + 1] - aptr[node]
            _children_scores(node, xind, xval, a0, a1, xbuf, xfilled, nmode, eptr, sfeat, schild, sval, dfeat, dptr, dval,
                             vptr, vval, rptr, rbits, rrank, scan_max, abuf, na)
            for q in range(nc):
                sbuf[q] = 0.0  # a child without weights scores 0 + b
            for q in range(na):
                sbuf[active[aptr[node] + q]] = abuf[q]
            m = -np.inf
            for q in range(nc):
                sbuf[q] += bias[children[c0 + q]]
                if sbuf[q] > m:
                    m = sbuf[q]
            z = 0.0
            for q in range(nc):
                z += np.exp(sbuf[q] - m)
            lz = np.log(z)
            for q in range(nc):
                child = children[c0 + q]
                hn = _push(qkey, qsec, qnode, hn, ((sbuf[q] - m) - lz) + key, child if child < K else -1, child)
        if xfilled[0]:
            for a in range(a0, a1):
                xbuf[xind[a]] = 0.0
            xfilled[0] = 0
        for q in range(min(size, cap)):
            out_cls[r, q] = delivered[q]
        out_size[r] = size
        out_val[r] = chosen_u  # the tree's probabilities sum to 1
        out_visits[r] = visits
        out_pulled[r] = n


# --- set containers ------------------------------------------------------------------------------


@njit(**_JIT)
def hf_enumerate(rows, xptr, xind, xval, n_features, child_ptr, children, aptr, active, nmode, eptr, sfeat, schild,
                 sval, dfeat, dptr, dval, vptr, vval, rptr, rbits, rrank, scan_max, bias, n_classes, root, p_min,
                 p_below_top, mass_max, rank_max, target, min_n, give_up_rank, out_cls, out_logp,
                 out_n, out_mass, out_target):
    """The leaves of a probabilistic tree in decreasing probability, for the CSR rows ``rows``, until
    every class left is known to be outside a conformal set (the same best-first search as
    :func:`hf_search`, Algorithm 1 left out).

    Row ``r`` stops before the next leaf once at least ``min_n`` leaves are out and

    * the queue's top (a bound on every class left) has probability below ``p_min[r]``, or below the
      first leaf's probability minus ``p_below_top[r]``;
    * the leaves out so far hold more than ``mass_max[r]``;
    * ``rank_max[r]`` leaves are out;
    * ``target[r]`` (a class id, ``-1``: none) is out.

    A row whose target is not out gives up once ``give_up_rank`` leaves are out (its ``out_target[r, 0]``
    stays 0).

    ``out_cls[r, :cap]``/``out_logp[r, :cap]`` receive the first leaves and their log-probabilities,
    ``out_n[r]`` how many came out (callers rerun rows with more than ``cap``), ``out_mass[r]`` their
    summed probability.  ``out_target[r]``: the target's rank (1-based), its log-probability and the
    mass of the leaves out up to it, itself included (summed in the order they came out).  Leaves come
    out as :func:`hf_search` delivers them: exactly decreasing log-probability, ties by class id.
    """
    n_nodes = child_ptr.size - 1
    K = n_classes
    qkey = np.empty(n_nodes)
    qsec = np.empty(n_nodes, dtype=np.int64)
    qnode = np.empty(n_nodes, dtype=np.int64)
    sbuf, abuf, xbuf, xfilled = _search_buffers(child_ptr, n_features)
    cap = out_cls.shape[1]
    for r in range(rows.size):
        i = rows[r]
        a0 = xptr[i]
        a1 = xptr[i + 1]
        hn = _push(qkey, qsec, qnode, 0, 0.0, -1, root)
        n = 0
        mass = 0.0
        top = 0.0
        found = target[r] < 0
        lo_p = p_min[r]
        while hn > 0:
            key = qkey[0]
            node = qnode[0]
            if n >= min_n and found:
                if n >= rank_max[r] or mass > mass_max[r] or np.exp(key) < lo_p:
                    break
            elif not found and n >= give_up_rank:
                break  # the target is further down than the caller needs (its score is past a bound)
            hn = _pop(qkey, qsec, qnode, hn)
            if node < K:
                p = np.exp(key)
                if n < cap:
                    out_cls[r, n] = node
                    out_logp[r, n] = key
                if n == 0:
                    top = p
                    if top - p_below_top[r] > lo_p:
                        lo_p = top - p_below_top[r]
                n += 1
                mass += p
                if node == target[r]:
                    found = True
                    out_target[r, 0] = n
                    out_target[r, 1] = key
                    out_target[r, 2] = mass
                if n >= K:
                    break
                continue
            c0 = child_ptr[node]
            nc, m, lz = _child_softmax(node, xind, xval, a0, a1, xbuf, xfilled, child_ptr, children, aptr, active, nmode,
                                       eptr, sfeat, schild, sval, dfeat, dptr, dval, vptr, vval, rptr, rbits, rrank,
                                       scan_max, bias, sbuf, abuf)
            for q in range(nc):
                child = children[c0 + q]
                hn = _push(qkey, qsec, qnode, hn, ((sbuf[q] - m) - lz) + key, child if child < K else -1, child)
        _clear_row(xbuf, xfilled, xind, a0, a1)
        out_n[r] = n
        out_mass[r] = mass


@njit(**_JIT)
def hf_path_log_proba(rows, xptr, xind, xval, n_features, child_ptr, children, aptr, active, nmode, eptr, sfeat,
                      schild, sval, dfeat, dptr, dval, vptr, vval, rptr, rbits, rrank, scan_max, bias, parent, position,
                      root, labels, out):
    """``out[r] = log P(labels[r] | x)`` for the CSR rows ``rows``: the product along the label's path only
    (its ancestors' children scored), with the arithmetic of :func:`hf_enumerate` (a child's key is
    ``((s - m) - log z) + key``, root to leaf), so the value equals the one a search delivers for that leaf."""
    n_nodes = child_ptr.size - 1
    sbuf, abuf, xbuf, xfilled = _search_buffers(child_ptr, n_features)
    path = np.empty(n_nodes, dtype=np.int64)
    for r in range(rows.size):
        i = rows[r]
        a0 = xptr[i]
        a1 = xptr[i + 1]
        d = 0
        v = labels[r]
        while v != root:
            path[d] = v
            d += 1
            v = parent[v]
        key = 0.0
        node = root
        for j in range(d - 1, -1, -1):
            child = path[j]
            _, m, lz = _child_softmax(node, xind, xval, a0, a1, xbuf, xfilled, child_ptr, children, aptr, active, nmode,
                                      eptr, sfeat, schild, sval, dfeat, dptr, dval, vptr, vval, rptr, rbits, rrank,
                                      scan_max, bias, sbuf, abuf)
            key = ((sbuf[position[child]] - m) - lz) + key
            node = child
        _clear_row(xbuf, xfilled, xind, a0, a1)
        out[r] = key


# --- set containers ------------------------------------------------------------------------------


@njit(**_JIT)
def sets_contain(indptr, indices, y, out):
    """``out[i] = y[i] in indices[indptr[i]:indptr[i + 1]]`` (no temporary the size of ``indices``)."""
    for i in range(y.size):
        hit = False
        for a in range(indptr[i], indptr[i + 1]):
            if indices[a] == y[i]:
                hit = True
                break
        out[i] = hit


@njit(**_JIT)
def first_repeated_class(indptr, indices, n_classes):
    """``(i, c)``: the first set ``i`` that holds a class twice and the smallest such class ``c``
    in it, or ``(-1, -1)``; one pass with a stamp per class (classes must be in ``0..n_classes-1``)."""
    stamp = np.zeros(n_classes, dtype=np.int64)
    for i in range(indptr.size - 1):
        found = -1
        for a in range(indptr[i], indptr[i + 1]):
            c = indices[a]
            if stamp[c] == i + 1:
                if found < 0 or c < found:
                    found = c
            else:
                stamp[c] = i + 1
        if found >= 0:
            return i, found
    return -1, -1


# --- running kernels on blocks of rows in threads ----------------------------------------------


def run_blocks(task, n_rows: int, block: int, n_jobs) -> None:
    """Call ``task(lo, hi)`` for consecutive blocks of ``block`` rows, in ``n_jobs`` threads.

    The kernels release the GIL, so threads run them in parallel.  ``n_jobs`` follows
    scikit-learn: ``None``/1 one thread, -1 every core.
    """
    from concurrent.futures import ThreadPoolExecutor

    starts = range(0, n_rows, block)
    workers = 1 if n_jobs is None else min(_n_workers("n_jobs", n_jobs), max(1, len(starts)))
    if workers == 1:
        for lo in starts:
            task(lo, min(lo + block, n_rows))
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for _ in pool.map(lambda lo: task(lo, min(lo + block, n_rows)), starts):
            pass


def per_model(model, name: str, build):
    """``build(model)``, computed once per model object and kept on it (rebuilt if ``model.W``
    is replaced): the search structures derived from a model's weights."""
    cached = getattr(model, name, None)
    if cached is None or cached[0] is not model.W:
        cached = (model.W, build(model))
        object.__setattr__(model, name, cached)
    return cached[1]


def ragged_sets(sizes: np.ndarray, first: np.ndarray, long_rows: np.ndarray, longer: np.ndarray | None):
    """``(indices, indptr)`` of sets whose classes a kernel wrote into padded buffers: ``first``
    (one row per set, its first ``first.shape[1]`` classes) and, for the sets that did not fit,
    ``longer`` (one row per entry of ``long_rows``, wide enough for them)."""
    indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    indices = np.empty(indptr[-1], dtype=first.dtype)  # class ids, or any value the kernel wrote beside them
    for rows, buf in ((np.flatnonzero(sizes <= first.shape[1]), first[sizes <= first.shape[1]]),
                      (long_rows, longer)):
        if buf is None or not len(rows):
            continue
        fits = np.arange(buf.shape[1]) < sizes[rows][:, None]
        indices[(indptr[rows][:, None] + np.arange(buf.shape[1]))[fits]] = buf[fits]
    return indices, indptr
