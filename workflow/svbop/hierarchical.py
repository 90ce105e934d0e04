"""Bayes-optimal sets restricted to a class hierarchy: unions of at most ``m`` nodes of a tree.

A node of a class tree stands for every class below it.  Among the sets ``Y`` that are unions of
at most ``max_nodes`` nodes, :func:`predict_sets_hierarchical` returns the one with the largest
expected utility ``g(|Y|) P(Y|x)`` (the utilities of :mod:`svbop.utilities`).  ``max_nodes=1`` is
the classical "predict an internal node" rejection; with ``max_nodes >= K`` every set is allowed
and the answer is :func:`svbop.predict_sets`'s.  (Sets of this kind are studied by Mortier et al.,
UAI 2022, who call the number of nodes the *representation complexity*.)

Algorithm (exact)
    A union of nodes can always be written with *disjoint* nodes (of two nested nodes keep the
    larger), so the problem is a tree knapsack.  For every node ``v`` and every ``j <= m``,
    ``s``, the dynamic programme keeps the best set of ``s`` classes below ``v`` made of at most
    ``j`` nodes; children are merged one after the other by a ``(max, +)`` convolution over
    ``(j, s)``, and ``v`` itself adds the set of all its classes.  The root's table gives, for
    every size ``s``, the best mass ``M(s)``; the answer maximises ``g(s) M(s)``.

    Exact pruning of sizes: any set of ``s`` classes has mass at most ``T(s)``, the mass of the
    ``s`` most probable classes, and a feasible set (the best single node, or the ``m`` most
    probable classes) gives a lower bound ``L`` of the optimum.  Sizes with
    ``g(s) T(s) < (1 - tie_rtol) L`` beyond the last size where the inequality fails can neither
    win nor be part of a winner, so every table stops at ``S = max{s : g(s) T(s) >= (1 -
    tie_rtol) L}``.  Likewise a state of ``v`` whose best completion, ``max_{t >= s} g(t)``
    times its mass plus all the mass outside ``v``, stays below ``(1 - tie_rtol)^3 L`` is
    dropped (it cannot even tie with the winner).  The work per row is ``O(m^2)`` times the sum,
    over merges, of the product of the two tables' widths (at most ``S + 1`` each): at most
    ``O(m^2 K min(K, S))`` (the tree-knapsack bound), plus sorting the row.  In practice ``S`` is
    small (a few classes for F1 on softmax outputs) and the cost is a few passes over the tree.

Bounded work
    Before building any table, a row counts the steps its merges and table copies can take
    (from the tree's shape, ``m`` and ``S``, in ``O(n_nodes)``) and is refused when the count
    exceeds ``max_work`` (as ``workspace_bytes`` bounds the tables' memory).  Two cases need no
    tables at all and are never refused: ``max_nodes=1`` (the best single node: one pass over
    the nodes) and a flat tree, every class a child of the root (the root, or the ``s <= m``
    most probable classes); both cost ``O(n_nodes + K log K)`` per row, where the root's table
    would grow one column per child (``O(K^2)``).

Ties (one rule, also what the tests' exhaustive search implements)
    1. The size: as in :func:`svbop.predict_sets` (Algorithm 1), size ``s`` is accepted when
       ``g(s) M(s) >= (1 - tie_rtol) max_{j <= s} g(j) M(j)`` and the largest accepted size
       wins: a tie goes to the larger set.
    2. Among the sets of that size and at most ``max_nodes`` nodes with the largest mass (masses
       within a relative ``tie_rtol`` count as equal): the one whose classes rank best, i.e. the
       smallest sum of ranks, ranking classes by decreasing probability and equal probabilities
       by increasing class id (the order :func:`svbop.predict_sets` takes them in).
    3. Then the set that comes first in the tree's depth-first leaf order (children visited in
       increasing node id): of the two sets, the one holding the first leaf that only one of them
       holds.

    Without a constraint, rule 2 picks the prefix of that ranking, which is exactly
    :func:`svbop.predict_sets`'s set, so the rule agrees with it wherever its set can be
    represented; for ``max_nodes >= K`` the function returns :func:`svbop.predict_sets`'s
    answer itself.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._kernels import run_blocks
from ._prefix import DEFAULT_CHUNK_BYTES, as_score_matrix, row_stats
from .datasets.base import Hierarchy
from .search import TIE_RTOL, predict_sets, utility_for
from .sets import SetPredictions
from .utilities import Utility

__all__ = ["predict_sets_hierarchical", "canonical_nodes"]

_JIT = {"nogil": True, "cache": True}

#: Default memory bound of one row's dynamic-programming tables (bytes).
DEFAULT_WORKSPACE_BYTES = 1 << 30

#: Default time bound of one row's dynamic programme: the steps it may take (see ``max_work``).
DEFAULT_MAX_WORK = 10_000_000_000


# --- tree layout --------------------------------------------------------------------------------


def _layout(h: Hierarchy):
    """Post-order, children (CSR), leaf counts, depth-first leaf positions of every node."""
    indptr, children = h.children_csr()
    return _layout_kernel(indptr, children, h.root, h.n_nodes, h.n_classes)


@njit(cache=True)
def _layout_kernel(indptr, children, root, n_nodes, K):
    post = np.empty(n_nodes, np.int64)
    size = np.zeros(n_nodes, np.int64)
    start = np.zeros(n_nodes, np.int64)
    dfs_leaf = np.empty(K, np.int64)
    stack = np.empty(n_nodes, np.int64)
    nxt = np.zeros(n_nodes, np.int64)  # next child to visit
    top = 0
    stack[0] = root
    n_post = 0
    pos = 0
    start[root] = 0
    while top >= 0:
        v = stack[top]
        k = indptr[v] + nxt[v]
        if v < K:  # a leaf
            start[v] = pos
            dfs_leaf[pos] = v
            pos += 1
            size[v] = 1
            post[n_post] = v
            n_post += 1
            top -= 1
        elif k < indptr[v + 1]:
            if nxt[v] == 0:
                start[v] = pos
            nxt[v] += 1
            top += 1
            stack[top] = children[k]
        else:
            size[v] = pos - start[v]
            post[n_post] = v
            n_post += 1
            top -= 1
    return post, size, start, dfs_leaf


# --- the dynamic programme ----------------------------------------------------------------------


@njit(**_JIT)
def _intervals(nodes, n, start, size, out):
    """Disjoint nodes sorted by leaf position -> maximal runs of leaf positions ``[a, b)``."""
    k = 0
    for i in range(n):
        a = start[nodes[i]]
        b = a + size[nodes[i]]
        if k > 0 and out[k - 1, 1] == a:
            out[k - 1, 1] = b
        else:
            out[k, 0] = a
            out[k, 1] = b
            k += 1
    return k


@njit(**_JIT)
def _first_in_leaf_order(x, nx, y, ny, start, size, bx, by):
    """-1 when the set of nodes ``x`` holds the first leaf (depth-first order) that only one of
    the two sets holds, 1 when ``y`` does, 0 for equal sets."""
    kx = _intervals(x, nx, start, size, bx)
    ky = _intervals(y, ny, start, size, by)
    i = 0
    while i < kx and i < ky:
        if bx[i, 0] != by[i, 0]:
            return -1 if bx[i, 0] < by[i, 0] else 1
        if bx[i, 1] != by[i, 1]:
            return -1 if bx[i, 1] > by[i, 1] else 1
        i += 1
    if i < kx:
        return -1
    if i < ky:
        return 1
    return 0


@njit(**_JIT)
def _ranked_members(nodes, nn, start, size, dfs_leaf, order, mark, out, limit):
    """Write the classes below ``nodes[:nn]`` into ``out`` in the order of the ranking ``order``
    (decreasing probability, then class id), at most ``limit`` of them; ``mark`` (all False) is used
    as scratch and left as it was found.  Returns how many were written."""
    for t in range(nn):
        v = nodes[t]
        for a in range(start[v], start[v] + size[v]):
            mark[dfs_leaf[a]] = True
    w = 0
    for r in range(order.size):
        c = order[r]
        if mark[c]:
            out[w] = c
            mark[c] = False
            w += 1
            if w == limit:
                break
    return w


@njit(**_JIT)
def _node_masses(p, post, indptr, children, K, rank, order, nm, nr):
    """Rank every class by decreasing ``p`` (ties by class id) and fill each node's mass ``nm`` and
    rank sum ``nr`` bottom-up (``post``: the nodes in post-order)."""
    order[:] = np.argsort(-p, kind="mergesort")
    for r in range(K):
        rank[order[r]] = r
    for t in range(post.size):
        v = post[t]
        if v < K:
            nm[v] = p[v]
            nr[v] = rank[v]
        else:
            a = 0.0
            r = 0
            for e in range(indptr[v], indptr[v + 1]):
                a += nm[children[e]]
                r += nr[children[e]]
            nm[v] = a
            nr[v] = r


@njit(**_JIT)
def _row(p, g, rho, m, post, indptr, children, size, start, K, rank, order, nm, nr, out_nodes, max_words,
         max_work):
    """The best set of one row (``p`` sums to anything positive).  Writes its nodes (sorted by
    leaf position) into ``out_nodes``; returns ``(number of nodes, set size, g(s) * mass)``."""
    n_nodes = post.size
    _node_masses(p, post, indptr, children, K, rank, order, nm, nr)
    # a lower bound of the optimum, and the largest size that can still reach it
    low = 0.0
    for v in range(n_nodes):
        low = max(low, g[size[v] - 1] * nm[v])
    top = 0.0
    for s in range(1, min(m, K) + 1):
        top += p[order[s - 1]]
        low = max(low, g[s - 1] * top)
    smax = 1
    top = 0.0
    total = 0.0
    for c in range(K):
        total += p[c]
    gsuf = np.empty(K)  # max of g over sizes >= s
    gsuf[K - 1] = g[K - 1]
    for s in range(K - 2, -1, -1):
        gsuf[s] = max(g[s], gsuf[s + 1])
    cut = (1.0 - rho) ** 3 * low
    root = post[n_nodes - 1]
    for s in range(1, K + 1):
        top += p[order[s - 1]]
        if g[s - 1] * top >= (1.0 - rho) * low:
            smax = s

    # a set of at most smax classes needs at most smax nodes
    m = min(m, smax)
    # The work of the merges below, at most: every merge of the tables so far with a child's
    # visits (rows x columns) of both.  Counted before any table is built, O(n_nodes).
    work = 0.0
    for i in range(n_nodes):
        v = post[i]
        if v >= K:
            # copying the node's table in and out of the stack: states x nodes per state
            work += 2.0 * (min(m, size[v]) + 1) * (min(size[v], smax) + 1) * (m + 1)
            acc = size[children[indptr[v]]]
            for e in range(indptr[v] + 1, indptr[v + 1]):
                c = children[e]
                acc += size[c]
                work += (float(min(acc, smax) + 1) * (min(m, acc) + 1)
                         * (min(size[c], smax) + 1) * (min(m, size[c]) + 1))
    if work > max_work:
        return -2, smax, work  # the caller refuses the row: too much work
    # Tables: node v's table has J_v = min(m, leaves) + 1 rows (j nodes at most) and
    # S_v = min(|v|, smax) + 1 columns (s classes); a state holds mass (-inf: none), rank sum,
    # number of nodes and the nodes.  Finished tables wait on a stack until their parent merges
    # them; find how large that stack gets.
    live = 0
    most = 0
    for i in range(n_nodes):
        v = post[i]
        if v >= K:
            for e in range(indptr[v], indptr[v + 1]):
                c = children[e]
                live -= (min(m, size[c]) + 1) * (min(size[c], smax) + 1)
        live += (min(m, size[v]) + 1) * (min(size[v], smax) + 1)
        most = max(most, live)
    if (most + (m + 1) * (smax + 1)) * (m + 3) > max_words:
        return -1, smax, float(m)  # the caller refuses the row: too much memory
    st_mass = np.empty(most)
    st_rs = np.empty(most, np.int64)
    st_cnt = np.empty(most, np.int64)
    st_nodes = np.empty((most, m), np.int64)
    t_off = np.empty(n_nodes + 1, np.int64)  # stack of tables: offset, rows, columns
    t_J = np.empty(n_nodes, np.int64)
    t_S = np.empty(n_nodes, np.int64)
    n_t = 0
    t_off[0] = 0
    SA = smax + 1
    a_mass = np.empty((m + 1, SA))
    a_rs = np.empty((m + 1, SA), np.int64)
    a_cnt = np.empty((m + 1, SA), np.int64)
    a_nodes = np.empty((m + 1, SA, m), np.int64)
    bx = np.empty((2 * m, 2), np.int64)
    by = np.empty((2 * m, 2), np.int64)
    cand = np.empty(2 * m, np.int64)
    for i in range(n_nodes):
        v = post[i]
        if v < K:  # a leaf: the empty set and {v}
            o = t_off[n_t]
            S = min(1, smax) + 1
            for j in range(2):
                for s in range(S):
                    q = o + j * S + s
                    st_mass[q] = -np.inf
                    st_rs[q] = 0
                    st_cnt[q] = 0
            st_mass[o] = 0.0
            st_mass[o + S] = 0.0
            q = o + S + 1
            st_mass[q] = p[v]
            st_rs[q] = rank[v]
            st_cnt[q] = 1
            st_nodes[q, 0] = v
            t_J[n_t] = 2
            t_S[n_t] = S
            n_t += 1
            t_off[n_t] = o + 2 * S
            continue
        k = indptr[v + 1] - indptr[v]
        first = n_t - k
        # the accumulator starts as the first child's table; it has J_acc = min(m, leaves) + 1
        # rows (more nodes than leaves change nothing)
        o, J, S = t_off[first], t_J[first], t_S[first]
        J_acc = J
        for j in range(J):
            for s in range(S):
                q = o + j * S + s
                a_mass[j, s] = st_mass[q]
                a_rs[j, s] = st_rs[q]
                a_cnt[j, s] = st_cnt[q]
                for t in range(st_cnt[q]):
                    a_nodes[j, s, t] = st_nodes[q, t]
        S_acc = S
        for b in range(first + 1, n_t):
            o, J, S = t_off[b], t_J[b], t_S[b]
            S_new = min(S_acc - 1 + S - 1, smax) + 1
            J_new = min(m, J_acc - 1 + J - 1) + 1
            for j in range(J_acc, J_new):  # new rows start as copies of the last one
                for s in range(S_acc):
                    a_mass[j, s] = a_mass[J_acc - 1, s]
                    a_rs[j, s] = a_rs[J_acc - 1, s]
                    a_cnt[j, s] = a_cnt[J_acc - 1, s]
                    for t in range(a_cnt[j, s]):
                        a_nodes[j, s, t] = a_nodes[J_acc - 1, s, t]
            for j in range(J_new):
                for s in range(S_acc, S_new):
                    a_mass[j, s] = -np.inf
                    a_rs[j, s] = 0
                    a_cnt[j, s] = 0
            # in place, sizes descending: a candidate reads only smaller sizes, not yet updated
            for s in range(S_new - 1, 0, -1):
                for j in range(J_new - 1, 0, -1):
                    for sc in range(1, min(S - 1, s) + 1):
                        sa = s - sc
                        if sa >= S_acc:
                            continue
                        for jc in range(1, min(J - 1, j) + 1):
                            ja = j - jc
                            am = a_mass[ja, sa]
                            q = o + jc * S + sc
                            cm = st_mass[q]
                            if am == -np.inf or cm == -np.inf:
                                continue
                            # The child's best set with fewer nodes than allowed is also its
                            # best with exactly its own count: that candidate, with the spare
                            # allowance on the accumulator's side, is the same union or better
                            if st_cnt[q] < jc:
                                continue
                            mass = am + cm
                            rs = a_rs[ja, sa] + st_rs[q]
                            inc = a_mass[j, s]
                            take = False
                            if inc == -np.inf:
                                take = True
                            else:
                                tol = rho * max(mass, inc)
                                if mass > inc + tol:
                                    take = True
                                elif mass >= inc - tol:
                                    if rs < a_rs[j, s]:
                                        take = True
                                    elif rs == a_rs[j, s]:
                                        nc = a_cnt[ja, sa]
                                        for t in range(nc):
                                            cand[t] = a_nodes[ja, sa, t]
                                        for t in range(st_cnt[q]):
                                            cand[nc + t] = st_nodes[q, t]
                                        take = _first_in_leaf_order(
                                            cand, nc + st_cnt[q], a_nodes[j, s], a_cnt[j, s], start, size, bx, by
                                        ) < 0
                            if take:
                                nc = a_cnt[ja, sa]
                                for t in range(nc):
                                    a_nodes[j, s, t] = a_nodes[ja, sa, t]
                                for t in range(st_cnt[q]):
                                    a_nodes[j, s, nc + t] = st_nodes[q, t]
                                a_cnt[j, s] = nc + st_cnt[q]
                                a_mass[j, s] = mass
                                a_rs[j, s] = rs
            S_acc = S_new
            J_acc = J_new
        # v itself: the only set of |v| classes below v
        if size[v] <= smax:
            for s in range(S_acc, size[v] + 1):  # columns cut off by the pruning below
                for j in range(J_acc):
                    a_mass[j, s] = -np.inf
                    a_rs[j, s] = 0
                    a_cnt[j, s] = 0
            S_acc = max(S_acc, size[v] + 1)
            for j in range(1, J_acc):
                a_mass[j, size[v]] = nm[v]
                a_rs[j, size[v]] = nr[v]
                a_cnt[j, size[v]] = 1
                a_nodes[j, size[v], 0] = v
        # States that no completion by classes outside v can make good enough: a set of size
        # s + t has value <= max_{t} g(s + t) * (mass + mass outside v).  The cut lies below
        # (1 - rho)^3 L: such a set cannot even tie (within rho) with the winner of its size.
        if v != root:
            out = total - nm[v]
            last = 0
            for s in range(1, S_acc):
                alive = False
                for j in range(1, J_acc):
                    if a_mass[j, s] != -np.inf:
                        if gsuf[s - 1] * (a_mass[j, s] + out) < cut:
                            a_mass[j, s] = -np.inf
                            a_cnt[j, s] = 0
                        else:
                            alive = True
                if alive:
                    last = s
            S_acc = last + 1
        # pop the children, push v
        n_t = first
        o = t_off[n_t]
        J = J_acc
        S = S_acc
        for j in range(J):
            for s in range(S):
                q = o + j * S + s
                st_mass[q] = a_mass[j, s]
                st_rs[q] = a_rs[j, s]
                st_cnt[q] = a_cnt[j, s]
                for t in range(a_cnt[j, s]):
                    st_nodes[q, t] = a_nodes[j, s, t]
        t_J[n_t] = J
        t_S[n_t] = S
        n_t += 1
        t_off[n_t] = o + J * S

    # the root: pick the size as Algorithm 1 does (ties to the larger set)
    o, J, S = t_off[0], t_J[0], t_S[0]
    row = o + (J - 1) * S
    best_s = 0
    best_u = 0.0
    running = -np.inf
    for s in range(1, S):
        mass = st_mass[row + s]
        if mass == -np.inf:
            continue
        u = g[s - 1] * mass
        if u >= (1.0 - rho) * running:
            best_s = s
            best_u = u
        running = max(running, u)
    q = row + best_s
    for t in range(st_cnt[q]):
        out_nodes[t] = st_nodes[q, t]
    return st_cnt[q], best_s, best_u


@njit(**_JIT)
def _rows(P, g, rho, m, post, indptr, children, size, start, dfs_leaf, K, max_words, max_work,
          out_cls, out_size, out_val, out_nodes, out_nn):
    n_nodes = post.size
    rank = np.empty(K, np.int64)
    order = np.empty(K, np.int64)
    nm = np.empty(n_nodes)
    nr = np.empty(n_nodes, np.int64)
    p = np.empty(K)
    mark = np.zeros(K, np.bool_)
    for i in range(P.shape[0]):
        total = 0.0
        for c in range(K):
            p[c] = P[i, c]
            total += p[c]
        nn, s, u = _row(p, g, rho, m, post, indptr, children, size, start, K, rank, order, nm, nr, out_nodes[i],
                        max_words, max_work)
        if nn < 0:  # refused (-1: memory, -2: work): report the row, its size bound and node bound or work
            out_nn[i] = nn
            out_size[i] = s
            out_val[i] = u
            return i
        out_nn[i] = nn
        out_size[i] = s
        out_val[i] = u / total
        # the classes, in the order of the ranking (decreasing probability, then class id)
        _ranked_members(out_nodes[i], nn, start, size, dfs_leaf, order, mark, out_cls[i], s)
    return -1


@njit(**_JIT)
def _rows_simple(P, g, rho, m, star, post, indptr, children, size, start, dfs_leaf, K,
                 out_cls, out_size, out_val, out_nodes, out_nn):
    """The cases decided without the tables, in O(n_nodes + K log K) per row: ``m = 1`` (the
    best single node) on any tree, and any ``m < K`` on a star (every class a child of the root:
    the sets are the root or at most ``m`` classes, of which the ``s`` most probable are the best
    of size ``s``).  Same rule as the tables: per size the largest mass (within ``rho``), then the
    smallest rank sum, then the first in depth-first leaf order (for one node: the smaller leaf
    position; for nodes of equal leaves, the highest, as :func:`canonical_nodes` writes it);
    then the size as Algorithm 1 picks it."""
    n_nodes = post.size
    rank = np.empty(K, np.int64)
    order = np.empty(K, np.int64)
    nm = np.empty(n_nodes)
    nr = np.empty(n_nodes, np.int64)
    p = np.empty(K)
    mark = np.zeros(K, np.bool_)
    best_mass = np.empty(K + 1)
    best_node = np.empty(K + 1, np.int64)
    root = post[n_nodes - 1]
    for i in range(P.shape[0]):
        total = 0.0
        for c in range(K):
            p[c] = P[i, c]
            total += p[c]
        _node_masses(p, post, indptr, children, K, rank, order, nm, nr)
        best_mass[:] = -np.inf
        best_node[:] = -1
        if star:  # the s most probable classes (s <= m), or the root
            top = 0.0
            for s in range(1, min(m, K) + 1):
                top += p[order[s - 1]]
                best_mass[s] = top
            best_mass[K] = nm[root]
            best_node[K] = root
        else:
            for t in range(n_nodes):  # the largest mass of every size
                v = post[t]
                best_mass[size[v]] = max(best_mass[size[v]], nm[v])
            for t in range(n_nodes):  # of the masses tied with it: rank sum, then leaf order
                v = post[t]
                s = size[v]
                if nm[v] < best_mass[s] - rho * best_mass[s]:
                    continue
                w = best_node[s]
                if (w < 0 or nr[v] < nr[w] or (nr[v] == nr[w] and start[v] <= start[w])):
                    best_node[s] = v  # equal leaves: the later in post-order is the higher node
            for s in range(1, K + 1):
                if best_node[s] >= 0:
                    best_mass[s] = nm[best_node[s]]
        best_s = 0
        best_u = 0.0
        running = -np.inf
        for s in range(1, K + 1):
            if best_mass[s] == -np.inf:
                continue
            u = g[s - 1] * best_mass[s]
            if u >= (1.0 - rho) * running:
                best_s = s
                best_u = u
            running = max(running, u)
        out_size[i] = best_s
        out_val[i] = best_u / total
        if best_node[best_s] >= 0:  # one node: its classes in ranking order
            v = best_node[best_s]
            out_nodes[i, 0] = v
            out_nn[i] = 1
            _ranked_members(out_nodes[i], 1, start, size, dfs_leaf, order, mark, out_cls[i], best_s)
        else:  # a star's s most probable classes, as nodes in leaf order
            for r in range(best_s):
                out_cls[i, r] = order[r]
                mark[order[r]] = True
            w = 0
            for a in range(K):
                if mark[dfs_leaf[a]]:
                    out_nodes[i, w] = dfs_leaf[a]
                    mark[dfs_leaf[a]] = False
                    w += 1
            out_nn[i] = best_s


@njit(**_JIT)
def _cover(indptr_sets, indices, post, parent, size, start, K, out_ptr, out_nodes):
    """Fewest nodes whose union is each set: its maximal nodes (sorted by leaf position)."""
    n_nodes = post.size
    cnt = np.zeros(n_nodes, np.int64)
    full = np.zeros(n_nodes, np.bool_)
    w = 0
    for i in range(indptr_sets.size - 1):
        for a in range(indptr_sets[i], indptr_sets[i + 1]):
            cnt[indices[a]] = 1
        for t in range(n_nodes):
            v = post[t]
            full[v] = cnt[v] == size[v]
            if parent[v] >= 0:
                cnt[parent[v]] += cnt[v]
        first = w
        for v in range(n_nodes):
            if full[v] and (parent[v] < 0 or not full[parent[v]]):
                out_nodes[w] = v
                w += 1
        seg = out_nodes[first:w]
        keys = np.empty(seg.size, np.int64)
        for t in range(seg.size):
            keys[t] = start[seg[t]]
        srt = seg[np.argsort(keys)]
        out_nodes[first:w] = srt
        out_ptr[i + 1] = w
        cnt[:] = 0


def canonical_nodes(sets: SetPredictions, hierarchy: Hierarchy) -> SetPredictions:
    """The fewest nodes of ``hierarchy`` whose union is each set (its maximal nodes).

    Parameters
    ----------
    sets : SetPredictions
        Sets of classes ``0 .. K - 1``.
    hierarchy : Hierarchy
        A tree whose leaves are those ``K`` classes.

    Returns
    -------
    SetPredictions
        Node ids (``n_classes`` is ``hierarchy.n_nodes``), per set in depth-first leaf order;
        ``len(nodes[i])`` is set ``i``'s representation complexity.
    """
    if not isinstance(hierarchy, Hierarchy):
        raise ValueError(f"hierarchy must be a svbop.datasets.Hierarchy, got {type(hierarchy).__name__}")
    if sets.n_classes != hierarchy.n_classes:
        raise ValueError(f"the sets are over {sets.n_classes} classes but the hierarchy has {hierarchy.n_classes}")
    post, size, start, _ = _layout(hierarchy)
    out_ptr = np.zeros(len(sets) + 1, np.int64)
    out_nodes = np.empty(max(1, sets.indices.size), np.int64)
    _cover(sets.indptr, sets.indices, post, hierarchy.parent, size, start, hierarchy.n_classes, out_ptr, out_nodes)
    return SetPredictions(out_nodes[: out_ptr[-1]].copy(), out_ptr, hierarchy.n_nodes)


def predict_sets_hierarchical(
    P,
    u: Utility | str,
    hierarchy: Hierarchy,
    max_nodes: int,
    *,
    tie_rtol: float = TIE_RTOL,
    return_nodes: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES,
    max_work: int = DEFAULT_MAX_WORK,
    n_jobs: int | None = None,
):
    """The best set that is a union of at most ``max_nodes`` nodes of a class tree, per row.

    Parameters
    ----------
    P : array-like of shape (n_samples, n_classes)
        Class probabilities ``P(c|x)``, or non-negative scores proportional to them per row.
    u : Utility or str
        The set utility ``g``, e.g. ``"fbeta:beta=1"``.
    hierarchy : svbop.datasets.Hierarchy
        A tree whose leaves ``0 .. K - 1`` are the columns of ``P``; a node stands for all the
        classes below it.  Any shape: unbalanced, single-child chains, leaves at any depth.
    max_nodes : int, >= 1
        How many nodes the set may be the union of.  1: a single node (a class or an internal
        node, the classical reject-to-an-ancestor); ``>= K``: no restriction, the answer is
        :func:`svbop.predict_sets`'s.
    tie_rtol : float, default 1e-9
        Relative tolerance under which expected utilities (and masses) tie; see the module's
        rule for ties.
    return_nodes : bool, default False
        Also return the nodes whose union each set is.
    chunk_bytes : int
        Memory bound: rows are processed in blocks of about this many bytes of ``P`` (and of
        the output buffers).
    workspace_bytes : int, default 1 GiB
        Memory bound of one row's tables, about ``8 (m' + 3)`` bytes per state with
        ``m' = min(max_nodes, S)``, ``S`` the largest size that can be optimal (see the module
        notes); a row that would need more is refused with a ``ValueError`` naming it (it
        happens only when both ``S`` and ``max_nodes`` are in the hundreds or more).
    max_work : int, default 1e10
        Time bound of one row: the most steps (candidate states the tables' merges visit, and
        node ids they copy) the exact search may take, counted from the tree's shape and the
        row's largest useful size ``S`` before any table is built (an upper bound: pruning often
        does less); a row over it is refused with a ``ValueError`` naming the bound.  The
        default is a few seconds on one core (5.4e9 counted steps took 6 s).  Rows with
        ``max_nodes=1`` and trees where every class hangs below the root (a flat tree) are
        decided without tables, in ``O(n_nodes + K log K)``, and never refused.
    n_jobs : int or None
        Threads working on blocks of rows in parallel (``None``/1: one; -1: all cores).

    Returns
    -------
    sets : SetPredictions
        Classes in decreasing probability (equal ones by class id), as :func:`svbop.predict_sets`
        returns them; ``.expected_utility[i]`` is ``g(|Y|) P(Y|x)`` with ``P`` normalised per row.
    nodes : SetPredictions, only with ``return_nodes=True``
        Per row, the fewest nodes whose union is the set, in depth-first leaf order
        (``nodes.n_classes`` is ``hierarchy.n_nodes``); their number is the set's
        representation complexity, at most ``max_nodes``.

    Raises
    ------
    ValueError
        For ``max_nodes`` not an integer >= 1, a row whose tables exceed ``workspace_bytes`` or
        whose search would exceed ``max_work`` steps, a hierarchy whose leaves are not ``P``'s columns,
        a bad utility or ``tie_rtol``, or a row of ``P`` with NaN, infinite or negative values or
        no mass (the message names the row).

    Notes
    -----
    Exact: a dynamic programme over the tree (see :mod:`svbop.hierarchical`), not an
    enumeration of unions; ties follow the module's documented rule, which for sets that
    :func:`svbop.predict_sets` could also return picks the same set.

    Examples
    --------
    >>> import numpy as np, svbop
    >>> from svbop.datasets import Hierarchy
    >>> h = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), n_classes=4)  # root 6 > {4: 0, 1}, {5: 2, 3}
    >>> P = np.array([[0.35, 0.3, 0.2, 0.15], [0.42, 0.1, 0.33, 0.15]])
    >>> svbop.predict_sets_hierarchical(P, "fbeta:beta=1", h, max_nodes=1).to_list()
    [[0, 1], [0]]
    >>> sets, nodes = svbop.predict_sets_hierarchical(P, "fbeta:beta=1", h, max_nodes=2, return_nodes=True)
    >>> sets.to_list(), nodes.to_list()
    ([[0, 1], [0, 2]], [[4], [0, 2]])
    """
    if isinstance(max_nodes, (bool, np.bool_)) or not isinstance(max_nodes, (int, np.integer)) or max_nodes < 1:
        raise ValueError(f"max_nodes must be an integer >= 1, got {max_nodes!r}")
    if not isinstance(hierarchy, Hierarchy):
        raise ValueError(f"hierarchy must be a svbop.datasets.Hierarchy, got {type(hierarchy).__name__}")
    for name, bound in (("workspace_bytes", workspace_bytes), ("max_work", max_work)):
        if isinstance(bound, (bool, np.bool_)) or not isinstance(bound, (int, np.integer)) or bound < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {bound!r}")
    P_arr = as_score_matrix(P, "P")
    n, K = P_arr.shape
    if hierarchy.n_classes != K:
        raise ValueError(
            f"hierarchy has {hierarchy.n_classes} leaves (classes) but P has {K} columns; "
            "the leaves must be P's classes"
        )
    u, g, _ = utility_for(u, K, tie_rtol, owner="P")
    if max_nodes >= K:
        sets = predict_sets(P_arr, u, tie_rtol=tie_rtol, chunk_bytes=chunk_bytes, n_jobs=n_jobs)
        return (sets, canonical_nodes(sets, hierarchy)) if return_nodes else sets
    m = int(max_nodes)
    post, size, start, dfs_leaf = _layout(hierarchy)
    indptr, children = hierarchy.children_csr()
    # a star (every class a child of the root) or a single node: no tables (O(n_nodes) per row)
    star = hierarchy.n_nodes == K + 1
    simple = star or m == 1
    block = max(1, min(n, int(chunk_bytes) // (8 * (K + m))))
    max_words = max(1, int(workspace_bytes) // 8)
    sizes = np.zeros(n, np.int64)
    value = np.zeros(n)
    nn = np.zeros(n, np.int64)
    pieces: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def task(lo: int, hi: int) -> None:
        X = np.ascontiguousarray(P_arr[lo:hi], dtype=np.float64)
        row_stats(X, lo, "P")  # one-line errors for NaN, infinite, negative, all-zero rows
        cls = np.empty((hi - lo, K), np.int64)
        nodes = np.empty((hi - lo, m), np.int64)
        if simple:
            _rows_simple(X, g, float(tie_rtol), m, star, post, indptr, children, size, start, dfs_leaf, K,
                         cls, sizes[lo:hi], value[lo:hi], nodes, nn[lo:hi])
            bad = -1
        else:
            bad = _rows(X, g, float(tie_rtol), m, post, indptr, children, size, start, dfs_leaf, K, max_words,
                        float(max_work), cls, sizes[lo:hi], value[lo:hi], nodes, nn[lo:hi])
        if bad >= 0 and nn[lo + bad] == -2:
            raise ValueError(
                f"P: row {lo + bad}: the exact search would take more than max_work={max_work} steps (about "
                f"{value[lo + bad]:.3g}: sets of up to {sizes[lo + bad]} classes can be optimal, over at most "
                f"{m} nodes of a tree of {hierarchy.n_nodes}); give a smaller max_nodes or a larger max_work"
            )
        if bad >= 0:
            raise ValueError(
                f"P: row {lo + bad}: the exact search would need more than workspace_bytes={workspace_bytes} "
                f"(sets of up to {sizes[lo + bad]} classes can be optimal, with up to {int(value[lo + bad])} "
                "nodes); give a smaller max_nodes or a larger workspace_bytes"
            )
        pieces[lo] = (cls[np.arange(K) < sizes[lo:hi, None]], nodes[np.arange(m) < nn[lo:hi, None]])

    run_blocks(task, n, block, n_jobs)
    order = sorted(pieces)
    indptr_out = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    indices = np.concatenate([pieces[lo][0] for lo in order]) if pieces else np.empty(0, np.int64)
    sets = SetPredictions(indices, indptr_out, K, expected_utility=value)
    if not return_nodes:
        return sets
    nptr = np.concatenate([[0], np.cumsum(nn)]).astype(np.int64)
    node_ids = np.concatenate([pieces[lo][1] for lo in order]) if pieces else np.empty(0, np.int64)
    return sets, SetPredictions(node_ids, nptr, hierarchy.n_nodes)
