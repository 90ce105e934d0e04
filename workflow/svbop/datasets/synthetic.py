"""A seeded synthetic text-classification problem with a known class hierarchy.

:func:`make_hierarchical_text` generates bag-of-words documents whose classes are the leaves of
a balanced tree.  Every node of the tree owns a "topic" (a small random set of vocabulary words
with Zipf-like weights); a document of class ``c`` mixes a global background distribution with
the topics of the nodes on ``c``'s root-to-leaf path, plus a little of a sibling class's topic.
The mixture weights are drawn per document from a Dirichlet distribution, so some documents are
clearly about their class while others say little beyond their parent or grandparent topic:
their most likely classes are siblings or cousins.  This per-document variation of the
uncertainty, structured by the tree, is what set-valued prediction exploits.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from .base import Dataset, Hierarchy

__all__ = ["make_hierarchical_text", "balanced_tree", "random_tree"]

logger = logging.getLogger(__name__)


def balanced_tree(branching: Sequence[int]) -> Hierarchy:
    """A complete tree with ``branching[l]`` children per node at depth ``l``.

    Leaves (the classes) are numbered in mixed-radix order: class ``c`` has digits
    ``np.unravel_index(c, branching)``.  Internal nodes follow, level by level (root first,
    id ``n_classes``).  Names: root ``"n"``, internal nodes ``"n/3/7"``, classes ``"c/3/7/1"``
    (the digits of the path from the root).

    Parameters
    ----------
    branching : sequence of int >= 1, length L >= 1
        Children per node at depth 0 .. L - 1; ``n_classes = prod(branching)``.

    Returns
    -------
    Hierarchy
    """
    b = [int(v) for v in branching]
    if len(b) == 0 or any(v < 1 for v in b) or any(v != w for v, w in zip(b, branching)):
        raise ValueError(f"branching: expected a non-empty sequence of integers >= 1, got {tuple(branching)!r}")
    L = len(b)
    K = math.prod(b)
    level_sizes = [math.prod(b[:l]) for l in range(L)]  # internal nodes at depth 0..L-1
    offsets = np.concatenate([[0], np.cumsum(level_sizes)]).astype(np.int64) + K
    n_nodes = K + int(sum(level_sizes))
    parent = np.empty(n_nodes, dtype=np.int64)
    parent[:K] = offsets[L - 1] + np.arange(K) // b[L - 1]
    parent[offsets[0]] = -1
    for l in range(1, L):
        parent[offsets[l] : offsets[l] + level_sizes[l]] = offsets[l - 1] + np.arange(level_sizes[l]) // b[l - 1]

    names: list[str] = []
    digits = np.stack(np.unravel_index(np.arange(K), b), axis=1) if K else np.zeros((0, L), int)
    names.extend("c/" + "/".join(map(str, row)) for row in digits.tolist())
    for l in range(L):
        if l == 0:
            names.append("n")
            continue
        d = np.stack(np.unravel_index(np.arange(level_sizes[l]), b[:l]), axis=1)
        names.extend("n/" + "/".join(map(str, row)) for row in d.tolist())
    return Hierarchy(parent, K, names)


def _zipf_cdf(n: int, exponent: float) -> np.ndarray:
    """Cumulative distribution of Zipf weights ``1 / (rank + 1) ** exponent`` over ``n`` ranks."""
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    return cdf


def _draw_ranks(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    """``size`` draws from the distribution with cumulative probabilities ``cdf``."""
    idx = np.searchsorted(cdf, rng.random(size), side="right")
    return np.minimum(idx, cdf.size - 1)


def random_tree(n_classes: int, leaf_depths: Sequence[float], rng: np.random.Generator | int = 0) -> Hierarchy:
    """A random tree over ``n_classes`` leaves whose depths follow ``leaf_depths``.

    Every class draws its depth ``d`` (``1 .. len(leaf_depths)``) with probability
    ``leaf_depths[d - 1]``.  The tree is then grown top down: at a node of depth ``l``, the
    classes of depth ``l + 1`` become its children, and the deeper ones are dealt at random into
    ``round(n ** (1 / (max_depth - l)))`` new internal children (``n`` of them; group sizes vary,
    drawn from a flat Dirichlet), so that the branching is about even across levels, as in
    real topic directories.  Internal nodes have at least one child; a node may have one.

    Classes are numbered at random over the tree, internal nodes follow (root first, id
    ``n_classes``, then in creation order).  Names as in :func:`balanced_tree`: root ``"n"``,
    internal nodes ``"n/3/7"`` and classes ``"c/3/7/1"`` (the child positions on the path).

    Parameters
    ----------
    n_classes : int >= 1
    leaf_depths : sequence of float >= 0
        Relative frequency of each leaf depth ``1, 2, ...`` (normalised to sum 1).
    rng : numpy Generator or int
        Random generator or seed.

    Returns
    -------
    Hierarchy
    """
    if int(n_classes) != n_classes or n_classes < 1:
        raise ValueError(f"n_classes: expected an integer >= 1, got {n_classes!r}")
    w = np.asarray(leaf_depths, dtype=np.float64).reshape(-1)
    if w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"leaf_depths: expected non-negative weights of depths 1, 2, ..., got {leaf_depths!r}")
    rng = np.random.default_rng(rng)
    K, max_depth = int(n_classes), int(w.size)
    depth_of = rng.choice(np.arange(1, max_depth + 1), size=K, p=w / w.sum())
    order = rng.permutation(K)  # classes dealt in random order: class ids carry no structure

    parent_of: dict[int, int] = {}
    internal_parent: list[int] = [-1]  # internal node i has id K + i
    names: dict[int, str] = {K: "n"}
    stack = [(K, 0, order)]  # (node id, its depth, the classes below it)
    while stack:
        node, level, below = stack.pop()
        here = below[depth_of[below] == level + 1]
        rest = below[depth_of[below] > level + 1]
        prefix = names[node][1:]
        children: list[int] = []
        for c in here.tolist():
            parent_of[c] = node
            children.append(c)
        if rest.size:
            groups = max(1, int(round(rest.size ** (1.0 / (max_depth - level)))))
            groups = min(groups, rest.size)
            cuts = np.sort(rng.choice(np.arange(1, rest.size), size=groups - 1, replace=False)) if groups > 1 else []
            for part in np.split(rest, cuts):
                child = K + len(internal_parent)
                internal_parent.append(node)
                names[child] = f"n{prefix}/{len(children)}"
                children.append(child)
                stack.append((child, level + 1, part))
        for pos, c in enumerate(children):
            if c < K:
                names[c] = f"c{prefix}/{pos}"
    parent = np.empty(K + len(internal_parent), dtype=np.int64)
    parent[:K] = [parent_of[c] for c in range(K)]
    parent[K:] = internal_parent
    return Hierarchy(parent, K, [names[i] for i in range(parent.size)])


def _siblings(rng: np.random.Generator, tree: Hierarchy, y: np.ndarray, branching: tuple[int, ...]) -> np.ndarray:
    """A uniformly random other child of each class's parent (the class itself if it has none)."""
    if branching:  # balanced tree: siblings are the classes sharing the last digit's prefix
        b_last = branching[-1]
        if b_last == 1:
            return y.copy()
        pos = y % b_last
        shift = rng.integers(1, b_last, size=y.size)
        return y - pos + (pos + shift) % b_last
    indptr, kids = tree.children_csr()
    par = tree.parent[y]
    start, n_kids = indptr[par], indptr[par + 1] - indptr[par]
    own = np.empty(y.size, dtype=np.int64)  # position of y among its parent's children
    positions = np.empty(tree.n_nodes, dtype=np.int64)
    positions[kids] = np.arange(kids.size) - np.repeat(indptr[:-1], np.diff(indptr))
    own[:] = positions[y]
    pick = (rng.random(y.size) * np.maximum(n_kids - 1, 1)).astype(np.int64)
    pick = np.where(pick >= own, pick + 1, pick)  # skip y itself
    return np.where(n_kids > 1, kids[start + np.minimum(pick, n_kids - 1)], y)


def _class_probabilities(rng: np.random.Generator, K: int, exponent: float) -> np.ndarray:
    """Zipf class frequencies ``1 / rank ** exponent`` over a random order of the classes."""
    p = np.empty(K)
    p[rng.permutation(K)] = 1.0 / np.arange(1, K + 1, dtype=np.float64) ** exponent
    return p / p.sum()


def make_hierarchical_text(
    n_classes: int = 1000,
    *,
    branching: Sequence[int] | None = (10, 10, 10),
    n_features: int = 20000,
    n_samples: int = 20000,
    doc_length: float = 120,
    seed: int = 0,
    topic_size: int = 30,
    mixture: Sequence[float] | None = None,
    concentration: float = 1.5,
    zipf_exponent: float = 1.0,
    name: str | None = None,
    leaf_depths: Sequence[float] | None = None,
    n_test: int = 0,
    class_size_exponent: float = 0.0,
    doc_length_sigma: float = 0.0,
) -> Dataset:
    """Generate a seeded synthetic text-classification dataset with a known class tree.

    Generative model
    ----------------
    * The classes are the leaves of a complete tree with ``branching[l]`` children per node at
      depth ``l`` (see :func:`balanced_tree`), or, with ``leaf_depths``, of a random tree whose
      leaves lie at depths drawn from ``leaf_depths`` (see :func:`random_tree`).
    * Every non-root node owns a topic: ``topic_size`` words drawn at random from the
      ``n_features`` vocabulary, with Zipf weights ``1 / rank ** zipf_exponent``.  The background
      is a Zipf distribution over the whole vocabulary, in a random word order.
    * Document ``i`` of class ``c`` at depth ``d`` has ``max(1, Poisson(doc_length))`` words
      (or, with ``doc_length_sigma > 0``, a log-normal number with median ``doc_length``: the
      long tail of web pages).  Its mixture weights over the components -- background, the
      topics of ``c``'s ancestors at depth ``1 .. d - 1``, ``c``'s own topic and the topic of a
      random sibling of ``c`` (another child of its parent) -- are drawn from
      ``Dirichlet(concentration * mixture)``.  Word counts per component are multinomial, and
      words are drawn from each component's distribution.
    * Labels are balanced: every class gets ``n_samples // n_classes`` documents and
      ``n_samples % n_classes`` random classes one more; the order is shuffled.  With
      ``class_size_exponent > 0`` class frequencies are long-tailed instead (Zipf over a random
      order of the classes), and every class has at least one training document.
    * With ``n_test > 0`` the last ``n_test`` rows form a test part (``Dataset.part``:
      ``"train"`` / ``"test"``, for the split ``test: source``), drawn from the same class
      frequencies; the training part has ``n_samples - n_test`` rows.

    A small ``concentration`` makes the per-document weights vary a lot: documents whose class
    weight is large are easy, those dominated by background and ancestor topics are ambiguous
    among siblings or cousins.

    Parameters
    ----------
    n_classes : int
        Number of classes ``K``; must equal ``prod(branching)`` for a balanced tree.
    branching : sequence of int, optional
        Children per node at each depth, root first; its length ``L`` is the depth of the leaves.
        Ignored (may be None) when ``leaf_depths`` is given.
    n_features : int
        Vocabulary size ``V`` (columns of ``X``).
    n_samples : int
        Number of documents ``N`` (training and test parts together).
    doc_length : float
        Mean (Poisson) or median (log-normal) number of words per document.
    seed : int
        Seed of ``numpy.random.default_rng``; equal seeds give identical datasets.
    topic_size : int
        Words per node topic.
    mixture : sequence of float, length L + 2, optional
        Mean mixture weights of (background, depth-1 topic, ..., depth-L (class) topic, sibling
        topic); normalised to sum 1.  Default: background 0.40, the class topic 0.30, a
        sibling's topic 0.05, and 0.25 shared equally by the ancestor topics at depths
        ``1 .. d - 1`` (added to the class topic when ``d == 1``).  Only with ``branching``.
    concentration : float > 0
        Dirichlet concentration (sum of the Dirichlet parameters); smaller = more variation in
        how clearly a document shows its class.
    zipf_exponent : float >= 0
        Exponent of the Zipf word weights (background and topics).
    name : str, optional
        Dataset name; default ``"synthetic-text-{n_classes}"``.
    leaf_depths : sequence of float, optional
        Relative frequencies of leaf depths ``1, 2, ...`` for a random tree of any ``K``.
    n_test : int >= 0
        Rows of the test part (the last ones); 0 = no parts.
    class_size_exponent : float >= 0
        Zipf exponent of the class frequencies; 0 = balanced classes.
    doc_length_sigma : float >= 0
        Standard deviation of ``log(document length)``; 0 = Poisson lengths.

    Returns
    -------
    Dataset
        ``X``: CSR float32 term counts, shape ``(n_samples, n_features)``; ``y`` int64;
        ``class_names`` like ``"c/3/7/1"``; ``hierarchy`` the class tree; ``synthetic=True``;
        ``part`` when ``n_test > 0``.

    Raises
    ------
    ValueError
        If ``prod(branching) != n_classes`` or an argument is out of range (named in the message).
    """
    t0 = time.perf_counter()
    for arg, value, low in (("n_features", n_features, 1), ("n_samples", n_samples, 1), ("topic_size", topic_size, 1),
                            ("n_test", n_test, 0)):
        if int(value) != value or value < low:
            raise ValueError(f"{arg}: expected an integer >= {low}, got {value!r}")
    n_features, n_samples, topic_size, n_test = int(n_features), int(n_samples), int(topic_size), int(n_test)
    for arg, value in (("doc_length_sigma", doc_length_sigma), ("class_size_exponent", class_size_exponent)):
        if not (np.isfinite(value) and value >= 0):
            raise ValueError(f"{arg}: expected a number >= 0, got {value!r}")
    if leaf_depths is not None:
        if int(n_classes) != n_classes or n_classes < 1:
            raise ValueError(f"n_classes: expected an integer >= 1, got {n_classes!r}")
        if mixture is not None:
            raise ValueError("mixture: only with a balanced tree (branching), not with leaf_depths")
        K, L, b = int(n_classes), len(leaf_depths), ()
    else:
        b = tuple(int(v) for v in branching) if branching is not None and not isinstance(branching, (str, bytes)) else ()
        if len(b) == 0 or any(v < 1 for v in b):
            raise ValueError(f"branching: expected a non-empty sequence of integers >= 1, got {branching!r}")
        K = math.prod(b)
        if int(n_classes) != n_classes or int(n_classes) != K:
            raise ValueError(f"n_classes: {n_classes!r} must equal prod(branching) = prod({b}) = {K}")
        L = len(b)
    n_train = n_samples - n_test
    if n_test and n_train < (K if class_size_exponent > 0 else 1):
        raise ValueError(
            f"n_test: {n_test} leaves {n_train} training rows of {n_samples}; need at least "
            f"{K if class_size_exponent > 0 else 1} (every class once)"
        )
    if class_size_exponent > 0 and n_train < K:
        raise ValueError(f"n_samples: {n_samples} rows cannot give each of the {K} classes a training document")
    if not (np.isfinite(doc_length) and doc_length > 0):
        raise ValueError(f"doc_length: expected a positive number, got {doc_length!r}")
    if not (np.isfinite(concentration) and concentration > 0):
        raise ValueError(f"concentration: expected a positive number, got {concentration!r}")
    if not (np.isfinite(zipf_exponent) and zipf_exponent >= 0):
        raise ValueError(f"zipf_exponent: expected a number >= 0, got {zipf_exponent!r}")
    if mixture is None:
        m = np.zeros(L + 2)
        m[0], m[L], m[L + 1] = 0.40, 0.30, 0.05
        if L > 1:
            m[1:L] = 0.25 / (L - 1)
        else:
            m[L] += 0.25
    else:
        m = np.asarray(mixture, dtype=np.float64)
        if m.shape != (L + 2,) or not np.all(np.isfinite(m)) or np.any(m < 0) or m.sum() <= 0:
            raise ValueError(
                f"mixture: expected {L + 2} non-negative weights (background, depths 1..{L}, sibling), got {mixture!r}"
            )
    m = m / m.sum()

    rng = np.random.default_rng(seed)
    tree = random_tree(K, leaf_depths, rng) if leaf_depths is not None else balanced_tree(b)
    depth = tree.depth()

    # Labels: balanced, remainder to random classes, shuffled; or long-tailed.
    part = None
    if class_size_exponent > 0:
        p = _class_probabilities(rng, K, float(class_size_exponent))
        y_train = rng.permutation(np.r_[np.arange(K), rng.choice(K, size=n_train - K, p=p)].astype(np.int64))
        y = np.r_[y_train, rng.choice(K, size=n_test, p=p).astype(np.int64)]
    else:
        per_class = np.full(K, n_samples // K, dtype=np.int64)
        per_class[rng.choice(K, size=n_samples % K, replace=False)] += 1
        y = rng.permutation(np.repeat(np.arange(K, dtype=np.int64), per_class))
    if n_test:
        part = np.array(["train"] * n_train + ["test"] * n_test, dtype=object)

    # Topics: one row of word ids per node (the root's row is unused).
    topics = rng.integers(0, n_features, size=(tree.n_nodes, topic_size), dtype=np.int64)
    background_words = rng.permutation(n_features).astype(np.int64)

    # Component node of every (document, component): ancestors of y at depths 1..L (the class
    # itself in column d and beyond, where those components have no weight), a sibling.
    nodes = np.full((n_samples, L + 2), -1, dtype=np.int64)
    d_y = depth[y]
    nodes[:, L] = y
    anc, at = y.copy(), d_y.copy()
    for l in range(L - 1, 0, -1):  # every node is at most one level below l + 1: one step up
        up = at > l
        anc = np.where(up, tree.parent[anc], anc)
        at = np.where(up, at - 1, at)
        nodes[:, l] = np.where(d_y > l, anc, y)
    nodes[:, L + 1] = _siblings(rng, tree, y, b)
    if leaf_depths is None:
        assert np.all(depth[nodes[:, 1:]] == np.r_[np.arange(1, L + 1), L])

    # Per-document mixture weights and word counts per component.
    if doc_length_sigma > 0:
        lengths = np.maximum(np.rint(doc_length * rng.lognormal(0.0, doc_length_sigma, size=n_samples)), 1).astype(np.int64)
    else:
        lengths = np.maximum(rng.poisson(doc_length, size=n_samples), 1)
    weights = np.zeros((n_samples, L + 2))
    for d in np.unique(d_y) if leaf_depths is not None else [L]:
        md = m.copy()
        if leaf_depths is not None:  # ancestors at depths 1..d-1 share 0.25; columns d..L-1 unused
            md[1:L] = 0.0
            md[1:d] = 0.25 / (d - 1) if d > 1 else 0.0
            md[L] = 0.30 + (0.25 if d == 1 else 0.0)
        active = md > 0  # components with zero weight are left out of the Dirichlet
        rows = d_y == d if leaf_depths is not None else slice(None)
        n_rows = int(np.count_nonzero(rows)) if leaf_depths is not None else n_samples
        if active.sum() == 1:
            weights[rows, np.flatnonzero(active)[0]] = 1.0
        else:
            sub = np.zeros((n_rows, L + 2))
            sub[:, active] = rng.dirichlet(concentration * md[active], size=n_rows)
            weights[rows] = sub
    weights /= weights.sum(axis=1, keepdims=True)
    counts = rng.multinomial(lengths, weights)

    # One token per word: its document and its component's node, then its word id.
    flat_counts = counts.ravel()
    tok_doc = np.repeat(np.repeat(np.arange(n_samples, dtype=np.int64), L + 2), flat_counts)
    tok_node = np.repeat(nodes.ravel(), flat_counts)
    words = np.empty(tok_node.size, dtype=np.int64)
    is_bg = tok_node < 0
    n_bg = int(is_bg.sum())
    words[is_bg] = background_words[_draw_ranks(rng, _zipf_cdf(n_features, zipf_exponent), n_bg)]
    topical = ~is_bg
    ranks = _draw_ranks(rng, _zipf_cdf(topic_size, zipf_exponent), tok_node.size - n_bg)
    words[topical] = topics[tok_node[topical], ranks]

    X = sp.coo_matrix(
        (np.ones(words.size, dtype=np.float32), (tok_doc, words)), shape=(n_samples, n_features)
    ).tocsr()
    X.sum_duplicates()
    X.sort_indices()

    names = tree.node_names
    assert names is not None
    shape = f"branching={b}" if leaf_depths is None else f"leaf_depths={tuple(float(v) for v in leaf_depths)}"
    params = (
        f"n_classes={K}, {shape}, n_features={n_features}, n_samples={n_samples}, n_test={n_test}, "
        f"class_size_exponent={class_size_exponent}, doc_length_sigma={doc_length_sigma}, "
        f"doc_length={doc_length}, topic_size={topic_size}, mixture={tuple(np.round(m, 4).tolist())}, "
        f"concentration={concentration}, zipf_exponent={zipf_exponent}, seed={seed}"
    )
    description = (
        "Synthetic hierarchical text classification (svbop.datasets.make_hierarchical_text). "
        "Classes are the leaves of a complete tree; every non-root node owns a topic of random "
        "vocabulary words with Zipf weights. Each document's words come from a per-document "
        "Dirichlet mixture of a Zipf background, the topics of its class's ancestors, its class's "
        "topic and a random sibling class's topic, so documents range from clear to ambiguous "
        "among siblings/cousins. X holds term counts. Parameters: " + params + "."
    )
    dataset = Dataset(
        name=name if name is not None else f"synthetic-text-{K}",
        X=X,
        y=y,
        class_names=names[:K],
        hierarchy=tree,
        description=description,
        synthetic=True,
        part=part,
    )
    logger.info(
        "generated %s: %d documents, %d classes, %d words, nnz=%d in %.2f s",
        dataset.name, n_samples, K, n_features, X.nnz, time.perf_counter() - t0,
    )
    return dataset
