"""Probabilistic class trees: the model behind SVBOP-HF.

A probabilistic tree factorises ``P(c | x)`` along the path from the root to the leaf of class
``c``: every internal node ``v`` has a classifier that gives ``P(child | v, x)`` over its children,
and ``P(c | x)`` is the product of these along the path (Mortier et al. 2021, Section 3.3).
This module builds the tree and trains it; SVBOP-HF's search over it builds on
:class:`TreeModel`.

Trees
-----
* :func:`tree_from_hierarchy` -- a predefined class hierarchy (LSHTC1, Bacteria, Proteins) with
  chains of single-child nodes collapsed (a node with one child predicts it with probability 1,
  so it only costs time).
* :func:`balanced_kmeans_tree` -- hierarchical balanced 2-means on class profiles, as in Parabel
  (Prabhu et al. 2018) and napkinXC: a class profile is the sum of the class's training feature
  vectors, L2-normalised; the classes of a node are split into two halves (sizes differ by at
  most one) by 2-means with cosine similarity, iterated until the mean similarity gains less than
  ``eps``, from ``n_init`` random initial pairs of which the best split is kept; a node with
  ``max_leaves`` classes or fewer is not split, its classes become its children.

Both return a :class:`svbop.datasets.Hierarchy` (leaves ``0 .. K-1`` are the classes).

Node classifiers
----------------
:func:`train_tree` trains, for every internal node, a liblinear L2-regularised logistic regression
(dual solver, ``-s 7``, as :func:`svbop.linear.train_ovr`) on the training examples whose class
lies below the node, labelled by the child they go to:

* a node with two children gets a single logistic model ``w``; its children's scores are
  ``(w . x + b, 0)``, so that the softmax below is exactly the logistic ``sigma(w . x + b)``;
* a node with more children gets one one-vs-rest model per child, turned into ``P(child | v, x)``
  by a softmax over the children's scores (as the flat model).
* a node no training example reaches gets zero weights: uniform over its children.

Each node is trained on its examples restricted to the features they use, so that a node's
weights cost memory in proportion to its data (not to the number of features), and are stored as
one sparse row per non-root node in :class:`TreeModel`.  Nodes can be trained in separate jobs
(:func:`split_nodes` partitions them, :func:`merge_trees` joins the parts), and each class of each
node seeds liblinear's ``rand()`` the same way, so the result does not depend on the partition.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from . import _tree_kernels
from ._checks import check_sparse_structure
from ._memory import release_file_pages, release_free_memory
from ._threads import _n_workers, _positive_int
from .datasets.base import Hierarchy
from .io import NpzReader, matrix_arrays, save_arrays
from .linear import (
    _as_features,
    _check_liblinear_options,
    _check_weights,
    _clip_csr,
    _clip_threshold,
    _feature_nodes,
    _fit_one,
    _forked_map,
    _liblinear_parameter,
    _problem_of,
)
from .logs import progress as _progress

__all__ = [
    "tree_from_hierarchy",
    "collapse_single_children",
    "class_profiles",
    "balanced_2means",
    "balanced_kmeans_tree",
    "TreeModel",
    "TreeProbabilities",
    "node_examples",
    "split_nodes",
    "train_tree",
    "merge_trees",
    "save_tree",
    "load_tree",
]

logger = logging.getLogger(__name__)

_FORMAT = "svbop.TreeModel"
_FORMAT_VERSION = 1
#: Version of what balanced_kmeans_tree builds from the same inputs (2: the best of n_init restarts); caches of
#: built trees (benchmarks/bench_inference.py) key on it so that trees of an older builder are rebuilt.
BUILDER_VERSION = 2
#: With several workers, nodes whose liblinear problem takes more than this many bytes are trained one at a
#: time in the calling process before the others are shared out: two such nodes at once (the root and a child
#: at K = 10^6: 2.9 and 1.5 GB, beside the features) would double the peak memory for little time saved.
_ALONE_BYTES = 1 << 30


# --------------------------------------------------------------------------------------------
# trees
# --------------------------------------------------------------------------------------------


def _renumber(parent: np.ndarray, keep: np.ndarray, n_classes: int, names: list[str] | None) -> Hierarchy:
    """The tree on the nodes ``keep`` (a boolean mask; ``parent`` already points to kept nodes)."""
    new_id = np.full(parent.size, -1, dtype=np.int64)
    new_id[keep] = np.arange(int(keep.sum()))
    kept = np.flatnonzero(keep)
    new_parent = np.where(parent[kept] >= 0, new_id[np.maximum(parent[kept], 0)], -1)
    return Hierarchy(new_parent, n_classes, None if names is None else [names[i] for i in kept])


def collapse_single_children(hierarchy: Hierarchy) -> Hierarchy:
    """The same tree with every internal node that has exactly one child removed.

    The child takes the removed node's place (a chain of such nodes is removed at once); when the
    root has a single child, that child becomes the root.  The leaves keep their ids ``0..K-1``;
    internal nodes are renumbered in their old order.  Node names are kept.

    Parameters
    ----------
    hierarchy : Hierarchy

    Returns
    -------
    Hierarchy
        A tree whose internal nodes all have at least two children (unless ``K == 1``).
    """
    parent = hierarchy.parent.copy()
    n, K = parent.size, hierarchy.n_classes
    n_children = np.bincount(parent[parent >= 0], minlength=n)
    single = n_children == 1
    single[:K] = False
    if not single.any():
        return hierarchy
    # Every node's new parent is its nearest ancestor that is kept; the root is removed too when
    # it has a single child (its child then points past it, to -1, and becomes the root).
    up = parent.copy()
    while True:
        skip = (up >= 0) & single[np.maximum(up, 0)]
        if not skip.any():
            break
        up[skip] = parent[up[skip]]
    parent = up
    keep = ~single
    new = _renumber(parent, keep, K, hierarchy.node_names)
    logger.info("collapsed %d single-child nodes: %d -> %d nodes", int(single.sum()), n, new.n_nodes)
    return new


def tree_from_hierarchy(hierarchy: Hierarchy) -> Hierarchy:
    """A predefined class hierarchy as a tree for SVBOP-HF: single-child chains collapsed.

    Equivalent to :func:`collapse_single_children`; named for what the pipeline does with it.
    """
    if not isinstance(hierarchy, Hierarchy):
        raise ValueError(f"hierarchy must be a svbop.datasets.Hierarchy, got {type(hierarchy).__name__}")
    return collapse_single_children(hierarchy)


def save_tree(path: str | os.PathLike, tree: Hierarchy) -> None:
    """Write a tree (parent array, number of classes, node names if any) to ``path`` (``.npz``)."""
    arrays = {"format": np.array("svbop.Tree"), "parent": tree.parent, "n_classes": np.array(tree.n_classes)}
    if tree.node_names is not None:
        arrays["node_names"] = np.array(tree.node_names, dtype=str)
    save_arrays(path, **arrays)


def load_tree(path: str | os.PathLike) -> Hierarchy:
    """Read a tree written by :func:`save_tree`; errors name the file."""
    with NpzReader(path, "tree file") as data:
        if str(data["format"]) != "svbop.Tree":
            raise ValueError(f"{path}: format is {str(data['format'])!r}, expected 'svbop.Tree'")
        names = [str(s) for s in data["node_names"]] if "node_names" in data else None
        try:
            return Hierarchy(data["parent"], int(data["n_classes"]), names)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None


def class_profiles(X: Any, y: np.ndarray, n_classes: int) -> sp.csr_matrix:
    """The sum of every class's training feature vectors, L2-normalised (one row per class).

    A class without training examples gets a zero row.

    Parameters
    ----------
    X : array or sparse matrix of shape (n_samples, n_features)
    y : int array of shape (n_samples,), in ``0..n_classes-1``
    n_classes : int

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n_classes, n_features), float64
    """
    X = _csr_features(X)
    y = _check_labels(y, X.shape[0], n_classes)
    local, columns = _used_columns(X, 16)  # the kernel's sums and column map: 16 bytes per feature id
    order = np.argsort(y, kind="stable")
    start = np.concatenate([[0], np.cumsum(np.bincount(y, minlength=n_classes))])
    indptr, indices, data = _tree_kernels.class_sums(local.indptr, local.indices, local.data, order, start,
                                                     local.shape[1])
    _tree_kernels.normalise_rows(indptr, data)  # in place: one copy of the profiles at a time
    return sp.csr_matrix((data, columns[indices] if columns is not None else indices, indptr),
                         shape=(n_classes, X.shape[1]))


def _used_columns(X: sp.csr_matrix, per_column: int) -> tuple[sp.csr_matrix, np.ndarray | None]:
    """``X`` with its used columns renumbered ``0..u-1`` in increasing order, and the feature id of
    each (``None``: ``X`` itself, when every column is used or renumbering would cost more than it
    saves).  Everything computed on the renumbered matrix (sums, cosine similarities, a node's
    liblinear problem) is what it is on ``X``, in the same order; its cost follows the non-zeros,
    not the feature ids (1,500 non-zeros over 2^27 ids would otherwise allocate scratch arrays of
    2^27 entries).  ``per_column``: the bytes of scratch the caller allocates per feature id; the
    renumbering costs about 8 bytes per non-zero, and is done only where it saves more."""
    if per_column * X.shape[1] <= 8 * X.nnz:
        return X, None
    columns = np.unique(X.indices)
    if columns.size == X.shape[1]:
        return X, None
    indices = np.searchsorted(columns, X.indices).astype(np.int32 if columns.size < 2**31 else np.int64)
    local = sp.csr_matrix((X.data, indices, X.indptr), shape=(X.shape[0], columns.size))
    local.has_sorted_indices = X.has_sorted_indices  # a monotone renumbering keeps the order
    return local, columns.astype(np.int64)


def _csr_features(X: Any) -> sp.csr_matrix:
    """Training features as CSR with sorted indices, float32 kept as float32: the tree's kernels read
    each value as a double, so a float64 copy of a float32 matrix (gigabytes at extreme K) is never made."""
    if sp.issparse(X) and X.dtype in (np.float32, np.float64):
        check_sparse_structure(X, "X")
        X = sp.csr_matrix(X)
    else:
        X = sp.csr_matrix(_as_features(X))
    if not X.has_sorted_indices:
        X = X.sorted_indices()
    return X


def _check_labels(y: Any, n_rows: int, n_classes: int) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim != 1 or y.size != n_rows:
        raise ValueError(f"y must be 1-d with one label per row of X ({n_rows}), got shape {y.shape}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"y must hold integer class ids, got dtype {y.dtype}")
    n_classes = _positive_int("n_classes", n_classes)
    y = y.astype(np.int64)
    if y.size and (y.min() < 0 or y.max() >= n_classes):
        raise ValueError(f"y must be in 0..{n_classes - 1}, found {y[(y < 0) | (y >= n_classes)][0]}")
    return y


def balanced_2means(
    profiles: sp.csr_matrix | np.ndarray,
    *,
    eps: float = 1e-3,
    max_iter: int = 100,
    rng: np.random.Generator | int | None = 0,
    n_init: int = 4,
) -> np.ndarray:
    """Split rows into two halves by balanced spherical 2-means (cosine similarity).

    Two distinct rows are drawn as the initial centroids.  Each iteration ranks the rows by
    ``sim(row, c0) - sim(row, c1)`` and gives the first ``ceil(n / 2)`` to cluster 0 and the rest
    to cluster 1, then re-computes each centroid as the normalised sum of its rows; it stops when
    the mean similarity of the rows to their centroid gains less than ``eps`` (or after
    ``max_iter`` iterations).  This is run from ``n_init`` initial pairs and the split of highest
    mean similarity is kept (the first on ties): a single draw often ends in a poor local optimum.

    Parameters
    ----------
    profiles : sparse or dense array of shape (n, D), n >= 2
        L2-normalised rows (see :func:`class_profiles`).
    eps : float
        Stopping tolerance on the gain of the mean similarity (the paper's eps_c).
    max_iter : int
    rng : numpy Generator or seed
    n_init : int, >= 1
        Initial pairs tried (napkinXC tries one).

    Returns
    -------
    ndarray of bool, shape (n,)
        True for the rows of cluster 0 (``ceil(n / 2)`` of them).
    """
    n = profiles.shape[0]
    if n < 2:
        raise ValueError(f"balanced_2means needs at least 2 rows, got {n}")
    if not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    n_init = _positive_int("n_init", n_init)
    P = sp.csr_matrix(profiles, dtype=np.float64)
    return _Splitter(P).split(np.arange(n, dtype=np.int64), np.random.default_rng(rng), eps, max_iter, n_init)


class _Splitter:
    """Balanced 2-means splits of subsets of the rows of one CSR profile matrix.

    A subset's rows are copied with their columns renumbered ``0..u-1`` (``u`` the features they
    use), so a split costs time and memory in proportion to the subset's non-zeros: at extreme K a
    node's classes use a few thousand of millions of feature ids.
    """

    def __init__(self, profiles: sp.csr_matrix) -> None:
        # a column map and the root's two centroids (24 bytes per feature id) over the used columns only
        self.P = _used_columns(profiles, 24)[0]
        self.pos = np.full(self.P.shape[1], -1, dtype=np.int64)

    def split(self, rows: np.ndarray, rng: np.random.Generator, eps: float, max_iter: int, n_init: int) -> np.ndarray:
        """Cluster-0 mask over ``rows`` (``ceil(n / 2)`` True): the best of ``n_init`` random pairs."""
        n = rows.size
        if n == self.P.shape[0] and np.array_equal(rows, np.arange(n)):  # every row (the root): no copy
            indptr, indices, data, n_cols = self.P.indptr, self.P.indices, self.P.data, self.P.shape[1]
        else:
            indptr, indices, data, columns = _tree_kernels.compact_rows(
                self.P.indptr, self.P.indices, self.P.data, rows, self.pos)
            n_cols = columns.size
        best_left, best_score = None, -np.inf
        left = np.zeros(n, dtype=np.bool_)
        for _ in range(n_init):
            first, second = rng.choice(n, size=2, replace=False)
            score = _tree_kernels.refine_2means(indptr, indices, data, n_cols, int(first), int(second),
                                                float(eps), int(max_iter), left)
            if best_left is None or score > best_score:
                best_left, best_score = left.copy(), score
        return best_left


def balanced_kmeans_tree(
    X: Any,
    y: np.ndarray,
    n_classes: int,
    *,
    max_leaves: int = 100,
    eps: float = 1e-3,
    max_iter: int = 100,
    seed: int = 0,
    n_init: int = 4,
) -> Hierarchy:
    """Hierarchical balanced 2-means on class profiles (the paper's HF_c tree).

    Starting with all classes at the root, every node with more than ``max_leaves`` classes is
    split in two halves by :func:`balanced_2means` on the class profiles
    (:func:`class_profiles`); a node with ``max_leaves`` classes or fewer gets its classes as
    children.

    Parameters
    ----------
    X : array or sparse matrix of shape (n_samples, n_features)
        Training features.
    y : int array of shape (n_samples,)
        Training labels in ``0..n_classes-1``.
    n_classes : int
    max_leaves : int, >= 2
        Classes below a node that is not split (the paper's ``l``).
    eps : float
        2-means stopping tolerance (the paper's ``eps_c``).
    max_iter : int
        Cap on the 2-means iterations per split.
    seed : int
        Seed of the initial centroids (one generator for the whole tree, nodes in creation order).
    n_init : int
        Initial centroid pairs tried per split (:func:`balanced_2means`).

    Returns
    -------
    Hierarchy
        Leaves ``0..K-1`` are the classes; node ``K`` is the root, the other internal nodes follow
        in the order they were created (breadth-first).
    """
    if isinstance(max_leaves, bool) or not isinstance(max_leaves, (int, np.integer)) or max_leaves < 2:
        raise ValueError(f"max_leaves must be an integer >= 2, got {max_leaves!r}")
    n_init = _positive_int("n_init", n_init)
    if not (np.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
    start = time.perf_counter()
    profiles = class_profiles(X, y, n_classes)
    splitter = _Splitter(profiles)
    rng = np.random.default_rng(seed)
    K = int(n_classes)
    if K == 1:
        return Hierarchy(np.array([-1]), 1)
    parent = [-1]  # internal nodes, numbered K + i
    leaf_parent = np.full(K, -1, dtype=np.int64)
    queue = [(0, np.arange(K))]  # (internal index, classes below it)
    head = 0
    while head < len(queue):
        node, members = queue[head]
        head += 1
        if members.size <= max_leaves:
            leaf_parent[members] = K + node
            continue
        left = splitter.split(members, rng, eps, max_iter, n_init)
        for part in (members[left], members[~left]):
            parent.append(K + node)
            queue.append((len(parent) - 1, part))
    tree = Hierarchy(np.concatenate([leaf_parent, np.array(parent, dtype=np.int64)]), K)
    del splitter, profiles
    release_free_memory()  # the nodes' copies of their profiles
    logger.info(
        "balanced 2-means tree: %d classes, %d internal nodes, depth %d, max_leaves %d, eps %g, n_init %d (%.2f s)",
        K, tree.n_nodes - K, int(tree.depth()[:K].max()), max_leaves, eps, n_init, time.perf_counter() - start,
    )
    return tree


# --------------------------------------------------------------------------------------------
# the tree model
# --------------------------------------------------------------------------------------------


@dataclass
class TreeModel:
    """Node classifiers of a probabilistic class tree.

    Attributes
    ----------
    tree : Hierarchy
        The tree; leaves ``0..K-1`` are the classes.
    W : scipy.sparse.csr_matrix of shape (n_nodes, n_features)
        Row ``v`` scores node ``v`` among its siblings (the root's row is zero):
        ``P(v | parent(v), x) = softmax over the siblings of (W x + b)``.
    b : ndarray of shape (n_nodes,)
        Intercepts.
    trained : ndarray of bool, shape (n_nodes,)
        Internal nodes whose classifier is in ``W`` (all of them in a complete model; a part
        from :func:`train_tree` with ``nodes=`` has only those).
    """

    tree: Hierarchy
    W: sp.csr_matrix
    b: np.ndarray
    trained: np.ndarray

    def __post_init__(self) -> None:
        n = self.tree.n_nodes
        self.W = sp.csr_matrix(self.W, dtype=np.float64)
        self.b = np.asarray(self.b, dtype=np.float64)
        self.trained = np.asarray(self.trained, dtype=bool)
        if self.W.shape[0] != n or self.b.shape != (n,) or self.trained.shape != (n,):
            raise ValueError(
                f"W, b and trained need one row per node ({n}), got {self.W.shape}, {self.b.shape}, "
                f"{self.trained.shape}"
            )

    @property
    def n_classes(self) -> int:
        return self.tree.n_classes

    @property
    def n_features(self) -> int:
        return int(self.W.shape[1])

    @property
    def complete(self) -> bool:
        """Whether every internal node has its classifier."""
        internal = np.zeros(self.tree.n_nodes, dtype=bool)
        internal[self.tree.n_classes:] = True
        return bool(np.array_equal(self.trained, internal))

    def clip(self, threshold: float) -> TreeModel:
        """A copy with the weights ``|w| < threshold`` set to zero (intercepts kept)."""
        threshold = _clip_threshold("threshold", threshold)
        W = _clip_csr(self.W, threshold)
        logger.info("clip |w| < %g: kept %d of %d non-zero node weights", threshold, W.nnz, self.W.nnz)
        return TreeModel(self.tree, W, self.b.copy(), self.trained.copy())

    def node_scores(self, X: Any) -> np.ndarray:
        """Scores ``X W^T + b`` of every node, shape (n_samples, n_nodes)."""
        X = _as_features(X)
        if X.shape[1] != self.n_features:
            raise ValueError(f"X has {X.shape[1]} features, the model has {self.n_features}")
        scores = X @ self.W.T
        scores = scores.toarray() if sp.issparse(scores) else np.asarray(scores)
        scores += self.b
        return scores

    def node_log_proba(self, X: Any) -> np.ndarray:
        """``log P(v | x)`` of every node ``v`` (the product along its path), shape (n, n_nodes)."""
        if not self.complete:
            raise ValueError("the model is a part (not every internal node is trained): merge the parts first")
        scores = self.node_scores(X)
        tree = self.tree
        indptr, children = tree.children_csr()
        counts = np.diff(indptr)
        parents = np.flatnonzero(counts)
        starts = indptr[parents]
        # log-softmax within every group of siblings (children are contiguous per parent)
        S = scores[:, children]
        peak = np.maximum.reduceat(S, starts, axis=1)
        S -= np.repeat(peak, counts[parents], axis=1)
        total = np.add.reduceat(np.exp(S), starts, axis=1)
        S -= np.repeat(np.log(total), counts[parents], axis=1)
        out = np.zeros_like(scores)
        out[:, children] = S
        # top-down: add the parent's log-probability, one depth level at a time
        depth = tree.depth()
        by_depth = np.argsort(depth, kind="stable")
        bounds = np.searchsorted(depth[by_depth], np.arange(1, depth.max() + 2))
        for d in range(1, int(depth.max()) + 1):
            level = by_depth[bounds[d - 1]:bounds[d]]
            out[:, level] += out[:, tree.parent[level]]
        return out

    def predict_proba(self, X: Any, batch_size: int = 4096) -> np.ndarray:
        """``P(c | x)`` of every class (the leaves), shape (n_samples, K); rows sum to 1."""
        X = _as_features(X)
        K = self.n_classes
        out = np.empty((X.shape[0], K))
        for start in range(0, X.shape[0], batch_size):
            rows = slice(start, start + batch_size)
            np.exp(self.node_log_proba(X[rows])[:, :K], out=out[rows])
        return out

    def predict(self, X: Any) -> np.ndarray:
        """The class of highest probability, shape (n_samples,)."""
        return np.argmax(self.predict_proba(X), axis=1)

    def save(self, path: str | os.PathLike, *, compress: bool = True) -> None:
        """Write the model to ``path`` (``.npz``, atomic, no pickle).

        ``compress=False`` stores the arrays as they are: :meth:`load` then maps the weights from
        the file instead of inflating them into memory, and the search layout of SVBOP-HF is built
        from the mapping without the weights ever being resident at once (at K = 10^6 the weights
        are gigabytes: the layout alone is then the inference's memory)."""
        arrays: dict[str, np.ndarray] = {
            "format": np.array(_FORMAT),
            "version": np.array(_FORMAT_VERSION),
            "parent": self.tree.parent,
            "n_classes": np.array(self.tree.n_classes),
            "b": self.b,
            "trained": self.trained,
        }
        arrays.update(matrix_arrays(self.W, "W"))
        save_arrays(path, compress=compress, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> TreeModel:
        """Read a model written by :meth:`save`; errors name the file."""
        with NpzReader(path, "TreeModel file") as data:
            if str(data["format"]) != _FORMAT:
                raise ValueError(f"{path}: format is {str(data['format'])!r}, expected {_FORMAT!r}")
            version = int(data["version"])
            if version > _FORMAT_VERSION:
                raise ValueError(f"{path}: format version {version} is newer than this code ({_FORMAT_VERSION})")
            try:
                tree = Hierarchy(data["parent"], int(data["n_classes"]))
                model = cls(tree, data.matrix("W"), data["b"], data["trained"])
            except ValueError as exc:
                msg = str(exc)
                raise ValueError(msg if msg.startswith(f"{path}:") else f"{path}: {msg}") from None
        _check_weights(path, W=model.W, b=model.b)
        # weights mapped from an uncompressed file are left read-only, and the pages the checks read
        # are let go: they are read again from the page cache as used
        for part in (model.W.data, model.W.indices, model.W.indptr):
            part.flags.writeable = False
        release_file_pages(model.W.data, model.W.indices, model.W.indptr)
        return model


# --------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------


def node_examples(tree: Hierarchy, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which training examples reach which internal node, and the child they go to.

    Parameters
    ----------
    tree : Hierarchy
    y : int array of shape (n_samples,), classes ``0..K-1`` (leaves of ``tree``)

    Returns
    -------
    indptr : ndarray of int64, shape (n_nodes + 1,)
        Node ``v``'s examples are ``rows[indptr[v]:indptr[v + 1]]`` (none for leaves).
    rows : ndarray of int64
        Example indices, grouped by node, increasing within a node.
    child : ndarray of int64, same length as ``rows``
        Position (0-based, among the node's sorted children) of the child each example goes to.
    """
    y = _check_labels(y, np.asarray(y).size, tree.n_classes)
    n = tree.n_nodes
    indptr_c, children = tree.children_csr()
    position = np.zeros(n, dtype=np.int64)  # rank of every node among its siblings
    position[children] = np.arange(children.size) - np.repeat(indptr_c[:-1], np.diff(indptr_c))
    node_parts, row_parts, child_parts = [], [], []
    current = y.copy()  # walk every example up from its leaf
    alive = np.arange(y.size)
    while alive.size:
        up = tree.parent[current[alive]]
        has = up >= 0
        alive, up = alive[has], up[has]
        node_parts.append(up)
        row_parts.append(alive)
        child_parts.append(position[current[alive]])
        current[alive] = up
    nodes = np.concatenate(node_parts) if node_parts else np.zeros(0, np.int64)
    rows = np.concatenate(row_parts) if row_parts else np.zeros(0, np.int64)
    child = np.concatenate(child_parts) if child_parts else np.zeros(0, np.int64)
    order = np.lexsort((rows, nodes))
    counts = np.bincount(nodes, minlength=n)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return indptr, rows[order].astype(np.int64), child[order].astype(np.int64)


def split_nodes(tree: Hierarchy, y: np.ndarray, n_parts: int) -> list[np.ndarray]:
    """Partition the internal nodes into ``n_parts`` groups of similar training cost.

    The cost of a node is its number of examples times the number of binary problems it solves
    (1 for two children, else the number of children); nodes are dealt largest first to the
    least loaded group.  Deterministic: every job computes the same partition.

    Returns
    -------
    list of ``n_parts`` sorted int64 arrays (some may be empty when there are few nodes)
    """
    n_parts = _positive_int("n_parts", n_parts)
    y = _check_labels(y, np.asarray(y).size, tree.n_classes)
    internal = np.arange(tree.n_classes, tree.n_nodes)
    n_children = np.bincount(tree.parent[tree.parent >= 0], minlength=tree.n_nodes)[internal]
    problems = np.where(n_children == 2, 1, n_children)
    cost = (_examples_below(tree, y)[internal] + 1) * problems
    load = np.zeros(n_parts)
    groups: list[list[int]] = [[] for _ in range(n_parts)]
    for i in np.argsort(-cost, kind="stable"):
        g = int(np.argmin(load))
        groups[g].append(int(internal[i]))
        load[g] += cost[i]
    return [np.array(sorted(g), dtype=np.int64) for g in groups]


def _leaf_places(tree: Hierarchy, y: np.ndarray):
    """The leaves in depth-first order, so that the classes below any node are a range of places:
    ``(child_ptr, children)`` (:meth:`Hierarchy.children_csr`), ``key`` (each row's class's place),
    ``first``/``last`` (node ``v``'s places are ``first[v]..last[v] - 1``) and ``start`` (rows of the
    places before each place, rows sorted by place: node ``v`` has ``start[last[v]] - start[first[v]]``)."""
    child_ptr, children = tree.children_csr()
    leaf_pos, first, last = _tree_kernels.leaf_ranges(child_ptr, children, tree.root, tree.n_classes)
    key = leaf_pos[y]
    start = np.concatenate([[0], np.cumsum(np.bincount(key, minlength=tree.n_classes))])
    return child_ptr, children, key, first, last, start


def _examples_below(tree: Hierarchy, y: np.ndarray) -> np.ndarray:
    """How many training examples reach every node (those of the classes below it)."""
    _, _, _, first, last, start = _leaf_places(tree, y)
    return start[last] - start[first]


class _NodeTrainer:
    """Trains one internal node; shared by forked workers (copy-on-write).

    The training rows are held once, sorted by the depth-first place of their class, so that a
    node's rows are one slice (its classes are a range of places): no per-node copy of the row ids
    exists before the node is trained (at K = 10^6 they would be 3 x 10^6 rows times the depth).
    A node's liblinear problem is written straight from ``X``'s rows with the node's features
    renumbered (:func:`svbop._tree_kernels.fill_problem`): its one copy of the node's data is
    liblinear's own (16 bytes a non-zero).
    """

    def __init__(self, X, y, tree, params, clip=None):
        self.X, self.tree, self.clip = X, tree, clip
        self.C, self.eps, self.bias, self.seed = params["C"], params["eps"], params["bias"], params["seed"]
        self.child_ptr, self.children_ids, self.key, self.first, self.last, self.start = _leaf_places(tree, y)
        self.order = np.argsort(self.key, kind="stable")  # rows by the depth-first place of their class
        self.pos = None
        self.param = None
        self.entries = None

    def problem_bytes(self, nodes: np.ndarray) -> np.ndarray:
        """Bytes of each node's liblinear problem (16 a feature node: its rows' non-zeros, a bias node
        and a terminator a row)."""
        if self.entries is None:
            per_row = np.diff(self.X.indptr).astype(np.int64) + 2
            by_place = np.bincount(self.key, weights=per_row, minlength=self.tree.n_classes)
            self.entries = np.concatenate([[0], np.cumsum(by_place)]).astype(np.int64)
        return 16 * (self.entries[self.last[nodes]] - self.entries[self.first[nodes]])

    def kids(self, node: int) -> np.ndarray:
        return self.children_ids[self.child_ptr[node]:self.child_ptr[node + 1]]

    def fit(self, node: int) -> tuple[int, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        """(node, child ids, (indptr, indices, data) of the child rows' kept weights, intercepts)."""
        kids = self.kids(node)
        m = kids.size
        rows = np.sort(self.order[self.start[self.first[node]]:self.start[self.last[node]]])
        if rows.size == 0:  # no example reaches the node: uniform over its children
            return node, kids, (np.zeros(m + 1, np.int64), np.zeros(0, np.int32), np.zeros(0)), np.zeros(m)
        # the child each row goes to: the one whose range of leaf places holds the row's class
        by_place = np.argsort(self.first[kids], kind="stable")
        labels = by_place[np.searchsorted(self.first[kids][by_place], self.key[rows], side="right") - 1]
        if self.pos is None:  # per process (forked workers each get their own): -1 over every feature id
            self.pos = np.full(self.X.shape[1], -1, dtype=np.int64)
            self.param = _liblinear_parameter(self.C, self.eps, self.bias)
        X = self.X
        lengths = X.indptr[rows + 1] - X.indptr[rows]
        x_space = _feature_nodes(int(lengths.sum()) + 2 * rows.size)
        rowptr = np.empty(rows.size + 1, dtype=np.int64)
        used = _tree_kernels.fill_problem(X.indptr, X.indices, X.data, rows, self.pos, float(self.bias),
                                          x_space["index"], x_space["value"], rowptr)
        prob = _problem_of(x_space, rowptr, used.size, float(self.bias))
        fitted = [0] if m == 2 else range(m)  # a binary node is one logistic model; its second child scores 0
        indptr, indices, data, b = [0], [], [], np.zeros(m)
        for c in range(m):
            if c in fitted:
                w, b[c] = _fit_one(prob, self.param, labels, c, self.seed)
                keep = np.flatnonzero(w != 0) if self.clip is None else np.flatnonzero(np.abs(w) >= self.clip)
                indices.append(used[keep].astype(np.int32))
                data.append(w[keep])
                indptr.append(indptr[-1] + keep.size)
            else:
                indptr.append(indptr[-1])
        del prob, x_space
        return (node, kids, (np.array(indptr, dtype=np.int64), np.concatenate(indices) if indices else np.zeros(0, np.int32),
                             np.concatenate(data) if data else np.zeros(0)), b)


class _NodeWeights:
    """The node classifiers' weights as they arrive from the workers, then one CSR in node order.

    They arrive in training order (largest node first) and are appended to chunks of a fixed size;
    :meth:`csr` copies them to their rows chunk by chunk and frees each chunk once copied, so the
    whole tree's weights exist about once, not twice (at K = 10^6 they are gigabytes).
    """

    #: weights per chunk (64 MB of indices, 128 MB of values): above malloc's largest mmap threshold (32 MB),
    #: so each part is its own mapping, returned to the system when freed (16 MB parts stayed in the heap)
    CHUNK = 1 << 24

    def __init__(self, n_nodes: int) -> None:
        self.n_nodes = n_nodes
        self.chunks: list[tuple[np.ndarray, np.ndarray]] = []
        self.fill = self.CHUNK
        self.total = 0
        self.src, self.length, self.row = [], [], []
        self.b = np.zeros(n_nodes)

    def add(self, kids: np.ndarray, weights: tuple[np.ndarray, np.ndarray, np.ndarray], bc: np.ndarray) -> None:
        indptr, indices, data = weights
        self.src.append(self.total + indptr[:-1])
        self.length.append(np.diff(indptr))
        self.row.append(np.asarray(kids, dtype=np.int64))
        self.b[kids] = bc
        at = 0
        while at < indices.size:
            if self.fill == self.CHUNK:
                self.chunks.append((np.empty(self.CHUNK, dtype=np.int32), np.empty(self.CHUNK)))
                self.fill = 0
            take = min(self.CHUNK - self.fill, indices.size - at)
            ind, val = self.chunks[-1]
            ind[self.fill:self.fill + take] = indices[at:at + take]
            val[self.fill:self.fill + take] = data[at:at + take]
            self.fill += take
            at += take
        self.total += indices.size

    def csr(self, n_features: int) -> sp.csr_matrix:
        src = np.concatenate(self.src) if self.src else np.zeros(0, np.int64)
        length = np.concatenate(self.length) if self.length else np.zeros(0, np.int64)
        row = np.concatenate(self.row) if self.row else np.zeros(0, np.int64)
        counts = np.zeros(self.n_nodes, dtype=np.int64)
        counts[row] = length
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        indices, data = np.empty(self.total, dtype=np.int32), np.empty(self.total)
        dst = indptr[row]
        # the indices of every chunk first, then the values: each chunk's part freed once copied, so the
        # weights exist about once plus what the scattered copy of one part has touched
        for part, out in ((0, indices), (1, data)):
            segment = 0
            for c in range(len(self.chunks)):
                piece = self.chunks[c][part]
                self.chunks[c] = (None, self.chunks[c][1]) if part == 0 else None
                if c == len(self.chunks) - 1:
                    piece = piece[: self.fill]
                segment = _tree_kernels.copy_segments(piece, c * self.CHUNK, src, length, dst, segment, out)
                del piece
            release_free_memory()
        self.chunks = []
        return sp.csr_matrix((data, indices, indptr), shape=(self.n_nodes, n_features))


def train_tree(
    X: Any,
    y: np.ndarray,
    tree: Hierarchy,
    *,
    C: float = 1.0,
    eps: float = 0.1,
    bias: float = 1.0,
    nodes: Sequence[int] | np.ndarray | None = None,
    n_jobs: int = 1,
    seed: int | None = 1,
    progress: bool = True,
    clip: float | None = None,
) -> TreeModel:
    """Train the node classifiers of a probabilistic tree with liblinear (``-s 7``).

    Parameters
    ----------
    X : array or sparse matrix of shape (n_samples, n_features)
        Training features.
    y : int array of shape (n_samples,)
        Training labels (leaves of ``tree``).
    tree : Hierarchy
    C, eps, bias : float
        liblinear's ``-c``, ``-e`` and ``-B`` for every node.
    nodes : sequence of int, optional
        Internal nodes to train (a part, see :func:`split_nodes` and :func:`merge_trees`);
        default all.
    n_jobs : int
        Nodes trained at once in forked processes (-1: every available core); the result is the
        same for any value.
    seed : int or None
        ``srand(seed)`` before every binary problem (see :func:`svbop.linear.train_ovr`).
    progress : bool
        Show a progress bar over the nodes.
    clip : float or None
        Drop the weights ``|w| < clip`` of every node as soon as it is trained (napkinXC's
        ``weightsThreshold``): the result equals ``train_tree(...).clip(clip)``, but the unclipped
        weights of the whole tree never exist at once (liblinear's dual solver gives a weight to every
        feature of a node's examples: at K = 10^5 that is about 10^9 weights, most of them tiny).

    Returns
    -------
    TreeModel
        With ``trained`` set for ``nodes``.
    """
    if not isinstance(tree, Hierarchy):
        raise ValueError(f"tree must be a svbop.datasets.Hierarchy, got {type(tree).__name__}")
    X = _csr_features(X)
    y = _check_labels(y, X.shape[0], tree.n_classes)
    _check_liblinear_options(C, eps, bias)
    if seed is not None and not (isinstance(seed, (int, np.integer)) and 0 <= seed < 2**32):
        raise ValueError(f"seed must be an integer in 0..2**32-1 or None, got {seed!r}")
    if X.nnz and not np.all(np.isfinite(X.data)):
        raise ValueError("X contains NaN or infinite values")
    if X.shape[1] + 1 >= 2**31:
        raise ValueError(f"X has {X.shape[1]} features, more than liblinear's int indices allow")
    K, n = tree.n_classes, tree.n_nodes
    if nodes is None:
        todo = np.arange(K, n, dtype=np.int64)
    else:
        todo = np.unique(np.asarray(nodes, dtype=np.int64))
        if todo.size != np.asarray(nodes).size:
            raise ValueError("nodes must not repeat a node")
        if todo.size and (todo[0] < K or todo[-1] >= n):
            raise ValueError(f"nodes must be internal nodes ({K}..{n - 1}), got {todo[0] if todo[0] < K else todo[-1]}")
    workers = max(1, min(_n_workers("n_jobs", n_jobs), todo.size))
    if clip is not None:
        clip = _clip_threshold("clip", clip)
    start = time.perf_counter()
    n_features = X.shape[1]
    # each process's column map (8 bytes per feature id) over the used columns only; a node's problem
    # numbers its features in increasing order either way, so the weights are the same
    X, columns = _used_columns(X, 8 * workers)
    trainer = _NodeTrainer(X, y, tree, {"C": C, "eps": eps, "bias": bias, "seed": None if seed is None else int(seed)}, clip)
    # largest nodes first, so that parallel workers finish together
    sizes = (trainer.start[trainer.last[todo]] - trainer.start[trainer.first[todo]]) * np.maximum(np.diff(trainer.child_ptr)[todo], 1)
    order = todo[np.argsort(-sizes, kind="stable")]
    logger.info(
        "liblinear tree: %d of %d internal nodes, %d x %d, C=%g eps=%g bias=%g, %d job(s)",
        todo.size, n - K, X.shape[0], n_features, C, eps, bias, workers,
    )

    def tracked(results):
        if not progress:
            return results
        return _progress(results, desc="liblinear tree nodes", total=todo.size, logger=logger)

    release_free_memory()  # what the caller freed stays out of this process and of the forked workers
    if workers == 1:
        fits = map(trainer.fit, order)
    else:  # nodes whose liblinear problem is large are trained first, one at a time, in this process
        alone = trainer.problem_bytes(order) > _ALONE_BYTES
        fits = itertools.chain(map(trainer.fit, order[alone]), _forked_map(trainer.fit, order[~alone], workers))
    weights = _NodeWeights(n)
    for _, kids, Wc, bc in tracked(fits):
        weights.add(kids, Wc, bc)
    del fits
    release_free_memory()  # the nodes' weights as they arrived, copied into the chunks
    W, b = weights.csr(X.shape[1]), weights.b
    del weights
    if columns is not None:  # back to the feature ids, in place, a chunk at a time
        ids = columns.astype(W.indices.dtype)
        for lo in range(0, W.indices.size, 1 << 24):
            W.indices[lo: lo + (1 << 24)] = ids[W.indices[lo: lo + (1 << 24)]]
        W = sp.csr_matrix((W.data, W.indices, W.indptr), shape=(W.shape[0], n_features))
    W.eliminate_zeros()
    trained = np.zeros(n, dtype=bool)
    trained[todo] = True
    logger.info("liblinear tree: %d nodes in %.1f s, %d non-zero weights", todo.size, time.perf_counter() - start, W.nnz)
    return TreeModel(tree, W, b, trained)


def merge_trees(parts: Sequence[TreeModel]) -> TreeModel:
    """Join tree-model parts trained on disjoint node sets into one complete model.

    Raises ValueError when the parts have different trees or features, overlap, or leave an
    internal node untrained.
    """
    parts = list(parts)
    if not parts:
        raise ValueError("parts is empty: nothing to merge")
    first = parts[0]
    for i, part in enumerate(parts):
        if not isinstance(part, TreeModel):
            raise ValueError(f"parts[{i}] is a {type(part).__name__}, not a TreeModel")
        if part.tree.n_classes != first.tree.n_classes or not np.array_equal(part.tree.parent, first.tree.parent):
            raise ValueError(f"parts[{i}] has a different tree from parts[0]")
        if part.n_features != first.n_features:
            raise ValueError(f"parts[{i}] has {part.n_features} features, parts[0] has {first.n_features}")
    counts = np.sum([p.trained for p in parts], axis=0)
    if np.any(counts > 1):
        raise ValueError(f"overlapping parts: node {int(np.flatnonzero(counts > 1)[0])} is trained in more than one")
    internal = np.arange(first.tree.n_classes, first.tree.n_nodes)
    missing = internal[counts[internal] == 0]
    if missing.size:
        raise ValueError(f"missing nodes: {missing.size} internal nodes (e.g. {int(missing[0])}) are in no part")
    W = parts[0].W
    for part in parts[1:]:
        W = W + part.W
    b = np.sum([p.b for p in parts], axis=0)
    return TreeModel(first.tree, sp.csr_matrix(W), b, counts.astype(bool))


class TreeProbabilities:
    """``P(c | x)`` of a probabilistic tree on rows ``X``, lazily: the ``n x K`` matrix is never made.

    The conformal predictors (:class:`svbop.conformal.ConformalSetPredictor`,
    :class:`svbop.conformal.RiskControlSetPredictor`) accept it wherever they accept ``P``: a
    row's classes are found in decreasing probability by the best-first search of SVBOP-HF
    (:func:`svbop.hf.enumerate_leaves`), only as far as the set (or a calibration row's label)
    needs, so the cost follows the sets' sizes, not ``K``.

    Parameters
    ----------
    model : TreeModel or svbop.hf.TreeSearchLayout
        A complete tree model (trained, merged or loaded), or its search layout (at extreme ``K``
        the layout alone, from a model mapped from an uncompressed file: ``TreeModel.save``).
    X : array or scipy sparse matrix of shape (n_samples, n_features)
        The rows' features.
    n_jobs : int or None
        Threads of the search (``None``/1 one, -1 every core); results do not depend on it.

    Attributes
    ----------
    shape : (n_samples, K)
    """

    def __init__(self, model: Any, X: Any, *, n_jobs: int | None = None) -> None:
        if isinstance(model, TreeModel):
            if not model.complete:
                raise ValueError("model is a part of a tree model (not every internal node is trained): merge the"
                                 " parts first")
        elif not all(hasattr(model, a) for a in ("child_ptr", "n_classes", "n_features", "root")):
            raise ValueError(f"model must be a svbop.trees.TreeModel or its svbop.hf.TreeSearchLayout, got "
                             f"{type(model).__name__}")
        from .linear import _as_sorted_csr

        self.model = model
        self.X = _as_sorted_csr(X, int(model.n_features))
        self.n_jobs = n_jobs

    @property
    def n_classes(self) -> int:
        return int(self.model.n_classes)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.X.shape[0], self.n_classes)

    def __len__(self) -> int:
        return self.X.shape[0]

    def __repr__(self) -> str:
        return f"TreeProbabilities(n={len(self)}, K={self.n_classes})"

    def take(self, rows) -> "TreeProbabilities":
        """The rows ``rows`` (a slice, indices or a boolean mask)."""
        out = object.__new__(TreeProbabilities)
        out.model, out.X, out.n_jobs = self.model, self.X[rows], self.n_jobs
        return out

    def toarray(self) -> np.ndarray:
        """The dense ``(n, K)`` matrix (``model.predict_proba``): for checks at small ``K``."""
        if not isinstance(self.model, TreeModel):
            raise ValueError("toarray needs the TreeModel (a search layout holds no predict_proba)")
        return self.model.predict_proba(self.X)

