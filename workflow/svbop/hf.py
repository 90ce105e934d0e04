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
from .linear import _as_sorted_csr
from .search import TIE_RTOL, utility_for
from .sets import SetPredictions
from .trees import TreeModel
from .utilities import Utility

__all__ = ["HFProvider", "TreeSearchLayout", "predict_sets_hf"]

logger = logging.getLogger(__name__)

#: Classes kept per row in the first pass; rows with larger sets are searched again.
_FIRST_CAP = 64
#: Nodes whose children use more features than this get a hash table (see TreeSearchLayout).
_HASH_MIN = 256
#: Nodes whose weighted children have weights on at least this share of (feature, child) pairs keep them
#: as a dense block (see TreeSearchLayout).
_DENSE_MIN = 0.5
#: Nodes whose weighted children have weights on at least this share of all (feature id, child) pairs
#: keep them as a block over every feature id instead of their sparse form (see TreeSearchLayout).  The
#: block costs 8 bytes a pair, so at most 128 bytes a weight at 1/16, against about 50-75 for the sparse
#: form of a node with one weighted child (1.5-3 hash slots of 16 bytes, feature id and offset, child,
#: value, bitmap): up to about 2.5 times its memory, for a read without a lookup.  Measured in one run
#: (synthetic LSHTC1-shaped problem, 2-means tree, CPU medians of 5, before the bitmaps): 1/8 -> 1/16
#: takes the layout from 460 to 503 MB and HF from 0.103 to 0.088 ms/row; 1/32 gained nothing more.
_DIRECT_MIN = 0.0625
#: What a node's hash slots hold besides the feature id (see TreeSearchLayout).
HASH_POSITION, HASH_VALUE, HASH_POSTINGS = _kernels.HASH_POSITION, _kernels.HASH_VALUE, _kernels.HASH_POSTINGS
#: Sparse nodes with fewer weighted children than this keep where a feature's postings are in its hash slot
#: (their count takes the slot's low 24 bits).
_POSTINGS_MAX = 1 << 24
#: Rows per task given to a thread.
_ROWS_PER_TASK = 256


@dataclass(frozen=True)
class TreeSearchLayout:
    """A tree model rearranged for the search: each node's children weights grouped by feature.

    Children with no weight at all (the second child of a binary node, whose score is ``0 + b``:
    :func:`svbop.trees.train_tree` trains one logistic model there) cost nothing: internal node
    ``v``'s *weighted* children are ``active[aptr[v]:aptr[v+1]]`` (their positions among ``v``'s
    children), and every weight below is stored against a weighted child's index ``a`` in that list.

    ``bfeat[bptr[v]:bptr[v+1]]`` are the features (sorted) used by any child of ``v``; for such a
    feature at position ``f``, ``bchild[bcol[f]:bcol[f+1]]`` are the weighted children with a
    weight on it (in the smallest unsigned type that holds them: a posting costs 9-10 bytes, not
    16) and ``bval`` the weights.  Nodes with more than
    ``_HASH_MIN`` features also get a hash table from feature id to what scoring needs of it
    (``hptr``, ``hbits``, ``htab``: pairs (feature, entry)), so that scoring their children costs one
    lookup per feature of ``x`` instead of a pass over all their features.  The entry
    (``hmode[v]``) is: ``HASH_VALUE`` the weight itself (``htab.view(float64)[slot, 1]``), for a node
    with one weighted child; ``HASH_POSTINGS`` ``bcol[f] << 24 | (bcol[f+1] - bcol[f])``, where its
    postings are (sparse nodes with fewer than ``_POSTINGS_MAX`` weighted children); otherwise
    ``HASH_POSITION`` the position ``f``.  A hit then costs one cache line of the table and one
    run of postings, not a chain of dependent reads.  A node with a table also has a bitmap of its
    features over every feature id (``bmap[mptr[v]:]``, 64 ids a word; ``mptr[v] = -1`` for the
    others), read before probing: a feature of ``x`` the node does not use costs one bit (in a
    block 1/128 the size of the table's) instead of a probe.  Nodes whose weighted children (two or more)
    have weights on at least ``_DENSE_MIN`` of the (feature, child) pairs (unclipped liblinear
    nodes: most) also keep them as a dense block, ``dval[dptr[v] + (f - bptr[v]) * n_weighted + a]``
    (``dptr[v] = -1`` for the others): one contiguous read per feature of ``x``.  Nodes whose
    weighted children have weights on at least ``_DIRECT_MIN`` of all (feature id, child) pairs
    (the top of a 2-means tree, which every row expands) keep them as a block over every feature
    id instead of the sparse form above (their ``bptr`` range is empty),
    ``vval[vptr[v] + j * n_weighted + a]`` (``vptr[v] = -1`` for the others): one read per feature
    of ``x`` and no lookup.
    """

    child_ptr: np.ndarray
    children: np.ndarray
    aptr: np.ndarray
    active: np.ndarray
    bptr: np.ndarray
    bfeat: np.ndarray
    bcol: np.ndarray
    bchild: np.ndarray
    bval: np.ndarray
    dptr: np.ndarray
    dval: np.ndarray
    hptr: np.ndarray
    hbits: np.ndarray
    htab: np.ndarray
    hmode: np.ndarray
    mptr: np.ndarray
    bmap: np.ndarray
    vptr: np.ndarray
    vval: np.ndarray
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
        child_ptr, children = tree.children_csr()
        n_children = np.diff(child_ptr)
        position = np.zeros(tree.n_nodes, dtype=np.int64)
        position[children] = np.arange(children.size) - np.repeat(child_ptr[:-1], np.diff(child_ptr))
        # one entry per weight; node, feature and parent ids as int32 (their ranges are checked), so that
        # the transient arrays of a million-class model (2e8 weights) stay a few bytes per weight
        W = model.W.tocsr()
        idx = np.int32 if max(tree.n_nodes, int(model.n_features)) < np.iinfo(np.int32).max else np.int64
        node = np.repeat(np.arange(W.shape[0], dtype=idx), np.diff(W.indptr))
        feat = W.indices.astype(idx, copy=False)
        data = W.data
        parent = tree.parent.astype(idx)[node]
        if np.any(parent < 0):  # the root's row should be empty; its weights would never be used
            keep = parent >= 0
            node, feat, parent, data = node[keep], feat[keep], parent[keep], data[keep]
        # weighted children, in child order, and each one's index among its parent's weighted children
        weighted = np.zeros(tree.n_nodes, dtype=bool)
        weighted[node] = True
        is_active = weighted[children]
        n_weighted = np.bincount(tree.parent[children[is_active]], minlength=tree.n_nodes).astype(np.int64)
        aptr = np.concatenate([[0], np.cumsum(n_weighted)]).astype(np.int64)
        active = position[children[is_active]].astype(np.int64)
        weighted_index = np.zeros(tree.n_nodes, dtype=np.int64)
        weighted_index[children[is_active]] = np.arange(active.size) - np.repeat(aptr[:-1], n_weighted)
        D = int(model.n_features)
        nnz = np.bincount(parent, minlength=tree.n_nodes)
        direct = (nnz > 0) & (nnz >= _DIRECT_MIN * D * n_weighted)
        vsize = np.where(direct, D * n_weighted, 0)
        vptr = np.where(direct, np.concatenate([[0], np.cumsum(vsize)[:-1]]), -1).astype(np.int64)
        vval = np.zeros(int(vsize.sum()))
        if direct.any():  # these nodes keep no sparse form
            keep = direct[parent]
            vval[vptr[parent[keep]] + feat[keep] * n_weighted[parent[keep]] + weighted_index[node[keep]]] = data[keep]
            keep = ~keep
            node, feat, parent, data = node[keep], feat[keep], parent[keep], data[keep]
            nnz[direct] = 0
        order = np.lexsort((position[node], feat, parent))
        node = node[order]  # one array at a time: a permuted copy of all four at once would double them
        feat = feat[order]
        parent = parent[order]
        data = data[order]
        del order
        new_group = np.ones(node.size, dtype=bool)
        new_group[1:] = (parent[1:] != parent[:-1]) | (feat[1:] != feat[:-1])
        starts = np.flatnonzero(new_group)
        del new_group
        bfeat = feat[starts].astype(np.int64)
        del feat
        bcol = np.append(starts, node.size).astype(np.int64)
        group_parent = parent[starts]
        del starts  # (every per-weight array is dropped once read: at 2e8 weights each is 0.8-1.6 GB)
        bptr = np.searchsorted(group_parent, np.arange(tree.n_nodes + 1)).astype(np.int64)
        n_feat = np.diff(bptr)
        max_weighted = int(n_weighted.max()) if n_weighted.size else 0
        small = next(t for t in (np.uint8, np.uint16, np.uint32, np.int64) if max_weighted <= np.iinfo(t).max)
        bchild = weighted_index[node].astype(small)
        del node
        hbits = np.where(n_feat > _HASH_MIN, np.ceil(np.log2(np.maximum(1.5 * n_feat, 1))), 0).astype(np.int64)
        hsize = np.where(hbits > 0, 1 << hbits, 0)
        hptr = np.concatenate([[0], np.cumsum(hsize)]).astype(np.int64)
        block = n_feat * n_weighted
        dense = (n_weighted > 1) & (block > 0) & (nnz >= _DENSE_MIN * block)
        hmode = np.where(n_weighted == 1, HASH_VALUE,
                         np.where(~dense & (n_weighted < _POSTINGS_MAX), HASH_POSTINGS, HASH_POSITION)).astype(np.int64)
        hmode[hbits == 0] = HASH_POSITION
        htab = np.full((hptr[-1], 2), -1, dtype=np.int64)
        _kernels.build_feature_tables(bptr, bfeat, bcol, data, hptr, hbits, hmode, htab, htab.view(np.float64))
        words = (D + 63) // 64
        mptr = np.where(hbits > 0, np.concatenate([[0], np.cumsum(np.where(hbits > 0, words, 0))[:-1]]), -1)
        mptr = mptr.astype(np.int64)
        bmap = np.zeros(int((hbits > 0).sum()) * words, dtype=np.uint64)
        _kernels.build_feature_bitmaps(bptr, bfeat, mptr, bmap)
        dptr = np.where(dense, np.concatenate([[0], np.cumsum(np.where(dense, block, 0))[:-1]]), -1).astype(np.int64)
        dval = np.zeros(int(np.where(dense, block, 0).sum()))
        if dense.any():  # scatter each dense node's weights into its block
            local_f = np.repeat(np.arange(bfeat.size) - bptr[group_parent], np.diff(bcol))
            keep = dense[parent]
            dval[dptr[parent[keep]] + local_f[keep] * n_weighted[parent[keep]] + bchild[keep]] = data[keep]
        return cls(
            child_ptr=child_ptr.astype(np.int64),
            children=children.astype(np.int64),
            aptr=aptr,
            active=active,
            bptr=bptr,
            bfeat=bfeat,
            bcol=bcol,
            bchild=bchild,
            bval=np.ascontiguousarray(data, dtype=np.float64),
            dptr=dptr,
            dval=dval,
            hptr=hptr,
            hbits=hbits,
            htab=htab,
            hmode=hmode,
            mptr=mptr,
            bmap=bmap,
            vptr=vptr,
            vval=vval,
            bias=np.ascontiguousarray(model.b, dtype=np.float64),
            n_classes=int(tree.n_classes),
            n_features=int(model.n_features),
            root=int(tree.root),
        )


def _layout(model: TreeModel) -> TreeSearchLayout:
    """The model's search layout, built once per model object."""
    return _kernels.per_model(model, "_svbop_search_layout", TreeSearchLayout.from_model)


def predict_sets_hf(
    model: TreeModel,
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
    model : TreeModel
        A complete (merged) tree model.
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
    lay = _layout(model)
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
                lay.bptr, lay.bfeat, lay.bcol, lay.bchild, lay.bval, lay.dptr, lay.dval, lay.hptr,
                lay.hbits, lay.htab, lay.htab.view(np.float64), lay.hmode, lay.mptr, lay.bmap, lay.vptr, lay.vval,
                lay.bias, K, lay.root, g, g_suffix, early, float(tie_rtol),
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
