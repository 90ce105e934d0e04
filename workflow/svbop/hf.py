"""SVBOP-HF: Bayes-optimal sets from a probabilistic class tree (the paper's Section 3.3).

A tree model (:class:`svbop.trees.TreeModel`) factorises ``P(c|x)`` along the path from the root
to the leaf of class ``c``.  SVBOP-HF finds the classes in decreasing probability without scoring
all of them: an A*-style best-first search keeps a priority queue of nodes keyed by their path
probability ``P(v|x)``; a popped leaf is the next class for Algorithm 1, a popped internal node
pushes its children with ``P(v|x) P(child|v,x)`` (Algorithms 6 and 7).  Since a child's
probability never exceeds its parent's, leaves come out in exactly decreasing order, so the sets
are exactly those of Algorithm 1 on the tree's full distribution -- only the parts of the tree
that can matter are visited.

* :func:`predict_sets_hf` runs the search for many rows in compiled code (:mod:`svbop._kernels`),
  in threads, with Algorithm 1 fused in; it is the one to use.
* :class:`HFProvider` is the paper's ``initPrediction`` / ``getNextClass`` pair in plain Python
  (a ``heapq``), for :func:`svbop.svbop` and for reading.

Probabilities are handled as logarithms (deep trees underflow otherwise).  Ties: on equal path
probability internal nodes are expanded first and leaves come out by increasing class id, the
order :func:`svbop.predict_sets` uses, so the two agree even on exactly tied classes.
"""

from __future__ import annotations

import heapq
import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from . import _kernels
from ._memory import file_mapped, release_file_pages
from .linear import _as_sorted_csr
from .search import TIE_RTOL, utility_for
from .sets import SetPredictions
from .trees import TreeModel
from .utilities import Utility

__all__ = ["HFProvider", "TreeSearchLayout", "enumerate_leaves", "path_log_proba", "predict_sets_hf"]

logger = logging.getLogger(__name__)

#: Classes kept per row in the first pass; rows with larger sets are searched again.
_FIRST_CAP = 64
#: A node whose weighted children have weights on at least this share of all (feature id, child) pairs
#: keeps them as a block over every feature id (``NODE_DIRECT``: one read per feature of x, no search);
#: the block costs 8 bytes a pair, so at most 128 bytes a weight at 1/16.  It pays at the top of a
#: 2-means tree, which every row expands.  Measured in one run (synthetic LSHTC1-shaped problem, 2-means
#: tree, CPU medians of 5, with the hash-table layout of issue 27): 1/8 -> 1/16 took HF from 0.103 to
#: 0.088 ms/row; 1/32 gained nothing more.
_DIRECT_MIN = 0.0625
#: The blocks over every feature id may add at most this share of the model's CSR bytes to the layout,
#: given to the shallowest nodes first (every row expands the root; fewer rows each level down), then the
#: densest: at K = 10^6 with 10^7 feature ids a block costs 80 MB a weighted child.
_DIRECT_BUDGET = 0.25
#: The layout may hold at most this many times the model's CSR bytes: what its entries and blocks leave
#: of it goes to rank directories (a bit per feature id and a count per 64, 0.19 bytes a feature id),
#: given to the shallowest nodes first: they turn a node's binary searches into a bit test and a popcount.
_LAYOUT_MAX = 1.45
#: A node with two or more weighted children that have weights on at least this share of its (feature,
#: child) pairs keeps them as a dense block (``NODE_DENSE``): 4 + 8 x children bytes a feature against
#: 13 bytes a weight in the sparse form, so at 3/4 the block is at most 1.03 times the sparse form.
_DENSE_MIN = 0.75
#: A node with at most this many times the row's non-zeros (entries: weights, or features of a dense
#: block) reads its features from a dense copy of the row; a larger one binary-searches the row's features.
_SCAN_MAX = 4
NODE_SPARSE, NODE_DENSE, NODE_DIRECT = _kernels.NODE_SPARSE, _kernels.NODE_DENSE, _kernels.NODE_DIRECT
#: Rows per task given to a thread.
_ROWS_PER_TASK = 256
#: :func:`enumerate_leaves` searches rows with more classes than its first buffer again, in batches whose
#: buffers hold at most this many classes (one row at a time past it): 64 MB of ids and log-probabilities.
_LONG_ENTRIES = 1 << 22


def _smallest_int(top: int, signed: bool = False):
    """The smallest integer dtype that holds ``0..top``."""
    kinds = (np.int32, np.int64) if signed else (np.uint8, np.uint16, np.uint32, np.uint64)
    return next(t for t in kinds if top <= np.iinfo(t).max)


@dataclass(frozen=True)
class TreeSearchLayout:
    """A tree model rearranged for the search: each node's children weights grouped by feature.

    Children with no weight at all (the second child of a binary node, whose score is ``0 + b``:
    :func:`svbop.trees.train_tree` trains one logistic model there) cost nothing: internal node
    ``v``'s *weighted* children are ``active[aptr[v]:aptr[v+1]]`` (their positions among ``v``'s
    children), and every weight below is stored against a weighted child's index ``a`` in that list.

    Every internal node keeps its weighted children's weights in one of three forms (``nmode[v]``):

    ``eptr[v] = (start, end)`` bounds node ``v``'s entries (empty for a node kept over every feature id):

    * ``NODE_SPARSE``: one entry per weight, ``sfeat[e]`` (feature id, int32 where the ids fit),
      ``schild[e]`` (the weighted child ``a``, in the smallest unsigned type that holds it) and ``sval[e]``,
      for ``e`` in ``start:end``, sorted by feature, then child: 13 bytes a weight (with one
      byte for the child) against the model's CSR 12.  Scoring the children looks each feature of ``x``
      up by binary search in the node's sorted features (or, for a node with few entries, reads ``x``'s
      dense copy at each of them).
    * ``NODE_DENSE`` (two or more weighted children with weights on at least ``_DENSE_MIN`` of the
      (feature, child) pairs): ``dfeat[start:end]`` the node's features (sorted) and
      ``dval[dptr[v] + f * n_weighted + a]`` the weight of child ``a`` on its ``f``-th feature (zeros
      included): one contiguous read per feature of ``x`` found.
    * ``NODE_DIRECT`` (weights on at least ``_DIRECT_MIN`` of all (feature id, child) pairs: the top of
      a 2-means tree): ``vval[vptr[v] + j * n_weighted + a]`` over every feature id ``j``: one read per
      feature of ``x`` and no search.

    A dense node, or a sparse node with one entry a feature, may also have a rank directory
    (``rptr[v] >= 0``): ``rbits[rptr[v] + w]`` has bit ``j & 63`` set for each of its features ``j`` in word
    ``w = j >> 6``, and ``rrank[rptr[v] + w]`` counts its features in the words before, so the position of
    feature ``j`` among the node's features is a bit test and a popcount (0.19 bytes a feature id, a node).

    The layout's bytes follow the model's weights, not its feature ids: the entries take about 1.1 times
    the model's CSR bytes for a model whose nodes are sparse; the blocks over every feature id may add at
    most ``_DIRECT_BUDGET`` (1/4) of them; rank directories go to the shallowest nodes (which the most rows
    expand) only while :attr:`nbytes` stays within ``_LAYOUT_MAX`` (1.45) times the CSR bytes.
    """

    child_ptr: np.ndarray
    children: np.ndarray
    aptr: np.ndarray
    active: np.ndarray
    nmode: np.ndarray
    eptr: np.ndarray
    sfeat: np.ndarray
    schild: np.ndarray
    sval: np.ndarray
    dfeat: np.ndarray
    dptr: np.ndarray
    dval: np.ndarray
    vptr: np.ndarray
    vval: np.ndarray
    rptr: np.ndarray
    rbits: np.ndarray
    rrank: np.ndarray
    bias: np.ndarray
    n_classes: int
    n_features: int
    root: int

    @property
    def nbytes(self) -> int:
        """Memory held by the layout's arrays."""
        return sum(getattr(self, f).nbytes for f in self.__dataclass_fields__ if isinstance(getattr(self, f), np.ndarray))

    @classmethod
    def from_model(cls, model: TreeModel) -> TreeSearchLayout:
        if not isinstance(model, TreeModel):
            raise ValueError(f"model must be a svbop.trees.TreeModel, got {type(model).__name__}")
        if not model.complete:
            raise ValueError("the tree model is a part (not every internal node is trained): merge the parts first")
        tree = model.tree
        n_nodes = tree.n_nodes
        child_ptr, children = tree.children_csr()
        child_ptr, children = child_ptr.astype(np.int64), children.astype(np.int64)
        n_children = np.diff(child_ptr)
        position = np.zeros(n_nodes, dtype=np.int64)
        position[children] = np.arange(children.size) - np.repeat(child_ptr[:-1], n_children)
        W = model.W.tocsr()
        if not W.has_sorted_indices:
            W = W.sorted_indices()
        w_indptr = W.indptr.astype(np.int64, copy=False)
        # weighted children, in child order, and each one's index among its parent's weighted children (the
        # root has no parent: its row, which should be empty, is never read)
        weighted = np.diff(w_indptr) > 0
        weighted[tree.parent < 0] = False
        is_active = weighted[children]
        n_weighted = np.bincount(tree.parent[children[is_active]], minlength=n_nodes).astype(np.int64)
        aptr = np.concatenate([[0], np.cumsum(n_weighted)]).astype(np.int64)
        active = position[children[is_active]].astype(np.int64)
        weighted_index = np.zeros(n_nodes, dtype=np.int64)
        weighted_index[children[is_active]] = np.arange(active.size) - np.repeat(aptr[:-1], n_weighted)
        masked = np.repeat(weighted, np.diff(w_indptr)) if not weighted[np.diff(w_indptr) > 0].all() else None
        if masked is not None:  # drop the root's weights from what the children read
            w_indptr = np.concatenate([[0], np.cumsum(np.where(weighted, np.diff(w_indptr), 0))]).astype(np.int64)
            w_indices, w_data = W.indices[masked], W.data[masked]
        else:
            w_indices, w_data = W.indices, W.data
        D = int(model.n_features)
        parents = np.flatnonzero(n_children > 0).astype(np.int64)
        nnz = np.zeros(n_nodes, dtype=np.int64)
        nfeat = np.zeros(n_nodes, dtype=np.int64)
        stamp = np.full(max(D, 1), -1, dtype=np.int64 if n_nodes > np.iinfo(np.int32).max else np.int32)
        # weights mapped from a file (TreeModel.load of an uncompressed model) are read a batch of nodes at a
        # time, and the pages read are let go after each batch: the weights are never resident at once
        batches = _node_batches(parents, child_ptr, children, w_indptr) if file_mapped(w_indices, w_data) else [parents]
        for batch in batches:
            _kernels.count_node_weights(batch, child_ptr, children, w_indptr, w_indices, stamp, nnz, nfeat)
            release_file_pages(w_indices)
        del stamp
        direct = (nnz > 0) & (nnz >= _DIRECT_MIN * D * n_weighted)
        if direct.any():  # within the budget, shallowest nodes first, then the densest
            cand = np.flatnonzero(direct)
            extra = D * n_weighted[cand] * 8.0 - 13.0 * nnz[cand]  # the block's bytes beyond the sparse form's
            order = np.lexsort((-nnz[cand] / (D * n_weighted[cand]), tree.depth()[cand]))
            csr_bytes = W.data.nbytes + W.indices.nbytes + W.indptr.nbytes
            fits = np.cumsum(np.maximum(extra[order], 0)) <= _DIRECT_BUDGET * csr_bytes
            direct[:] = False
            direct[cand[order[fits]]] = True
        dense = ~direct & (n_weighted > 1) & (nnz > 0) & (nnz >= _DENSE_MIN * nfeat * n_weighted)
        nmode = np.where(direct, NODE_DIRECT, np.where(dense, NODE_DENSE, NODE_SPARSE)).astype(np.int8)
        sparse = nmode == NODE_SPARSE
        sptr = np.concatenate([[0], np.cumsum(np.where(sparse, nnz, 0))]).astype(np.int64)
        fptr = np.concatenate([[0], np.cumsum(np.where(dense, nfeat, 0))]).astype(np.int64)
        # eptr[v] = (start, end) of v's entries: sparse entries for a sparse node, features for a dense one
        starts = np.where(sparse, sptr[:-1], fptr[:-1])
        eptr = np.column_stack([starts, np.where(sparse, sptr[1:], np.where(dense, fptr[1:], fptr[:-1]))])
        feat_t = _smallest_int(max(D - 1, 0), signed=True)
        sfeat = np.zeros(int(sptr[-1]), dtype=feat_t)
        schild = np.zeros(int(sptr[-1]), dtype=_smallest_int(max(int(n_weighted.max()) - 1, 0) if n_nodes else 0))
        sval = np.zeros(int(sptr[-1]))
        dfeat = np.zeros(int(fptr[-1]), dtype=feat_t)
        dsize = np.where(dense, nfeat * n_weighted, 0)
        dptr = np.where(dense, np.concatenate([[0], np.cumsum(dsize)[:-1]]), -1).astype(np.int64)
        dval = np.zeros(int(dsize.sum()))
        vsize = np.where(direct, D * n_weighted, 0)
        vptr = np.where(direct, np.concatenate([[0], np.cumsum(vsize)[:-1]]), -1).astype(np.int64)
        vval = np.zeros(int(vsize.sum()))
        for batch in batches:
            _kernels.fill_node_weights(batch, child_ptr, children, weighted_index, n_weighted, w_indptr, w_indices,
                                       w_data, nmode, starts, sfeat, schild, sval, dfeat, dptr, dval, vptr, vval)
            release_file_pages(w_indices, w_data)
        eptr = eptr.astype(np.int64)
        # rank directories, shallowest nodes first (then the largest), within what _LAYOUT_MAX leaves
        words = (D + 63) // 64
        base = sum(a.nbytes for a in (child_ptr, children, aptr, active, nmode, eptr, sfeat, schild, sval, dfeat,
                                       dptr, dval, vptr, vval, model.b)) + 8 * n_nodes
        room = _LAYOUT_MAX * (W.data.nbytes + W.indices.nbytes + W.indptr.nbytes) - base
        eligible = np.flatnonzero((nmode == NODE_DENSE) | (sparse & (nnz > 0) & (nnz == nfeat)))
        fit = int(min(eligible.size, room // max(12 * words, 1))) if room > 0 else 0
        chosen = np.sort(eligible[np.lexsort((-nnz[eligible], tree.depth()[eligible]))[:fit]])
        rptr = np.full(n_nodes, -1, dtype=np.int64)
        rptr[chosen] = np.arange(chosen.size, dtype=np.int64) * words
        rbits = np.zeros(chosen.size * words, dtype=np.uint64)
        rrank = np.zeros(chosen.size * words, dtype=np.int32)
        _kernels.fill_rank_directories(chosen, rptr, eptr, nmode, sfeat, dfeat, words, rbits, rrank)
        return cls(
            child_ptr=child_ptr,
            children=children,
            aptr=aptr,
            active=active,
            nmode=nmode,
            eptr=eptr,
            sfeat=sfeat,
            schild=schild,
            sval=sval,
            dfeat=dfeat,
            dptr=dptr,
            dval=dval,
            vptr=vptr,
            vval=vval,
            rptr=rptr,
            rbits=rbits,
            rrank=rrank,
            bias=np.ascontiguousarray(model.b, dtype=np.float64),
            n_classes=int(tree.n_classes),
            n_features=D,
            root=int(tree.root),
        )


#: Weights read per batch of nodes when the layout is built from weights mapped from a file (about 12 bytes each).
_BATCH_WEIGHTS = 16 << 20


def _node_batches(parents: np.ndarray, child_ptr: np.ndarray, children: np.ndarray, w_indptr: np.ndarray) -> list[np.ndarray]:
    """``parents`` in consecutive groups of about :data:`_BATCH_WEIGHTS` weights of their children's rows."""
    if not parents.size:
        return [parents]
    # every node with children is in parents (ascending), so their groups of children tile ``children``
    per_parent = np.add.reduceat(np.diff(w_indptr)[children], child_ptr[parents])
    cuts = np.searchsorted(np.cumsum(per_parent), np.arange(_BATCH_WEIGHTS, int(per_parent.sum()), _BATCH_WEIGHTS))
    return [b for b in np.split(parents, np.unique(cuts)) if b.size]


def _layout(model: TreeModel) -> TreeSearchLayout:
    """The model's search layout, built once per model object."""
    return _kernels.per_model(model, "_svbop_search_layout", TreeSearchLayout.from_model)


def predict_sets_hf(
    model: TreeModel | TreeSearchLayout,
    X: Any,
    u: Utility | str,
    *,
    tie_rtol: float = TIE_RTOL,
    n_jobs: int | None = None,
    return_stats: bool = False,
) -> SetPredictions | tuple[SetPredictions, dict[str, np.ndarray]]:
    """SVBOP-HF: the Bayes-optimal set of every row under a probabilistic tree.

    Parameters
    ----------
    model : TreeModel or TreeSearchLayout
        A complete (merged) tree model, or its search layout (``TreeSearchLayout.from_model(model)``):
        the layout holds everything the search reads, so at extreme K the model's weights can be
        dropped once it is built (the layout and the weights are each gigabytes at K = 10^6).
    X : array or scipy sparse matrix of shape (n_samples, n_features)
        Features of the rows to predict.
    u : Utility or str
        The set utility.
    tie_rtol : float
        Tie tolerance of Algorithm 1 (as :func:`svbop.predict_sets`).
    n_jobs : int or None
        Threads (each takes blocks of rows); ``None``/1 one, -1 every core.  Results do not
        depend on it.
    return_stats : bool
        Also return per-row search statistics: ``expanded`` (internal nodes whose children were
        scored) and ``pulled`` (classes delivered to Algorithm 1).

    Returns
    -------
    SetPredictions
        Classes in decreasing probability; ``expected_utility`` under the tree's distribution.

    Notes
    -----
    Exact with respect to the tree: the result equals ``predict_sets(model.predict_proba(X), u)``
    (the test suite checks it on trees of several shapes).  With a (1/x)-convex utility the
    search stops at Theorem 2's first decrease, and does not expand a node whose probability
    could not make even one more class acceptable; otherwise it stops when ``max_{s'>s} g(s')`` times
    the total mass 1 cannot reach the best expected utility, in the worst case after all ``K``
    leaves.
    """
    if isinstance(model, TreeSearchLayout):
        lay = model
    elif isinstance(model, TreeModel):
        lay = _layout(model)
    else:
        raise ValueError(f"model must be a TreeModel or a TreeSearchLayout, got {type(model).__name__}")
    u, g, early = utility_for(u, lay.n_classes, tie_rtol, "tree")
    K = lay.n_classes
    X = _as_sorted_csr(X, lay.n_features)
    n = X.shape[0]
    g_suffix = np.maximum.accumulate(g[::-1])[::-1].copy()
    xptr, xind, xval = X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data
    sizes = np.zeros(n, dtype=np.int64)
    value = np.zeros(n)
    expanded = np.zeros(n, dtype=np.int64)
    pulled = np.zeros(n, dtype=np.int64)

    def run(rows: np.ndarray, cap: int) -> np.ndarray:
        cls = np.zeros((rows.size, cap), dtype=np.int64)
        size = np.zeros(rows.size, dtype=np.int64)
        val = np.zeros(rows.size)
        vis = np.zeros(rows.size, dtype=np.int64)
        pul = np.zeros(rows.size, dtype=np.int64)

        def task(lo: int, hi: int) -> None:
            _kernels.hf_search(
                rows[lo:hi], xptr, xind, xval, lay.n_features, lay.child_ptr, lay.children, lay.aptr, lay.active,
                lay.nmode, lay.eptr, lay.sfeat, lay.schild, lay.sval, lay.dfeat, lay.dptr, lay.dval, lay.vptr,
                lay.vval, lay.rptr, lay.rbits, lay.rrank, _SCAN_MAX, lay.bias, K, lay.root, g, g_suffix, early, float(tie_rtol),
                1.0 + 1e-12, cls[lo:hi], size[lo:hi], val[lo:hi], vis[lo:hi], pul[lo:hi],
            )

        _kernels.run_blocks(task, rows.size, _ROWS_PER_TASK, n_jobs)
        sizes[rows], value[rows], expanded[rows], pulled[rows] = size, val, vis, pul
        return cls

    start = time.perf_counter()
    rows = np.arange(n, dtype=np.int64)
    cap = min(_FIRST_CAP, K)
    cls = run(rows, cap)
    long_rows = np.flatnonzero(sizes > cap)
    extra = run(long_rows, int(sizes[long_rows].max())) if long_rows.size else None
    indices, indptr = _kernels.ragged_sets(sizes, cls, long_rows, extra)
    logger.info(
        "SVBOP-HF %s: %d rows in %.3f s, %.1f internal nodes expanded and %.1f classes pulled per row",
        u.label, n, time.perf_counter() - start, expanded.mean() if n else 0.0, pulled.mean() if n else 0.0,
    )
    sets = SetPredictions(indices, indptr, K, value)
    if return_stats:
        return sets, {"expanded": expanded, "pulled": pulled}
    return sets


def enumerate_leaves(
    model: TreeModel | TreeSearchLayout,
    X: Any,
    *,
    p_min=0.0,
    p_below_top=np.inf,
    mass_max=np.inf,
    rank_max=None,
    target=None,
    min_n: int = 1,
    keep: bool = True,
    give_up_rank: int | None = None,
    n_jobs: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The classes of every row in decreasing tree probability, up to a stop: the best-first search
    of :func:`predict_sets_hf` without Algorithm 1, for sets defined by a threshold on a ranked
    score (conformal LAC, APS, RAPS, top-k, ...; :mod:`svbop.conformal`).

    A row stops before its next class once at least ``min_n`` classes are out (and ``target``, when
    given, is among them) and: every class left has probability below ``p_min`` (or below the row's
    top probability minus ``p_below_top``), or the classes out hold more than ``mass_max``, or
    ``rank_max`` are out.  A node's probability bounds every class below it, so the classes left
    out are exactly those the stop says.  Each stop is a scalar or one value per row.

    With ``target``, a row whose target is not out gives up once ``give_up_rank`` classes are out (its target
    rank is then 0).
    ``keep=False``: only each row's first two classes are kept (and, with ``target``, the target's rank,
    log-probability and the mass down to it): what a calibration score needs, in memory bounded by the
    rows whatever the ranks.

    Returns
    -------
    indptr (n + 1,), classes, log_proba (each ``indptr[-1]``), mass (n,)
        Row ``i``'s classes are ``classes[indptr[i]:indptr[i+1]]`` with their ``log P(c|x)``
        (the same search, and the same values, as :func:`predict_sets_hf`); ``mass[i]`` their sum.
        ``keep=False``: ``(counts, first, log_first, mass, target)``, ``first``/``log_first`` of shape
        (n, 2) (``-1``/``-inf`` past a row's count) and ``target`` (n, 3): rank, log-probability, mass.
    """
    lay = model if isinstance(model, TreeSearchLayout) else _layout(model)
    K = lay.n_classes
    X = _as_sorted_csr(X, lay.n_features)
    n = X.shape[0]

    def per_row(value, dtype, name):
        a = np.asarray(value, dtype=dtype)
        if a.ndim and a.shape != (n,):
            raise ValueError(f"{name} has shape {a.shape}: one value, or one per row of X ({n} rows)")
        return np.ascontiguousarray(np.broadcast_to(a, (n,)))

    p_min = per_row(p_min, np.float64, "p_min")
    p_below_top = per_row(p_below_top, np.float64, "p_below_top")
    mass_max = per_row(mass_max, np.float64, "mass_max")
    rank_max = per_row(K if rank_max is None else np.minimum(rank_max, K), np.int64, "rank_max")
    target = per_row(-1 if target is None else target, np.int64, "target")
    xptr, xind, xval = X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data
    counts = np.zeros(n, dtype=np.int64)
    mass = np.zeros(n)
    found = np.zeros((n, 3))
    give_up = K + 1 if give_up_rank is None else int(give_up_rank)

    def run(rows: np.ndarray, cap: int):
        cls = np.full((rows.size, cap), -1, dtype=np.int64)
        logp = np.full((rows.size, cap), -np.inf)
        cnt = np.zeros(rows.size, dtype=np.int64)
        ms = np.zeros(rows.size)
        tg = np.zeros((rows.size, 3))

        def task(lo: int, hi: int) -> None:
            r = rows[lo:hi]
            _kernels.hf_enumerate(
                r, xptr, xind, xval, lay.n_features, lay.child_ptr, lay.children, lay.aptr, lay.active,
                lay.nmode, lay.eptr, lay.sfeat, lay.schild, lay.sval, lay.dfeat, lay.dptr, lay.dval, lay.vptr,
                lay.vval, lay.rptr, lay.rbits, lay.rrank, _SCAN_MAX, lay.bias, K, lay.root, p_min[r], p_below_top[r],
                mass_max[r], rank_max[r], target[r], int(min_n), give_up, cls[lo:hi], logp[lo:hi], cnt[lo:hi],
                ms[lo:hi], tg[lo:hi],
            )

        _kernels.run_blocks(task, rows.size, _ROWS_PER_TASK, n_jobs)
        counts[rows], mass[rows], found[rows] = cnt, ms, tg
        return cls, logp

    rows = np.arange(n, dtype=np.int64)
    if not keep:
        cls, logp = run(rows, min(2, K))
        return counts, cls, logp, mass, found
    cap = min(_FIRST_CAP, K)
    cls, logp = run(rows, cap)
    long_rows = np.flatnonzero(counts > cap)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    classes = np.empty(int(indptr[-1]), dtype=np.int64)
    log_proba = np.empty(int(indptr[-1]))
    short = counts <= cap
    fits = np.arange(cap) < counts[short][:, None]
    at = (indptr[:-1][short][:, None] + np.arange(cap))[fits]
    classes[at], log_proba[at] = cls[short][fits], logp[short][fits]
    del cls, logp
    # the long rows again, in batches of similar length whose buffers stay within _LONG_ENTRIES
    order = long_rows[np.argsort(counts[long_rows], kind="stable")]
    lo = 0
    while lo < order.size:
        width = int(counts[order[lo]])
        hi = lo + 1
        while hi < order.size and (hi - lo + 1) * int(counts[order[hi]]) <= max(_LONG_ENTRIES, width):
            hi += 1
        batch = order[lo:hi]
        c, lp = run(batch, int(counts[batch].max()))
        for j, i in enumerate(batch.tolist()):
            a, b = indptr[i], indptr[i + 1]
            classes[a:b], log_proba[a:b] = c[j, : b - a], lp[j, : b - a]
        lo = hi
    return indptr, classes, log_proba, mass


def path_log_proba(model: TreeModel | TreeSearchLayout, X: Any, labels, *, n_jobs: int | None = None) -> np.ndarray:
    """``log P(labels[i] | x_i)`` of every row: the product along each label's path alone (its ancestors'
    children scored; no search), the value a search over the tree delivers for that class."""
    lay = model if isinstance(model, TreeSearchLayout) else _layout(model)
    X = _as_sorted_csr(X, lay.n_features)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    parent, position = _parents(lay)
    xptr, xind, xval = X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data
    out = np.empty(X.shape[0])

    def task(lo: int, hi: int) -> None:
        _kernels.hf_path_log_proba(
            np.arange(lo, hi, dtype=np.int64), xptr, xind, xval, lay.n_features, lay.child_ptr, lay.children,
            lay.aptr, lay.active, lay.nmode, lay.eptr, lay.sfeat, lay.schild, lay.sval, lay.dfeat, lay.dptr, lay.dval,
            lay.vptr, lay.vval, lay.rptr, lay.rbits, lay.rrank, _SCAN_MAX, lay.bias, parent, position, lay.root,
            labels[lo:hi], out[lo:hi],
        )

    _kernels.run_blocks(task, X.shape[0], _ROWS_PER_TASK, n_jobs)
    return out


def _parents(lay: TreeSearchLayout) -> tuple[np.ndarray, np.ndarray]:
    """Each node's parent and its place among its parent's children (from the layout's child lists)."""
    cached = getattr(lay, "_svbop_parents", None)
    if cached is None:
        n_nodes = lay.child_ptr.size - 1
        counts = np.diff(lay.child_ptr)
        parent = np.full(n_nodes, -1, dtype=np.int64)
        position = np.zeros(n_nodes, dtype=np.int64)
        parent[lay.children] = np.repeat(np.arange(n_nodes, dtype=np.int64), counts)
        position[lay.children] = np.arange(lay.children.size) - np.repeat(lay.child_ptr[:-1], counts)
        cached = (parent, position)
        object.__setattr__(lay, "_svbop_parents", cached)
    return cached


class HFProvider:
    """SVBOP-HF's class provider (Algorithms 6 and 7), a plain-Python reference.

    ``init_prediction(x)`` puts the root in a priority queue; ``get_next_class()`` pops nodes,
    expanding internal ones (scoring their children with the node classifier), until a leaf
    comes out, and returns ``(class, P(class|x))``.  Use with :func:`svbop.svbop`::

        svbop.svbop(HFProvider(model), x, "fbeta:beta=1", K=model.n_classes)

    :func:`predict_sets_hf` does the same for many rows in compiled code.
    """

    def __init__(self, model: TreeModel) -> None:
        self.model = model
        self._layout = _layout(model)
        self._queue: list[tuple[float, int, int]] = []
        self._x: sp.csr_matrix | None = None
        self.expanded = 0

    def init_prediction(self, x: Any) -> None:
        x = _as_sorted_csr(np.asarray(x).reshape(1, -1) if not sp.issparse(x) else x, self._layout.n_features, "x")
        if x.shape[0] != 1:
            raise ValueError(f"init_prediction takes one row, got {x.shape[0]}")
        self._x = x
        self._queue = [(-0.0, -1, self._layout.root)]  # (-log P(v|x), tie key, node)
        self.expanded = 0

    def get_next_class(self) -> tuple[int, float] | None:
        lay = self._layout
        while self._queue:
            neg_logp, _, node = heapq.heappop(self._queue)
            if node < lay.n_classes:
                return node, float(np.exp(-neg_logp))
            self.expanded += 1
            children = lay.children[lay.child_ptr[node]:lay.child_ptr[node + 1]]
            scores = self._x @ self.model.W[children].T
            scores = np.asarray(scores.toarray() if sp.issparse(scores) else scores).ravel() + lay.bias[children]
            shifted = scores - scores.max()
            log_p = (shifted - np.log(np.exp(shifted).sum())) + (-neg_logp)
            for child, lp in zip(children, log_p):
                heapq.heappush(self._queue, (-float(lp), int(child) if child < lay.n_classes else -1, int(child)))
        return None
