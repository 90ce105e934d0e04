"""Containers for classification data: :class:`Hierarchy` (a class tree) and :class:`Dataset`.

A :class:`Dataset` holds raw inputs ``X`` (images, dense features or sparse term counts),
integer labels ``y``, class names, optionally a :class:`Hierarchy` over the classes and a record
id per row (e.g. the FASTA ids, to join per-sequence annotations such as protein domains).  It is
saved as a single ``.npz`` file without pickled objects (zlib-compressed unless ``X`` is a dense
matrix of floats).  A per-row group (a column of the user's data, ``format.group_column``) can
ride along, for group-conditional (Mondrian) conformal sets.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..io import NpzReader, matrix_arrays, save_arrays

__all__ = ["X_KINDS", "Dataset", "Hierarchy", "decode_strings", "encode_groups", "encode_strings"]

logger = logging.getLogger(__name__)

#: Version of the ``.npz`` layout written by :meth:`Dataset.save` (2: text inputs, x_kind, part;
#: 3: record ids; 4: per-row groups; 5: per-row weights and group indicator columns).  Files of
#: older versions still load (a version-2 file has no ids, a version-3 file no groups, a version-4
#: file no weights or group columns).
FORMAT_VERSION = 5

#: What the rows of ``Dataset.X`` are.  Numeric: ``dense`` (N, D) features, ``sparse`` (N, D)
#: CSR term counts or features, ``images`` (N, H, W) or (N, C, H, W) pixels.  Strings (one per
#: row): ``text`` documents, ``sequences`` (DNA / protein), ``image_paths`` (image files
#: relative to the dataset's raw folder).
X_KINDS = ("dense", "sparse", "images", "text", "sequences", "image_paths")
_STRING_KINDS = ("text", "sequences", "image_paths")


def encode_strings(strings) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes of all strings concatenated, and offsets (N + 1,), for pickle-free storage.

    A fixed-width numpy string array would pad every row to the longest one (4 bytes per
    character); this layout costs the text's own size.
    """
    encoded = [s.encode("utf-8") for s in strings]
    lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return data, offsets


def decode_strings(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Inverse of :func:`encode_strings`: an object array of ``str``."""
    raw = np.asarray(data, dtype=np.uint8).tobytes()
    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or offsets[-1] != len(raw) or np.any(np.diff(offsets) < 0):
        raise ValueError("inconsistent string offsets")
    out = np.empty(offsets.size - 1, dtype=object)
    for i in range(out.size):
        out[i] = raw[offsets[i] : offsets[i + 1]].decode("utf-8")
    return out


def encode_groups(groups) -> tuple[np.ndarray, np.ndarray]:
    """Group names and one integer code per row: ``names[codes]`` gives ``groups`` back.

    Parameters
    ----------
    groups : sequence of str, shape (N,)
        One group value per row.

    Returns
    -------
    names : ndarray of str, shape (G,)
        The distinct values, sorted.
    codes : ndarray of int64, shape (N,)
        Each row's index into ``names``.

    Examples
    --------
    >>> names, codes = encode_groups(["b", "a", "b"])
    >>> names.tolist(), codes.tolist()
    (['a', 'b'], [1, 0, 1])
    """
    arr = np.asarray(groups, dtype=object)
    if arr.ndim != 1:
        raise ValueError(f"groups: expected a 1-D array (one group per row), got shape {arr.shape}")
    names, codes = np.unique(arr.astype(np.str_), return_inverse=True)
    return names.astype(np.str_), codes.ravel().astype(np.int64)


@dataclass(eq=False)
class Hierarchy:
    """A rooted tree over the classes of a multi-class problem.

    Parameters
    ----------
    parent : ndarray of int, shape (n_nodes,)
        Parent node of every node.  Nodes ``0 .. n_classes - 1`` are the classes (the leaves),
        in class order; nodes ``>= n_classes`` are internal.  The root has parent ``-1``.
    n_classes : int
        Number of classes (leaves), ``K``.
    node_names : list of str, optional
        One name per node (length ``n_nodes``).

    Raises
    ------
    ValueError
        If the tree is malformed: not exactly one root, a parent index out of range, a cycle,
        an internal node without children, a class with children, or a node that does not
        reach the root.  The message names the offending node.

    Examples
    --------
    >>> h = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), n_classes=4)
    >>> h.root, h.depth().tolist(), h.path(2).tolist()
    (6, [2, 2, 2, 2, 1, 1, 0], [6, 5, 2])
    """

    parent: np.ndarray
    n_classes: int
    node_names: list[str] | None = None
    _depth: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parent = np.asarray(self.parent)
        if parent.ndim != 1 or parent.size == 0:
            raise ValueError(f"parent: expected a non-empty 1-D array, got shape {parent.shape}")
        if parent.dtype.kind not in "iu":
            if parent.dtype.kind == "f" and np.all(np.isfinite(parent)) and np.all(parent == np.round(parent)):
                parent = parent.astype(np.int64)
            else:
                raise ValueError(f"parent: expected integer node ids, got dtype {parent.dtype}")
        parent = parent.astype(np.int64, copy=True)
        n_nodes = parent.size
        K = int(self.n_classes)
        if K != self.n_classes or not 1 <= K <= n_nodes:
            raise ValueError(f"n_classes: expected an integer in 1..{n_nodes} (n_nodes), got {self.n_classes!r}")
        self.n_classes = K

        bad = np.flatnonzero((parent < -1) | (parent >= n_nodes))
        if bad.size:
            raise ValueError(f"parent: node {bad[0]} has parent {parent[bad[0]]}, not a node id in 0..{n_nodes - 1} (or -1 for the root)")
        self_loop = np.flatnonzero(parent == np.arange(n_nodes))
        if self_loop.size:
            raise ValueError(f"parent: node {self_loop[0]} is its own parent (a cycle)")
        roots = np.flatnonzero(parent == -1)
        if roots.size != 1:
            shown = roots[:5].tolist()
            raise ValueError(f"parent: expected exactly one root (parent -1), found {roots.size}: nodes {shown}")
        root = int(roots[0])

        has_parent = parent >= 0
        n_children = np.bincount(parent[has_parent], minlength=n_nodes)
        leaf_parents = np.flatnonzero(n_children[:K] > 0)
        if leaf_parents.size:
            c = int(leaf_parents[0])
            child = int(np.flatnonzero(parent == c)[0])
            raise ValueError(f"parent: class {c} (a leaf) has a child, node {child}")
        childless = np.flatnonzero(n_children[K:] == 0)
        if childless.size:
            raise ValueError(f"parent: internal node {K + int(childless[0])} has no children")

        # Pointer doubling: after ceil(log2 n) + 1 rounds every node that reaches the root
        # points at it and carries its depth; nodes on (or hanging off) a cycle do not.
        jump = np.where(has_parent, parent, root)
        depth = has_parent.astype(np.int64)
        for _ in range(int(np.ceil(np.log2(max(n_nodes, 2)))) + 1):
            depth = depth + depth[jump]
            jump = jump[jump]
        orphan = np.flatnonzero(jump != root)
        if orphan.size:
            raise ValueError(f"parent: node {orphan[0]} does not reach the root {root} (the tree has a cycle)")

        if self.node_names is not None:
            names = [str(s) for s in self.node_names]
            if len(names) != n_nodes:
                raise ValueError(f"node_names: expected {n_nodes} names (one per node), got {len(names)}")
            self.node_names = names
        # The kernels index with these arrays without bounds checks: once validated they must not
        # change.  Read-only views of private copies (a view cannot be made writeable again) and
        # no re-assignment (see __setattr__).
        parent.flags.writeable = False
        depth.flags.writeable = False
        object.__setattr__(self, "parent", parent.view())
        object.__setattr__(self, "_depth", depth.view())
        object.__setattr__(self, "_frozen", True)

    def __setattr__(self, name: str, value) -> None:
        if name in ("parent", "n_classes", "_depth") and getattr(self, "_frozen", False):
            raise AttributeError(f"Hierarchy.{name} is fixed once validated; build a new Hierarchy instead")
        object.__setattr__(self, name, value)

    def __setstate__(self, state: dict) -> None:
        """Unpickling and :func:`copy.deepcopy` bring back writeable copies: make them read-only."""
        self.__dict__.update(state)
        for name in ("parent", "_depth"):
            arr = np.array(state[name], dtype=np.int64)
            arr.flags.writeable = False
            self.__dict__[name] = arr.view()

    # ------------------------------------------------------------------ structure
    @property
    def n_nodes(self) -> int:
        """Number of nodes, leaves included."""
        return int(self.parent.size)

    @property
    def root(self) -> int:
        """Node id of the root."""
        return int(np.flatnonzero(self.parent == -1)[0])

    def depth(self) -> np.ndarray:
        """Depth of every node, shape (n_nodes,), int64; the root has depth 0."""
        return self._depth.copy()

    def children(self) -> list[np.ndarray]:
        """Children of every node: a list of ``n_nodes`` sorted int64 arrays (empty for leaves)."""
        indptr, indices = self.children_csr()
        return [indices[indptr[i] : indptr[i + 1]] for i in range(self.n_nodes)]

    def children_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """Children in compressed form: node ``i``'s children are ``indices[indptr[i]:indptr[i+1]]``.

        Returns
        -------
        indptr : ndarray of int64, shape (n_nodes + 1,)
        indices : ndarray of int64, shape (n_nodes - 1,), sorted within each node
        """
        nodes = np.flatnonzero(self.parent >= 0)
        order = np.argsort(self.parent[nodes], kind="stable")
        indices = nodes[order].astype(np.int64)
        counts = np.bincount(self.parent[nodes], minlength=self.n_nodes)
        indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return indptr, indices

    def path(self, node: int) -> np.ndarray:
        """Node ids from the root down to ``node`` (both included), int64."""
        node = int(node)
        if not 0 <= node < self.n_nodes:
            raise ValueError(f"node: expected a node id in 0..{self.n_nodes - 1}, got {node}")
        out = np.empty(self._depth[node] + 1, dtype=np.int64)
        for i in range(out.size - 1, -1, -1):
            out[i] = node
            node = int(self.parent[node])
        return out

    def keep_classes(self, classes) -> Hierarchy:
        """The tree over some of the classes: the others' leaves go, and so does every inner node
        left without a class below it.

        Parameters
        ----------
        classes : array-like of int
            The classes to keep (leaf ids in ``0 .. n_classes - 1``, at least one).

        Returns
        -------
        Hierarchy
            Leaf ``i`` is the ``i``-th kept class in increasing order; inner nodes keep their
            order and names (single-child chains that pruning leaves behind are kept, as the
            builders keep them).

        Examples
        --------
        >>> h = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), n_classes=4)
        >>> h.keep_classes([0, 1]).parent.tolist()  # node 5 is left without a class
        [2, 2, 3, -1]
        """
        kept = np.asarray(classes)
        if kept.ndim != 1 or kept.size == 0 or (kept.dtype.kind not in "iu"):
            raise ValueError(f"classes: expected a non-empty 1-D array of class ids, got {kept!r}")
        kept = np.unique(kept.astype(np.int64))
        if kept[0] < 0 or kept[-1] >= self.n_classes:
            raise ValueError(f"classes: class ids must be in 0..{self.n_classes - 1}, got {int(kept[0] if kept[0] < 0 else kept[-1])}")
        alive = np.zeros(self.n_nodes, dtype=bool)
        alive[kept] = True
        for d in range(int(self._depth.max()), 0, -1):  # a node lives when a child of it does
            alive[self.parent[alive & (self._depth == d)]] = True
        new_id = np.full(self.n_nodes, -1, dtype=np.int64)
        new_id[alive] = np.arange(int(alive.sum()))  # leaves (ids < K) first, as before
        old_parent = self.parent[alive]
        parent = np.where(old_parent >= 0, new_id[np.maximum(old_parent, 0)], -1)
        names = [self.node_names[i] for i in np.flatnonzero(alive)] if self.node_names is not None else None
        return Hierarchy(parent, n_classes=int(kept.size), node_names=names)

    def ancestors_at_depth(self, nodes: np.ndarray, d: int) -> np.ndarray:
        """Ancestor at depth ``d`` of every node in ``nodes`` (a node of depth ``<= d`` maps to itself).

        Parameters
        ----------
        nodes : array-like of int, shape (n,)
        d : int, >= 0

        Returns
        -------
        ndarray of int64, shape (n,)
        """
        out = np.asarray(nodes, dtype=np.int64).copy()
        if d < 0:
            raise ValueError(f"d: expected a depth >= 0, got {d}")
        while True:
            deeper = self._depth[out] > d
            if not deeper.any():
                return out
            out[deeper] = self.parent[out[deeper]]


# ---------------------------------------------------------------------- dataset
def _row_strings(values, n_rows: int, what: str) -> np.ndarray:
    """One ``str`` per row (``what``: "id" or "group") as a 1-D object array of ``n_rows`` entries."""
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{what}s: expected one {what} per row, got a single string {values!r}")
    arr = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
    if arr.ndim != 1:
        raise ValueError(f"{what}s: expected a 1-D array (one {what} per row), got shape {arr.shape}")
    if arr.shape[0] != n_rows:
        raise ValueError(f"{what}s: has {arr.shape[0]} {what}s but there are {n_rows} rows")
    out = np.empty(n_rows, dtype=object)
    out[:] = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in arr]
    return out


def _check_ids(ids, n_rows: int) -> np.ndarray:
    """Row ids as a 1-D object array of ``str`` with ``n_rows`` entries; warns about repeats."""
    out = _row_strings(ids, n_rows, "id")
    if n_rows:
        # After sorting, repeated ids sit side by side: N log N, no pairwise comparison.
        sorted_ids = np.sort(out.astype(np.str_), kind="stable")
        repeated = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
        if repeated.size:
            first = str(sorted_ids[repeated[0]])
            rows = np.flatnonzero(out == first)[:2].tolist()
            n_repeated = np.unique(sorted_ids[repeated]).size
            logger.warning(
                "ids: %d id(s) occur more than once, e.g. %r at rows %d and %d; joins on ids "
                "(e.g. domain annotations) will refuse this dataset", n_repeated, first, rows[0], rows[1],
            )
    return out


def _check_groups(groups, n_rows: int) -> np.ndarray:
    """Row groups as a 1-D object array of ``str`` with ``n_rows`` entries."""
    return _row_strings(groups, n_rows, "group")


def _check_weights(weights, n_rows: int) -> np.ndarray:
    """Row weights as ``n_rows`` finite float64 values ``>= 0``."""
    w = np.asarray(weights)
    if w.ndim != 1 or w.shape[0] != n_rows or w.dtype.kind not in "iuf":
        raise ValueError(f"weights: expected {n_rows} numbers (one per row), got {w.dtype} of shape {w.shape}")
    w = w.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(w) | (w < 0))
    if bad.size:
        raise ValueError(f"weights: row {int(bad[0])}: {w[bad[0]]!r} is not a finite weight >= 0")
    return w


def _check_group_columns(columns, n_rows: int) -> np.ndarray:
    """Group indicator columns as a bool ``(n_rows, G)`` array (0/1 or booleans)."""
    A = np.asarray(columns)
    if A.ndim != 2 or A.shape[0] != n_rows or A.dtype.kind not in "iufb":
        raise ValueError(f"group_columns: expected ({n_rows}, G) indicators, got {A.dtype} of shape {A.shape}")
    if A.dtype != bool and not np.all((A == 0) | (A == 1)):
        raise ValueError("group_columns: expected group indicators, 0 or 1")
    return A.astype(bool)


@dataclass(eq=False)
class Dataset:
    """A labelled multi-class dataset.

    Parameters
    ----------
    name : str
        Short identifier, e.g. ``"digits"``.
    X : ndarray, scipy.sparse CSR matrix, or sequence of str
        Raw inputs, first axis = samples: images ``(N, H, W)`` or ``(N, C, H, W)``, dense
        features ``(N, D)``, sparse term counts ``(N, V)`` (other sparse formats are converted
        to CSR), or one string per row (documents, sequences, image paths), held as a 1-D
        object array of ``str``.
    y : ndarray of int, shape (N,)
        Class indices in ``0 .. K - 1``; stored as int64.
    class_names : list of str, length K
    hierarchy : Hierarchy, optional
        Class tree whose leaves ``0 .. K - 1`` are the classes.
    description : str
        Free text: source, licence, how it was made.
    synthetic : bool
        True for generated data.
    x_kind : str, optional
        What the rows of ``X`` are, one of :data:`X_KINDS`.  Inferred when empty: ``sparse``
        for a sparse X, ``images`` for 3-D/4-D arrays, ``dense`` for 2-D, ``text`` for strings.
    part : ndarray of str, shape (N,), optional
        The part of the source each row came from (e.g. ``"train"``, ``"test"``), for splits
        that follow the source's own train/test division.
    ids : sequence of str, shape (N,), optional
        An identifier per row (e.g. the FASTA record id), held as a 1-D object array of ``str``,
        to join per-record annotations (protein domains) to rows.  Ids should be unique, but a
        repeated id only logs a warning: it matters to a join, and the joins (e.g.
        :func:`svbop.features.domains.domain_encoding`) refuse it, while a dataset that never
        uses its ids should still parse, save and train.
    groups : sequence of str, shape (N,), optional
        A group per row from a column of the user's data (``format.group_column``), held as a
        1-D object array of ``str``, for group-conditional (Mondrian) conformal sets; saved as
        the distinct names and an integer code per row (:func:`encode_groups`).
    weights : ndarray of float, shape (N,), optional
        A likelihood ratio per row (covariate shift, Tibshirani et al. 2019: finite, >= 0), for
        weighted conformal sets; stored as float64.
    group_columns : ndarray of bool, shape (N, G), optional
        Group indicator columns (a row may be in several groups, or none), for sets covering
        within every group (Gibbs, Cherian, Candès 2023); stored as bool.
    group_column_names : list of str, length G, optional
        The columns' names (``group_0`` ... when not given).
    """

    name: str
    X: np.ndarray | sp.csr_matrix
    y: np.ndarray
    class_names: list[str]
    hierarchy: Hierarchy | None = None
    description: str = ""
    synthetic: bool = False
    x_kind: str = ""
    part: np.ndarray | None = None
    ids: np.ndarray | None = None
    groups: np.ndarray | None = None
    weights: np.ndarray | None = None
    group_columns: np.ndarray | None = None
    group_column_names: list[str] | None = None

    def __post_init__(self) -> None:
        self.name = str(self.name)
        self.description = str(self.description)
        self.synthetic = bool(self.synthetic)
        if sp.issparse(self.X):
            X = self.X if isinstance(self.X, sp.csr_matrix) else sp.csr_matrix(self.X)
            if X.ndim != 2:
                raise ValueError(f"X: a sparse X must be 2-D, got shape {X.shape}")
            inferred = "sparse"
        elif isinstance(self.X, (list, tuple)) or (isinstance(self.X, np.ndarray) and self.X.dtype.kind in "OUS"):
            X = np.empty(len(self.X), dtype=object)
            X[:] = [str(v) for v in self.X]
            if isinstance(self.X, np.ndarray) and self.X.ndim != 1:
                raise ValueError(f"X: an array of strings must be 1-D (one string per row), got shape {self.X.shape}")
            inferred = "text"
        else:
            X = np.asarray(self.X)
            if X.ndim < 1:
                raise ValueError("X: expected an array with a sample axis, got a scalar")
            inferred = "images" if X.ndim >= 3 else "dense"
        self.X = X
        kind = str(self.x_kind) or inferred
        if kind not in X_KINDS:
            raise ValueError(f"x_kind: {kind!r} is not one of {list(X_KINDS)}")
        if (kind in _STRING_KINDS) != (inferred == "text"):
            raise ValueError(f"x_kind: {kind!r} does not fit X ({inferred} data)")
        self.x_kind = kind
        y = np.asarray(self.y)
        if y.ndim != 1:
            raise ValueError(f"y: expected a 1-D array, got shape {y.shape}")
        if y.dtype.kind not in "iu":
            if y.size and not (y.dtype.kind == "f" and np.all(y == np.round(y))):
                raise ValueError(f"y: expected integer class indices, got dtype {y.dtype}")
        y = y.astype(np.int64)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"y: has {y.shape[0]} labels but X has {X.shape[0]} samples")
        self.class_names = [str(s) for s in self.class_names]
        K = len(self.class_names)
        if K == 0:
            raise ValueError("class_names: expected at least one class")
        if y.size and (y.min() < 0 or y.max() >= K):
            bad = int(y[(y < 0) | (y >= K)][0])
            raise ValueError(f"y: label {bad} out of range 0..{K - 1} (len(class_names) = {K})")
        self.y = y
        if self.part is not None:
            part = np.asarray(self.part).astype(np.str_)
            if part.shape != y.shape:
                raise ValueError(f"part: expected one part name per row, shape {y.shape}, got {part.shape}")
            self.part = part
        if self.ids is not None:
            self.ids = _check_ids(self.ids, y.shape[0])
        if self.groups is not None:
            self.groups = _check_groups(self.groups, y.shape[0])
        if self.weights is not None:
            self.weights = _check_weights(self.weights, y.shape[0])
        if self.group_columns is not None:
            self.group_columns = _check_group_columns(self.group_columns, y.shape[0])
            names = self.group_column_names or [f"group_{j}" for j in range(self.group_columns.shape[1])]
            self.group_column_names = [str(v) for v in names]
            if len(self.group_column_names) != self.group_columns.shape[1]:
                raise ValueError(f"group_column_names: {len(self.group_column_names)} names for "
                                 f"{self.group_columns.shape[1]} group columns")
        elif self.group_column_names is not None:
            raise ValueError("group_column_names: given without group_columns")
        if self.hierarchy is not None:
            if not isinstance(self.hierarchy, Hierarchy):
                raise ValueError(f"hierarchy: expected a Hierarchy, got {type(self.hierarchy).__name__}")
            if self.hierarchy.n_classes != K:
                raise ValueError(f"hierarchy: has {self.hierarchy.n_classes} classes but class_names has {K}")

    @property
    def n_samples(self) -> int:
        """Number of samples, ``N``."""
        return int(self.X.shape[0])

    @property
    def n_classes(self) -> int:
        """Number of classes, ``K`` (= ``len(class_names)``)."""
        return len(self.class_names)

    def __repr__(self) -> str:
        kind = f"sparse {self.X.dtype} nnz={self.X.nnz}" if sp.issparse(self.X) else f"{self.x_kind} {self.X.dtype}"
        tree = f", hierarchy with {self.hierarchy.n_nodes} nodes" if self.hierarchy is not None else ""
        return (
            f"Dataset(name={self.name!r}, X {self.X.shape} {kind}, n_classes={self.n_classes}"
            f"{tree}, synthetic={self.synthetic})"
        )

    def keep_classes(self, classes) -> Dataset:
        """The rows of some classes only, the classes renumbered in their order.

        Parameters
        ----------
        classes : array-like of int
            The classes to keep (ids in ``0 .. n_classes - 1``, at least one).

        Returns
        -------
        Dataset
            A new dataset: the kept classes' rows in their order (with their ``part`` and
            ``ids`` and ``groups``), ``class_names`` of the kept classes, ``y`` renumbered to match, and the
            hierarchy pruned to them (:meth:`Hierarchy.keep_classes`).
        """
        kept = np.unique(np.asarray(classes, dtype=np.int64))
        if kept.size == 0 or kept[0] < 0 or kept[-1] >= self.n_classes:
            raise ValueError(f"classes: expected at least one class id in 0..{self.n_classes - 1}, got {np.asarray(classes)!r}")
        new_label = np.full(self.n_classes, -1, dtype=np.int64)
        new_label[kept] = np.arange(kept.size)
        rows = np.flatnonzero(new_label[self.y] >= 0)
        return Dataset(
            name=self.name, X=self.X[rows], y=new_label[self.y[rows]],
            class_names=[self.class_names[c] for c in kept],
            hierarchy=self.hierarchy.keep_classes(kept) if self.hierarchy is not None else None,
            description=self.description, synthetic=self.synthetic, x_kind=self.x_kind,
            part=self.part[rows] if self.part is not None else None,
            ids=self.ids[rows] if self.ids is not None else None,
            groups=self.groups[rows] if self.groups is not None else None,
            weights=self.weights[rows] if self.weights is not None else None,
            group_columns=self.group_columns[rows] if self.group_columns is not None else None,
            group_column_names=self.group_column_names,
        )

    # ------------------------------------------------------------------ storage
    def save(self, path: str | os.PathLike) -> Path:
        """Write the dataset to one ``.npz`` file, atomically, without pickles (zlib-compressed,
        except when ``X`` is a dense matrix of floats).

        Keys: ``format_version``, ``name``, ``description``, ``synthetic``, ``y``,
        ``class_names``, ``x_kind``, ``X_format`` (``"dense"``, ``"csr"`` or ``"text"``), then
        ``X`` (dense), ``X_data``, ``X_indices``, ``X_indptr``, ``X_shape`` (CSR) or
        ``X_text_bytes``, ``X_text_offsets`` (UTF-8 strings); ``part`` when set; ``ids_bytes``,
        ``ids_offsets`` (UTF-8 strings, as for text rows) when ids are set; ``group_names``,
        ``group_codes`` (:func:`encode_groups`) when groups are set; ``weights`` (float64) when
        set; ``group_columns`` (bool) and ``group_column_names`` when set; with a hierarchy also
        ``hierarchy_parent``, ``hierarchy_n_classes`` and, when named, ``hierarchy_node_names``.

        Returns
        -------
        pathlib.Path
            The path written.
        """
        path = Path(path)
        arrays: dict[str, np.ndarray] = {
            "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
            "name": np.array(self.name, dtype=np.str_),
            "description": np.array(self.description, dtype=np.str_),
            "synthetic": np.array(self.synthetic, dtype=np.bool_),
            "y": self.y,
            "class_names": np.array(self.class_names, dtype=np.str_),
        }
        arrays["x_kind"] = np.array(self.x_kind)
        if self.x_kind in _STRING_KINDS:
            arrays["X_format"] = np.array("text")
            arrays["X_text_bytes"], arrays["X_text_offsets"] = encode_strings(self.X)
        else:
            arrays["X_format"] = np.array("csr" if sp.issparse(self.X) else "dense")
            arrays.update(matrix_arrays(self.X, "X"))
        if self.part is not None:
            arrays["part"] = self.part
        if self.ids is not None:
            arrays["ids_bytes"], arrays["ids_offsets"] = encode_strings(self.ids)
        if self.groups is not None:
            arrays["group_names"], arrays["group_codes"] = encode_groups(self.groups)
        if self.weights is not None:
            arrays["weights"] = self.weights
        if self.group_columns is not None:
            arrays["group_columns"] = self.group_columns
            arrays["group_column_names"] = np.array(self.group_column_names, dtype=np.str_)
        if self.hierarchy is not None:
            arrays["hierarchy_parent"] = self.hierarchy.parent
            arrays["hierarchy_n_classes"] = np.array(self.hierarchy.n_classes, dtype=np.int64)
            if self.hierarchy.node_names is not None:
                arrays["hierarchy_node_names"] = np.array(self.hierarchy.node_names, dtype=np.str_)
        # a dense matrix of floats (a model's scores, dense features) is stored as it is: zlib
        # shrinks floats little and costs minutes per GB (a 60,000 x 1,000 float64 matrix: 173 s)
        dense_floats = isinstance(self.X, np.ndarray) and self.X.dtype.kind == "f"
        save_arrays(path, compress=not dense_floats, **arrays)
        logger.info("saved dataset %r (%d samples, %d classes) to %s", self.name, self.n_samples, self.n_classes, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> Dataset:
        """Read a dataset written by :meth:`save` (any format version up to :data:`FORMAT_VERSION`;
        files without ids, such as those of version 2, give ``ids=None``; without groups,
        ``groups=None``; without weights or group columns, ``None``).

        Raises
        ------
        ValueError
            If the file is missing, is not a dataset file, lacks a key (the message names the
            file and the key), or holds inconsistent arrays.
        """
        with NpzReader(path, "dataset file") as data:
            get = data.__getitem__
            files = data.files
            version = int(get("format_version"))
            if version > FORMAT_VERSION:
                raise ValueError(f"{path}: format_version {version} is newer than this library's {FORMAT_VERSION}")
            fmt = str(get("X_format"))
            if fmt not in ("csr", "dense", "text"):
                raise ValueError(f"{path}: key 'X_format' is {fmt!r}, expected 'dense', 'csr' or 'text'")
            if fmt == "text":
                try:
                    X = decode_strings(get("X_text_bytes"), get("X_text_offsets"))
                except (ValueError, UnicodeDecodeError) as exc:
                    raise ValueError(f"{path}: unreadable text rows ({exc})") from None
            else:
                X = data.matrix("X")
            ids = None
            if "ids_bytes" in files or "ids_offsets" in files:
                try:
                    ids = decode_strings(get("ids_bytes"), get("ids_offsets"))
                except (ValueError, UnicodeDecodeError) as exc:
                    raise ValueError(f"{path}: unreadable ids ({exc})") from None
            groups = None
            if "group_names" in files or "group_codes" in files:
                names, codes = get("group_names"), get("group_codes")
                if (names.ndim != 1 or codes.ndim != 1 or codes.dtype.kind not in "iu"
                        or (codes.size and (codes.min() < 0 or codes.max() >= names.size))):
                    raise ValueError(f"{path}: inconsistent groups (group_codes must index group_names)")
                groups = names.astype(object)[codes]
            weights = get("weights") if "weights" in files else None
            group_columns = get("group_columns") if "group_columns" in files else None
            column_names = get("group_column_names").tolist() if "group_column_names" in files else None
            hierarchy = None
            if "hierarchy_parent" in files:
                names = get("hierarchy_node_names").tolist() if "hierarchy_node_names" in files else None
                try:
                    hierarchy = Hierarchy(get("hierarchy_parent"), int(get("hierarchy_n_classes")), names)
                except ValueError as exc:
                    raise ValueError(f"{path}: invalid hierarchy ({exc})") from None
            try:
                return cls(
                    name=str(get("name")),
                    X=X,
                    y=get("y"),
                    class_names=get("class_names").tolist(),
                    hierarchy=hierarchy,
                    description=str(get("description")),
                    synthetic=bool(get("synthetic")),
                    x_kind=str(get("x_kind")) if "x_kind" in files else "",
                    part=get("part") if "part" in files else None,
                    ids=ids,
                    groups=groups,
                    weights=weights,
                    group_columns=group_columns,
                    group_column_names=column_names,
                )
            except ValueError as exc:
                raise ValueError(f"{path}: invalid dataset ({exc})") from None
