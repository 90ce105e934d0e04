r"""Conformal sets that are unions of at most ``c`` nodes of a class hierarchy.

The method of Mortier, Javanmardi, Sale, Hullermeier and Waegeman, "Conformal prediction in
hierarchical classification with constrained representation complexity" (PMLR vol. 300;
arXiv:2501.19038), in its general form for any representation complexity ``c`` (their
``CSVPHF``, in ``setvaluedprediction``'s ``svp/csrc/svp_cpp.cpp``: ``calibrate_csvphf_hf_``,
``csvphfrsvphf`` and the dynamic programme ``min_cov_set_dp``), deterministic.

Definitions
    Rank the classes of a row by decreasing ``P(c|x)`` (normalised per row), ties by class index,
    and let ``A_k`` be the ``k`` first (``o(c)`` is the 1-based rank of ``c``).  A *cover* of
    ``A_k`` is a set ``S`` of classes that contains ``A_k`` and is the union of at most ``c``
    nodes of the tree.  ``S_k`` is the **smallest cover of A_k** (fewest classes), ties to the
    larger mass ``P(S)``: exactly the authors' ``min_cov_set_dp``, which minimises
    ``|S| - P(S)`` (the same order whenever ``P(A_k) > 0``, which always holds since the top
    class has mass).  Its mass is ``m_k = P(S_k)``.  The authors' conformity score of ``(x, y)``
    is ``m_{o(y)}``, the mass of the smallest cover of the classes ranked at or before ``y``.

    This module's score is the running maximum of theirs:

        ``s(x, y) = M_{o(y)}``,   ``M_k = max(m_1, ..., m_k)``,

    and the set at threshold ``q`` is ``C_q(x) = S_{k(q)}`` with ``k(q) = max{k : M_k <= q}``
    (``q`` widened by the tolerance of :mod:`svbop.baselines`: ``4 K 2**-52 max(1, |q|)``); when
    ``k(q) = 0`` (even the top class alone has mass above ``q``) the set is empty, and
    ``empty="top1"`` (default) makes it ``S_1``, the top class.

Why this variant, and where it departs from the authors' code
    * *Running maximum.*  ``m_k`` is not monotone in ``k`` for ``2 <= c < K``: the smallest
      cover of ``A_{k+1}`` can drop classes the cover of ``A_k`` needed (the tests show a tree
      where ``m_4 = 0.911 > m_5 = 0.875``).  The authors stop at the first ``k`` with ``m_k > q``
      and calibrate on ``m_{o(y)}``; then a label with ``m_{o(y)} <= q`` but some
      ``m_j > q`` for ``j < o(y)`` falls outside the set, so ``m_{o(y)} <= q`` does not imply
      coverage.  With ``M`` it does (proof below); ``M = m`` wherever ``m`` is monotone, in
      particular for ``c = 1`` (``S_k`` is then the lowest common ancestor of ``A_k``: the
      sets are nested) and ``c >= K``.
    * *The last set within the level, not the first beyond it.*  The authors return ``S_k``
      for the first ``k`` with ``m_k > q`` (for ``c = K`` that is APS that keeps the class which
      crosses the level); here ``S_{k(q)}`` with ``M_{k(q)} <= q``, the convention of
      :class:`svbop.ConformalSetPredictor` (``{c : s(x, c) <= q}``), so that **``max_nodes >= K``
      gives exactly ``ConformalSetPredictor(score="aps")``'s scores and sets** (for
      ``max_nodes >= K``, ``S_k = A_k`` and ``M_k`` is the cumulative mass: the APS score,
      computed here with the same operations in the same order).
    * *Deterministic, no penalty.*  The authors' experiment ``npsr`` (``svp/tests/csvphc/
      experiments/npsr.yaml``: ``csvphf``, ``rand: false``, ``lm: 0.0``, ``c`` in 1, 2, 3).
      Not implemented: their randomised (``apsr``) and penalised (``rapsr``: ``lambda``,
      ``k_reg`` tuned) versions, and ``crsvphf`` (``nmpsr``/``ampsr``: one node, climbing
      from the top class's leaf, a different family).
    * *Exact covers.*  The authors' code recomputes the cover only when the new class is not in
      the current one, and keeps the old cover when the new one has the same size (which then
      does not contain the new class); here ``S_k`` is always the smallest cover of ``A_k``.

Coverage (proof)
    For any ``q``: if ``s(x, y) <= q`` then ``M_{o(y)} <= q``, so ``k(q) >= o(y)``: ``y`` is
    in ``A_{k(q)}``, hence in ``S_{k(q)} = C_q(x)`` (a cover contains ``A_k``; ``top1`` only
    adds classes).  Let ``(x_i, y_i)``, ``i = 1..n+1``, be exchangeable (``n`` calibration
    rows and a test row), ``s_i = s(x_i, y_i)`` (a fixed function: deterministic, the same tree,
    ``c`` and tie rule for every row), ``k = ceil((n + 1)(1 - epsilon))`` and ``q`` the ``k``-th
    smallest of ``s_1..s_n`` (``inf`` when ``k > n``: every class).  By exchangeability the rank
    of ``s_{n+1}`` among ``s_1..s_{n+1}`` is uniform on ``1..n+1`` (ties broken at random), and
    ``s_{n+1} <= q`` whenever that rank is at most ``k``, so
    ``P(y_{n+1} in C_q(x_{n+1})) >= P(s_{n+1} <= q) >= k / (n + 1) >= 1 - epsilon``.  The
    argument is exact for the computed floats: the calibration and the test rows run the same
    operations, and the tolerance only adds classes.

    Nestedness: ``s(x, y) <= q`` is equivalent to ``y in A_{k(q)}(x)``, and ``A_{k(q)}`` is
    nested in ``q``.  For ``c >= K``, ``C_q = A_{k(q)}``: ``y in C_q`` iff ``s(x, y) <= q``.
    For ``c < K`` the set ``C_q(x)`` also holds the other classes of its nodes, whose scores
    exceed ``q``: ``s(x, y) <= q`` implies ``y in C_q(x)``, not conversely (those classes only
    add coverage).  The sets ``C_q(x)`` are nested in ``q`` for ``c = 1`` (ancestors of the top
    class) and ``c >= K``, not in general for ``2 <= c < K`` (smallest covers are not nested).

Algorithm (exact, per row)
    A cover can be taken with disjoint nodes, so ``S_k`` is a tree knapsack: for every node
    ``v`` and ``j <= c``, ``f_v(j)`` is the best (fewest classes, then largest mass) cover of
    ``A_k`` within ``v`` by at most ``j`` nodes: ``v`` itself, or a ``(min, +)`` convolution of
    the tables of ``v``'s children that hold classes of ``A_k`` (at most ``c`` of them: with
    more, only ``v`` itself fits).  Adding the next class changes only the tables on its path
    to the root, and the update stops at the first node whose table (and flag) did not change.
    Each step costs ``O(depth * c^3)`` at most (``O(depth)`` when the class falls in a node
    that already covers it); a row needs ``o(y)`` steps to calibrate and ``k(q) + 1`` to
    predict (the last undone), plus a sort of the row.  Rows run in compiled code (numba),
    blocks of rows in threads.  The chosen nodes are returned as the fewest nodes whose union
    is the set (:func:`svbop.hierarchical.canonical_nodes`), at most ``max_nodes``.

    Ties beyond size and mass (equal sizes and equal float masses: only with equal or zero
    probabilities) go to the cover found first by the programme (a node itself before a union
    of the same classes below it; in a convolution, the first split of the budget found).
"""

from __future__ import annotations


import numpy as np
from numba import njit

from ._common import _epsilon, _normalised_chunks, _order_statistic, _with_tolerance
from .._kernels import run_blocks
from .._prefix import DEFAULT_CHUNK_BYTES, as_score_matrix
from ..datasets.base import Hierarchy
from ..hierarchical import _layout, _ranked_members, canonical_nodes
from ..metrics import check_labels
from ..sets import SetPredictions

__all__ = ["hierarchical_scores", "hierarchical_conformal_sets", "HierarchicalConformalScore"]

_JIT = {"nogil": True, "cache": True}
_INF = np.int64(1) << 60  # "no cover": sizes are at most K


# --- boundary checks (the same rules as svbop.baselines' conformal scores) ----------------------








def _thresholds(q, n: int) -> np.ndarray:
    """``q`` (a number, or one per row) as ``n`` float64 thresholds; NaN refused."""
    if isinstance(q, (bool, np.bool_)):
        raise ValueError(f"q must be a number or one number per row (inf keeps every class), got {q!r}")
    try:
        arr = np.asarray(q, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"q must be a number or one number per row (inf keeps every class), got {q!r}") from None
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    elif arr.shape != (n,):
        raise ValueError(f"q must be a number or one per row of P: shape ({n},), got shape {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError(f"q must not be NaN (row {int(np.flatnonzero(np.isnan(arr))[0])})")
    return arr


def _max_nodes(max_nodes) -> int:
    if isinstance(max_nodes, (bool, np.bool_)) or not isinstance(max_nodes, (int, np.integer)) or max_nodes < 1:
        raise ValueError(f"max_nodes must be an integer >= 1, got {max_nodes!r}")
    return int(max_nodes)


def _check(P, hierarchy, max_nodes, name: str):
    c = _max_nodes(max_nodes)
    if not isinstance(hierarchy, Hierarchy):
        raise ValueError(f"hierarchy must be a svbop.datasets.Hierarchy, got {type(hierarchy).__name__}")
    P = as_score_matrix(P, name)
    if hierarchy.n_classes != P.shape[1]:
        raise ValueError(
            f"hierarchy has {hierarchy.n_classes} leaves (classes) but {name} has {P.shape[1]} columns;"
            f" the leaves must be {name}'s classes"
        )
    return P, c




def _tree(hierarchy: Hierarchy):
    post, size, start, dfs_leaf = _layout(hierarchy)
    indptr, children = hierarchy.children_csr()
    return post, size, start, dfs_leaf, hierarchy.parent.astype(np.int64), indptr, children, hierarchy.root


# --- the dynamic programme ----------------------------------------------------------------------


@njit(**_JIT)
def _better(s1, m1, s2, m2):
    return s1 < s2 or (s1 == s2 and m1 > m2)


@njit(**_JIT)
def _recompute(u, c, size, nm, fs, fm, rel_head, rel_next, rcount, acc_s, acc_m, new_s, new_m):
    """Table of node ``u`` from its children that hold classes of ``A_k``."""
    fs[u, 0] = _INF
    fm[u, 0] = 0.0
    for j in range(1, c + 1):
        fs[u, j] = size[u]
        fm[u, j] = nm[u]
    if rcount[u] > c:  # more children to cover than nodes: only u itself
        return
    ch = rel_head[u]
    for j in range(c + 1):
        acc_s[j] = fs[ch, j]
        acc_m[j] = fm[ch, j]
    ch = rel_next[ch]
    while ch >= 0:
        for j in range(c + 1):
            new_s[j] = _INF
            new_m[j] = 0.0
        for j1 in range(1, c):
            if acc_s[j1] >= _INF:
                continue
            for j2 in range(1, c + 1 - j1):
                if fs[ch, j2] >= _INF:
                    continue
                s = acc_s[j1] + fs[ch, j2]
                m = acc_m[j1] + fm[ch, j2]
                j = j1 + j2
                if _better(s, m, new_s[j], new_m[j]):
                    new_s[j] = s
                    new_m[j] = m
        for j in range(c + 1):
            acc_s[j] = new_s[j]
            acc_m[j] = new_m[j]
        ch = rel_next[ch]
    for j in range(1, c + 1):
        if acc_s[j] < size[u]:  # a union below u with fewer classes than u (else u itself)
            fs[u, j] = acc_s[j]
            fm[u, j] = acc_m[j]


@njit(**_JIT)
def _add(leaf, c, parent, size, nm, marked, fs, fm, rel_head, rel_next, rcount, touched, n_touched,
         acc_s, acc_m, new_s, new_m, sv_node, sv_s, sv_m, sv_head, sv_cnt, sv_mark):
    """Add ``leaf`` to ``A``; save what changes (for :func:`_undo`).  Returns ``(n_saved,
    n_touched)``."""
    c1 = c + 1
    n_sv = 0
    # the leaf
    sv_node[n_sv] = leaf
    for j in range(c1):
        sv_s[n_sv, j] = fs[leaf, j]
        sv_m[n_sv, j] = fm[leaf, j]
    sv_head[n_sv] = rel_head[leaf]
    sv_cnt[n_sv] = rcount[leaf]
    sv_mark[n_sv] = marked[leaf]
    n_sv += 1
    marked[leaf] = True
    touched[n_touched] = leaf
    n_touched += 1
    fs[leaf, 0] = _INF
    fm[leaf, 0] = 0.0
    for j in range(1, c1):
        fs[leaf, j] = 1
        fm[leaf, j] = nm[leaf]
    child = leaf
    newly = True
    u = parent[leaf]
    while u >= 0:
        sv_node[n_sv] = u
        for j in range(c1):
            sv_s[n_sv, j] = fs[u, j]
            sv_m[n_sv, j] = fm[u, j]
        sv_head[n_sv] = rel_head[u]
        sv_cnt[n_sv] = rcount[u]
        sv_mark[n_sv] = marked[u]
        n_sv += 1
        if newly:  # child now holds classes of A: one more child of u to cover
            rel_next[child] = rel_head[u]
            rel_head[u] = child
            rcount[u] += 1
        was = marked[u]
        if not was:
            marked[u] = True
            touched[n_touched] = u
            n_touched += 1
        _recompute(u, c, size, nm, fs, fm, rel_head, rel_next, rcount, acc_s, acc_m, new_s, new_m)
        if was:
            same = True
            for j in range(c1):
                if fs[u, j] != sv_s[n_sv - 1, j] or fm[u, j] != sv_m[n_sv - 1, j]:
                    same = False
                    break
            if same:  # nothing above u changes
                break
        newly = not was
        child = u
        u = parent[u]
    return n_sv, n_touched


@njit(**_JIT)
def _undo(n_sv, c, fs, fm, rel_head, rcount, marked, sv_node, sv_s, sv_m, sv_head, sv_cnt, sv_mark):
    for t in range(n_sv - 1, -1, -1):
        v = sv_node[t]
        for j in range(c + 1):
            fs[v, j] = sv_s[t, j]
            fm[v, j] = sv_m[t, j]
        rel_head[v] = sv_head[t]
        rcount[v] = sv_cnt[t]
        marked[v] = sv_mark[t]


@njit(**_JIT)
def _decode(root, c, K, size, fs, fm, marked, rel_head, rel_next, out, stack_v, stack_j, pre_s, pre_m, arg, chl):
    """Nodes of the root's best cover with at most ``c`` nodes, into ``out``; returns their number."""
    n_out = 0
    top = 0
    stack_v[0] = root
    stack_j[0] = c
    while top >= 0:
        v = stack_v[top]
        j = stack_j[top]
        top -= 1
        if not marked[v]:
            continue
        if v < K or fs[v, j] == size[v]:
            out[n_out] = v
            n_out += 1
            continue
        # redo v's convolution (the same operations as _recompute) to find the split of j
        r = 0
        ch = rel_head[v]
        while ch >= 0:
            chl[r] = ch
            r += 1
            ch = rel_next[ch]
        for jj in range(c + 1):
            pre_s[0, jj] = fs[chl[0], jj]
            pre_m[0, jj] = fm[chl[0], jj]
        for t in range(1, r):
            ch = chl[t]
            for jj in range(c + 1):
                pre_s[t, jj] = _INF
                pre_m[t, jj] = 0.0
                arg[t, jj] = 0
            for j1 in range(1, c):
                if pre_s[t - 1, j1] >= _INF:
                    continue
                for j2 in range(1, c + 1 - j1):
                    if fs[ch, j2] >= _INF:
                        continue
                    s = pre_s[t - 1, j1] + fs[ch, j2]
                    m = pre_m[t - 1, j1] + fm[ch, j2]
                    jj = j1 + j2
                    if _better(s, m, pre_s[t, jj], pre_m[t, jj]):
                        pre_s[t, jj] = s
                        pre_m[t, jj] = m
                        arg[t, jj] = j2
        jj = j
        for t in range(r - 1, 0, -1):
            j2 = arg[t, jj]
            top += 1
            stack_v[top] = chl[t]
            stack_j[top] = j2
            jj -= j2
        top += 1
        stack_v[top] = chl[0]
        stack_j[top] = jj
    return n_out


@njit(**_JIT)
def _rows(Xn, target, q, predict, top1, c, post, parent, indptr, children, size, start, dfs_leaf, root, K,
          out_score, out_cls, out_size, out_nodes, out_nn):
    """Calibration (``predict=False``): ``out_score[i] = M_{o(y_i)}`` with ``y_i = target[i]``.
    Prediction: the classes of ``S_{k(q_i)}`` (ranking order) and its nodes, ``q_i = q[i]``."""
    n_nodes = post.size
    c1 = c + 1
    nm = np.empty(n_nodes)
    marked = np.zeros(n_nodes, np.bool_)
    fs = np.empty((n_nodes, c1), np.int64)
    fm = np.empty((n_nodes, c1))
    rel_head = np.full(n_nodes, -1, np.int64)
    rel_next = np.full(n_nodes, -1, np.int64)
    rcount = np.zeros(n_nodes, np.int64)
    touched = np.empty(n_nodes, np.int64)
    acc_s = np.empty(c1, np.int64)
    acc_m = np.empty(c1)
    new_s = np.empty(c1, np.int64)
    new_m = np.empty(c1)
    sv_node = np.empty(n_nodes, np.int64)
    sv_s = np.empty((n_nodes, c1), np.int64)
    sv_m = np.empty((n_nodes, c1))
    sv_head = np.empty(n_nodes, np.int64)
    sv_cnt = np.empty(n_nodes, np.int64)
    sv_mark = np.empty(n_nodes, np.bool_)
    stack_v = np.empty(n_nodes + 1, np.int64)
    stack_j = np.empty(n_nodes + 1, np.int64)
    pre_s = np.empty((c1, c1), np.int64)
    pre_m = np.empty((c1, c1))
    arg = np.zeros((c1, c1), np.int64)
    chl = np.empty(c1, np.int64)
    nodes = np.empty(c1, np.int64)
    inset = np.zeros(K, np.bool_)
    for i in range(Xn.shape[0]):
        p = Xn[i]
        order = np.argsort(-p, kind="mergesort")  # decreasing, ties by class index
        for t in range(n_nodes):
            v = post[t]
            if v < K:
                nm[v] = p[v]
            else:
                a = 0.0
                for e in range(indptr[v], indptr[v + 1]):
                    a += nm[children[e]]
                nm[v] = a
        n_touched = 0
        M = -np.inf
        if not predict:
            y = target[i]
            for k in range(K):
                n_sv, n_touched = _add(order[k], c, parent, size, nm, marked, fs, fm, rel_head, rel_next, rcount,
                                       touched, n_touched, acc_s, acc_m, new_s, new_m, sv_node, sv_s, sv_m,
                                       sv_head, sv_cnt, sv_mark)
                M = max(M, fm[root, c])
                if order[k] == y or fs[root, c] == K:  # the whole tree: every later cover is too
                    break
            out_score[i] = M
        elif q[i] == np.inf:  # every class: the root
            nodes[0] = root
            nn = 1
            out_nodes[i, 0] = root
            out_nn[i] = 1
            for r in range(K):
                out_cls[i, r] = order[r]
            out_size[i] = K
        else:
            kq = 0
            for k in range(K):
                n_sv, n_touched = _add(order[k], c, parent, size, nm, marked, fs, fm, rel_head, rel_next, rcount,
                                       touched, n_touched, acc_s, acc_m, new_s, new_m, sv_node, sv_s, sv_m,
                                       sv_head, sv_cnt, sv_mark)
                M = max(M, fm[root, c])
                if M > q[i]:
                    if k > 0 or not top1:
                        _undo(n_sv, c, fs, fm, rel_head, rcount, marked, sv_node, sv_s, sv_m, sv_head, sv_cnt,
                              sv_mark)
                    else:
                        kq = 1  # empty -> S_1, the top class
                    break
                kq = k + 1
                if fs[root, c] == K:
                    kq = K
                    break
            nn = 0
            if kq > 0:
                nn = _decode(root, c, K, size, fs, fm, marked, rel_head, rel_next, nodes, stack_v, stack_j, pre_s,
                             pre_m, arg, chl)
            for t in range(nn):
                out_nodes[i, t] = nodes[t]
            out_nn[i] = nn
            out_size[i] = _ranked_members(nodes, nn, start, size, dfs_leaf, order, inset, out_cls[i], K)
        # reset the nodes this row marked
        for t in range(n_touched):
            v = touched[t]
            marked[v] = False
            rel_head[v] = -1
            rel_next[v] = -1
            rcount[v] = 0


# --- the unrestricted case (max_nodes >= K): APS, as svbop.baselines computes it ----------------


def _aps_scores(Xn: np.ndarray, y: np.ndarray) -> np.ndarray:
    V = -np.sort(-Xn, axis=1)
    cum = np.cumsum(V, axis=1)
    t = Xn[np.arange(y.size), y]
    cls = np.arange(Xn.shape[1])
    pos = (Xn > t[:, None]).sum(axis=1) + ((Xn == t[:, None]) & (cls < y[:, None])).sum(axis=1)
    return cum[np.arange(y.size), pos]


def _aps_sets(Xn: np.ndarray, q: np.ndarray, top1: bool):
    order = np.argsort(-Xn, axis=1, kind="stable")
    cum = np.cumsum(np.take_along_axis(Xn, order, axis=1), axis=1)
    size = (cum <= q[:, None]).sum(axis=1)
    if top1:
        size = np.maximum(size, 1)
    keep = np.arange(Xn.shape[1]) < size[:, None]
    return order[keep], size


# --- public functions ---------------------------------------------------------------------------


def _block(n: int, K: int, c: int, chunk_bytes: int) -> int:
    return max(1, min(max(n, 1), int(chunk_bytes) // (8 * (K + c + 1))))


def hierarchical_scores(
    P_cal, y_cal, hierarchy: Hierarchy, max_nodes: int, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    n_jobs: int | None = None,
) -> np.ndarray:
    """Conformity score ``s(x_i, y_i) = M_{o(y_i)}`` of every calibration row.

    ``M_k`` is the running maximum of the masses of the smallest covers, by at most
    ``max_nodes`` nodes, of the ``k`` most probable classes (see :mod:`svbop.conformal.hierarchical`).
    ``s(x, y) <= q`` iff ``y`` is among the classes of rank at most ``k(q)``, all of which
    :func:`hierarchical_conformal_sets` at ``q`` returns (with the other classes of its nodes).
    For ``max_nodes >= K`` it is the APS score of :class:`svbop.ConformalSetPredictor` (bit for
    bit), and the sets are exactly ``{y : s(x, y) <= q}``.

    Parameters
    ----------
    P_cal : array-like of shape (n, K)
        Probabilities (or non-negative scores proportional to them per row).
    y_cal : array-like of int, shape (n,)
        Labels in ``0 .. K - 1``.
    hierarchy : svbop.datasets.Hierarchy
        A tree whose leaves are the ``K`` columns.
    max_nodes : int, >= 1
        The representation complexity ``c``.
    chunk_bytes : int
        Memory bound of a block of rows.
    n_jobs : int or None
        Threads working on blocks of rows (``None``/1: one; -1: all cores).

    Returns
    -------
    ndarray of float64, shape (n,)
    """
    P, c = _check(P_cal, hierarchy, max_nodes, "P_cal")
    y = check_labels(y_cal, P.shape, "y_cal")
    n, K = P.shape
    out = np.empty(n)
    if c >= K:
        for row0, Xn in _normalised_chunks(P, "P_cal", chunk_bytes):
            out[row0 : row0 + Xn.shape[0]] = _aps_scores(Xn, y[row0 : row0 + Xn.shape[0]])
        return out
    post, size, start, dfs_leaf, parent, indptr, children, root = _tree(hierarchy)
    dummy_i = np.empty((1, 1), np.int64)
    dummy_n = np.empty(1, np.int64)
    dummy_q = np.empty(1)

    def task(lo, hi):
        for row0, Xn in _normalised_chunks(P[lo:hi], "P_cal", chunk_bytes, lo):
            a, b = lo + row0, lo + row0 + Xn.shape[0]
            _rows(Xn, y[a:b], dummy_q, False, False, c, post, parent, indptr, children, size, start, dfs_leaf, root, K,
                  out[a:b], dummy_i, dummy_n, dummy_i, dummy_n)

    run_blocks(task, n, _block(n, K, c, chunk_bytes), n_jobs)
    return out


def hierarchical_conformal_sets(
    P, q: float, hierarchy: Hierarchy, max_nodes: int, *, empty: str = "top1", return_nodes: bool = False,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES, n_jobs: int | None = None,
):
    """The sets ``C_q(x) = S_{k(q)}``: smallest covers, by at most ``max_nodes`` nodes, of the
    most probable classes whose score is at most ``q``.

    Parameters
    ----------
    P : array-like of shape (n, K)
    q : float or array-like of shape (n,)
        Threshold on :func:`hierarchical_scores` (``inf``: every class), compared with the
        tolerance ``4 K 2**-52 max(1, |q|)`` as :class:`svbop.ConformalSetPredictor` does; one
        per row for thresholds that differ between rows (e.g. one per group of rows).
    hierarchy : svbop.datasets.Hierarchy
    max_nodes : int, >= 1
    empty : {"top1", "keep"}
        When even the top class alone exceeds ``q``: the top class (default) or the empty set.
    return_nodes : bool, default False
        Also return each set's nodes: the fewest nodes whose union it is (at most ``max_nodes``),
        in depth-first leaf order (``nodes.n_classes`` is ``hierarchy.n_nodes``).
    chunk_bytes, n_jobs
        As :func:`hierarchical_scores`.

    Returns
    -------
    sets : SetPredictions
        Classes in decreasing probability (ties by class index).
    nodes : SetPredictions, only with ``return_nodes=True``
    """
    P, c = _check(P, hierarchy, max_nodes, "P")
    if empty not in ("top1", "keep"):
        raise ValueError(f"empty must be 'top1' or 'keep', got {empty!r}")
    n, K = P.shape
    qt = _with_tolerance(_thresholds(q, n), K)
    top1 = empty == "top1"
    sizes = np.zeros(n, np.int64)
    pieces: dict[int, np.ndarray] = {}
    if c >= K:
        for row0, Xn in _normalised_chunks(P, "P", chunk_bytes):
            cls, sz = _aps_sets(Xn, qt[row0 : row0 + Xn.shape[0]], top1)
            pieces[row0] = cls
            sizes[row0 : row0 + Xn.shape[0]] = sz
    else:
        post, size, start, dfs_leaf, parent, indptr, children, root = _tree(hierarchy)
        nn = np.zeros(n, np.int64)
        dummy_f = np.empty(1)
        dummy_y = np.empty(1, np.int64)

        def task(lo, hi):
            for row0, Xn in _normalised_chunks(P[lo:hi], "P", chunk_bytes, lo):
                a, b = lo + row0, lo + row0 + Xn.shape[0]
                cls = np.empty((b - a, K), np.int64)
                nodes = np.empty((b - a, c + 1), np.int64)
                _rows(Xn, dummy_y, qt[a:b], True, top1, c, post, parent, indptr, children, size, start, dfs_leaf, root,
                      K, dummy_f, cls, sizes[a:b], nodes, nn[a:b])
                pieces[a] = cls[np.arange(K) < sizes[a:b, None]]

        run_blocks(task, n, _block(n, K, c, chunk_bytes), n_jobs)
    order = sorted(pieces)
    indptr_out = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    indices = np.concatenate([pieces[r] for r in order]) if pieces else np.empty(0, np.int64)
    sets = SetPredictions(indices, indptr_out, K)
    if not return_nodes:
        return sets
    return sets, canonical_nodes(sets, hierarchy)


class HierarchicalConformalScore:
    """Split-conformal sets that are unions of at most ``max_nodes`` nodes of ``hierarchy``.

    ``fit_quantile`` calibrates ``q``, the ``ceil((n+1)(1-epsilon))``-th smallest of
    :func:`hierarchical_scores` (``inf`` when that exceeds ``n``: every class); ``predict``
    returns :func:`hierarchical_conformal_sets` at ``q``.  Coverage at least ``1 - epsilon``
    for exchangeable data (proof in :mod:`svbop.conformal.hierarchical`).

    Parameters
    ----------
    hierarchy : svbop.datasets.Hierarchy
    max_nodes : int, >= 1
        Representation complexity; ``>= K`` gives APS (``ConformalSetPredictor(score="aps")``).
    empty : {"top1", "keep"}

    Attributes
    ----------
    quantile_ : float
    n_classes_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from svbop.datasets import Hierarchy
    >>> from svbop.conformal.hierarchical import HierarchicalConformalScore
    >>> h = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), n_classes=4)  # root 6 > {4: 0, 1}, {5: 2, 3}
    >>> rng = np.random.default_rng(0)
    >>> P = rng.dirichlet(np.ones(4), size=300); y = np.array([rng.choice(4, p=p) for p in P])
    >>> hc = HierarchicalConformalScore(h, max_nodes=1).fit_quantile(P[:200], y[:200], 0.1)
    >>> sets, nodes = hc.predict(P[200:], return_nodes=True)
    >>> max(len(v) for v in nodes)
    1
    """

    def __init__(self, hierarchy: Hierarchy, max_nodes: int, *, empty: str = "top1") -> None:
        if not isinstance(hierarchy, Hierarchy):
            raise ValueError(f"hierarchy must be a svbop.datasets.Hierarchy, got {type(hierarchy).__name__}")
        self.max_nodes = _max_nodes(max_nodes)
        if empty not in ("top1", "keep"):
            raise ValueError(f"empty must be 'top1' or 'keep', got {empty!r}")
        self.hierarchy = hierarchy
        self.empty = empty

    def scores(self, P_cal, y_cal, **kw) -> np.ndarray:
        """:func:`hierarchical_scores` with this object's hierarchy and ``max_nodes``."""
        return hierarchical_scores(P_cal, y_cal, self.hierarchy, self.max_nodes, **kw)

    def fit_quantile(self, P_cal, y_cal, epsilon: float, **kw) -> "HierarchicalConformalScore":
        """Calibrate ``quantile_`` on held-out ``P_cal`` (n, K) and labels ``y_cal`` (n,)."""
        eps = _epsilon(epsilon)
        s = self.scores(P_cal, y_cal, **kw)
        if s.size == 0:
            raise ValueError("P_cal has no rows: the calibration set is empty")
        self.quantile_ = _order_statistic(s, eps)
        self.n_classes_ = self.hierarchy.n_classes
        return self

    def predict(self, P, *, return_nodes: bool = False, **kw):
        """:func:`hierarchical_conformal_sets` at ``quantile_``."""
        if not hasattr(self, "quantile_"):
            raise ValueError("HierarchicalConformalScore is not fitted: call fit_quantile(P_cal, y_cal, epsilon) first")
        return hierarchical_conformal_sets(
            P, self.quantile_, self.hierarchy, self.max_nodes, empty=self.empty, return_nodes=return_nodes, **kw
        )
