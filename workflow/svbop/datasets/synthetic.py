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

__all__ = ["make_hierarchical_text", "balanced_tree"]

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


def make_hierarchical_text(
    n_classes: int = 1000,
    *,
    branching: Sequence[int] = (10, 10, 10),
    n_features: int = 20000,
    n_samples: int = 20000,
    doc_length: float = 120,
    seed: int = 0,
    topic_size: int = 30,
    mixture: Sequence[float] | None = None,
    concentration: float = 1.5,
    zipf_exponent: float = 1.0,
    name: str | None = None,
) -> Dataset:
    """Generate a seeded synthetic text-classification dataset with a known class tree.

    Generative model
    ----------------
    * The classes are the leaves of a complete tree with ``branching[l]`` children per node at
      depth ``l`` (see :func:`balanced_tree`).
    * Every non-root node owns a topic: ``topic_size`` words drawn at random from the
      ``n_features`` vocabulary, with Zipf weights ``1 / rank ** zipf_exponent``.  The background
      is a Zipf distribution over the whole vocabulary, in a random word order.
    * Document ``i`` of class ``c`` has ``max(1, Poisson(doc_length))`` words.  Its mixture
      weights over ``L + 2`` components -- background, the topics of ``c``'s ancestors at
      depth ``1 .. L`` (the last being ``c`` itself) and the topic of a random sibling of
      ``c`` -- are drawn from ``Dirichlet(concentration * mixture)``.  Word counts per
      component are multinomial, and words are drawn from each component's distribution.
    * Labels are balanced: every class gets ``n_samples // n_classes`` documents and
      ``n_samples % n_classes`` random classes one more; the order is shuffled.

    A small ``concentration`` makes the per-document weights vary a lot: documents whose class
    weight is large are easy, those dominated by background and ancestor topics are ambiguous
    among siblings or cousins.

    Parameters
    ----------
    n_classes : int
        Number of classes ``K``; must equal ``prod(branching)``.
    branching : sequence of int
        Children per node at each depth, root first; its length ``L`` is the depth of the leaves.
    n_features : int
        Vocabulary size ``V`` (columns of ``X``).
    n_samples : int
        Number of documents ``N``.
    doc_length : float
        Mean number of words per document (Poisson).
    seed : int
        Seed of ``numpy.random.default_rng``; equal seeds give identical datasets.
    topic_size : int
        Words per node topic.
    mixture : sequence of float, length L + 2, optional
        Mean mixture weights of (background, depth-1 topic, ..., depth-L (class) topic, sibling
        topic); normalised to sum 1.  Default: background 0.40, the class topic 0.30, a
        sibling's topic 0.05, and 0.25 shared equally by the ancestor topics at depths
        ``1 .. L - 1`` (added to the class topic when ``L == 1``).
    concentration : float > 0
        Dirichlet concentration (sum of the Dirichlet parameters); smaller = more variation in
        how clearly a document shows its class.
    zipf_exponent : float >= 0
        Exponent of the Zipf word weights (background and topics).
    name : str, optional
        Dataset name; default ``"synthetic-text-{n_classes}"``.

    Returns
    -------
    Dataset
        ``X``: CSR float32 term counts, shape ``(n_samples, n_features)``; ``y`` int64;
        ``class_names`` like ``"c/3/7/1"``; ``hierarchy`` the class tree; ``synthetic=True``.

    Raises
    ------
    ValueError
        If ``prod(branching) != n_classes`` or an argument is out of range (named in the message).
    """
    t0 = time.perf_counter()
    b = tuple(int(v) for v in branching) if not isinstance(branching, (str, bytes)) else ()
    if len(b) == 0 or any(v < 1 for v in b):
        raise ValueError(f"branching: expected a non-empty sequence of integers >= 1, got {branching!r}")
    K = math.prod(b)
    if int(n_classes) != n_classes or int(n_classes) != K:
        raise ValueError(f"n_classes: {n_classes!r} must equal prod(branching) = prod({b}) = {K}")
    L = len(b)
    for arg, value, low in (("n_features", n_features, 1), ("n_samples", n_samples, 1), ("topic_size", topic_size, 1)):
        if int(value) != value or value < low:
            raise ValueError(f"{arg}: expected an integer >= {low}, got {value!r}")
    n_features, n_samples, topic_size = int(n_features), int(n_samples), int(topic_size)
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
    active = m > 0  # components with zero weight are left out of the Dirichlet

    rng = np.random.default_rng(seed)
    tree = balanced_tree(b)
    depth = tree.depth()

    # Labels: balanced, remainder to random classes, shuffled.
    per_class = np.full(K, n_samples // K, dtype=np.int64)
    per_class[rng.choice(K, size=n_samples % K, replace=False)] += 1
    y = rng.permutation(np.repeat(np.arange(K, dtype=np.int64), per_class))

    # Topics: one row of word ids per node (the root's row is unused).
    topics = rng.integers(0, n_features, size=(tree.n_nodes, topic_size), dtype=np.int64)
    background_words = rng.permutation(n_features).astype(np.int64)

    # Component node of every (document, component): ancestors of y at depths 1..L, a sibling.
    nodes = np.full((n_samples, L + 2), -1, dtype=np.int64)
    anc = y.copy()
    for l in range(L, 0, -1):
        nodes[:, l] = anc
        anc = tree.parent[anc]
    b_last = b[-1]
    if b_last > 1:  # a uniformly random sibling (another child of the same parent)
        pos = y % b_last
        shift = rng.integers(1, b_last, size=n_samples)
        nodes[:, L + 1] = y - pos + (pos + shift) % b_last
    else:
        nodes[:, L + 1] = y
    assert np.all(depth[nodes[:, 1:]] == np.r_[np.arange(1, L + 1), L])

    # Per-document mixture weights and word counts per component.
    lengths = np.maximum(rng.poisson(doc_length, size=n_samples), 1)
    weights = np.zeros((n_samples, L + 2))
    if active.sum() == 1:
        weights[:, active] = 1.0
    else:
        weights[:, active] = rng.dirichlet(concentration * m[active], size=n_samples)
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
    params = (
        f"n_classes={K}, branching={b}, n_features={n_features}, n_samples={n_samples}, "
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
    )
    logger.info(
        "generated %s: %d documents, %d classes, %d words, nnz=%d in %.2f s",
        dataset.name, n_samples, K, n_features, X.nnz, time.perf_counter() - t0,
    )
    return dataset
