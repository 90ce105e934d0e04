"""Inference speed of SVBOP-Full, -HSG and -HF against bare scoring ``X W^T + b``, on two problems.

What it measures
----------------
For each problem, on its test rows, in one run and with ``n_jobs = --threads`` everywhere, the
best of ``--repeat`` (3) wall times (``time.perf_counter``) of:

* bare scoring ``svbop.full.linear_scores`` (compiled kernel for sparse ``W``; scipy for dense)
  and, for reference, scipy's ``LinearModel.decision_function``;
* SVBOP-Full the old way, ``svbop.predict_sets(model.predict_proba(X), u)``;
* SVBOP-Full as the paper runs it, ``svbop.full.predict_sets_full_naive`` (per row every class
  scored in turn, the softmax over all K, a full sort, Algorithm 1: the paper's cost model and
  napkinXC's, the reference of the paper's speed-ups);
* SVBOP-Full from features, ``svbop.full.predict_sets_full`` (batched, exp only on candidates);
* SVBOP-HSG, ``svbop.hsg.predict_sets_hsg`` (k=100, HNSW M=20, efC=100: Table 5's LSHTC1 row),
  and, to see what dominates it, the bare HNSW query for k=100 alone;
* SVBOP-HF, ``svbop.hf.predict_sets_hf``, for every tree;

for the utilities u_F1 (``fbeta:beta=1``) and u_{2.2,1.2} (``credal:delta=2.2,gamma=1.2``).
Every predictor is first run on a few rows (numba compiles its kernels on the first call and
caches them on disk).  The table gives ms/sample, the ratio to bare scoring of the same flat
model, the speed-up over SVBOP-Full (same utility), top-1 (first class of each set), recall,
mean set size and mean utility (``svbop.mean_scores``), the share of rows whose set is the same
as SVBOP-Full's (as sets), and search statistics: HSG's index queries and classes scored per row,
HF's internal nodes expanded per row and the time per expanded node.  Then the targets, PASS/FAIL,
every one a ratio of two figures measured in this run:

* SVBOP-Full <= 1.3 x bare scoring (every flat model and utility);
* dry-run: SVBOP-Full as in the paper >= 10 x the time of SVBOP-Full (every flat model and utility);
* dry-run: SVBOP-HSG (clipped model, k=100) <= 12 x the time of SVBOP-Full (clipped);
* dry-run: SVBOP-HF on the 2-means tree (dense nodes) no slower than SVBOP-Full (dense flat model);
* synthetic LSHTC1-shaped problem: SVBOP-HF on the 2-means tree >= 3 x faster than SVBOP-Full.

Figures of other tools are not quoted here: napkinXC is compared with svbop only within one run,
on identical features, by ``../shared/tools/napkinxc/bench_nxc_vs_svbop.py``.  The machine may be
shared: the load average is printed at the start and end of each problem, and CPU seconds of the whole run at the end.

Problems
--------
``dryrun``: the real LSHTC1 dry-run in ``../shared/data/lshtc1-dryrun`` (1,139 classes), loaded
and featurised (tf-idf, training vocabulary) by ``bench_models.load``, trained as the pipeline's
``lshtc1_dryrun`` entry: flat liblinear ``-s 7 -c 10 -e 0.1 -B 1`` (dense) and the same clipped at
0.1 (``--no-clip`` skips it); trees on the predefined hierarchy ``cat_hier.txt`` and balanced
2-means (max_leaves 100), C=10.

``synthetic``: a seeded problem shaped like LSHTC1: K = 12,166 classes, D = 381,571 features,
about 100 non-zeros per row, sparse (clipped) weights.  It is built with structure, so that the
scores and the trees behave as on text:

* feature popularity is Zipf-like (``1 / (rank + 3)``, ranks a random permutation of the ids);
* a hidden hierarchy: 25 topics -> 450 subtopics (uneven sizes) -> the classes.  Every topic has
  a vocabulary of 4,000 features drawn by (square-root) popularity, every subtopic 1,500 (60 %
  from its topic's, the rest fresh) and every class 300 (60 % from its subtopic's), each with
  Zipf-like weights (exponent 0.8, 0.8 and 0.4), so that near classes share features;
* a document of class c is 115 tokens: 22 % from c's vocabulary (restricted, per document, to a
  random quarter of it: documents of one class talk about different things), 20 % from its
  subtopic's, 15 % from its topic's and 43 % background words from the global Zipf popularity;
  that gives about 105 distinct features per row.  The shares set the difficulty: with these a
  nearest-centroid classifier gets about 55 % top-1 (25 % own words: 67 %, 20 %: 48 %);
* 3 to 5 training rows per class (about 48,700) and ``--n-test`` test rows (classes drawn in
  proportion to the training counts); features are the pipeline's tf-idf
  (``svbop.features.tfidf.tfidf_features``, idf fitted on the training rows, L2-normalised rows).

Models of the synthetic problem are real liblinear models trained with svbop:

* flat: ``train_ovr(..., C=--flat-C, eps=0.1, bias=1, clip=0.1, n_jobs=2)``, C=1000 and clip 0.1
  as ``config.yaml``'s lshtc1 entry.  (With C=10 the tf-idf rows give tiny scores: the softmax is
  so flat that thousands of classes lie within a factor 4 of the top one, unlike the real
  dry-run's few, and SVBOP-Full's candidate step and the HNSW index behave unrealistically.)
  Training every class against all ~48,700 rows takes about 0.4 s per class here (liblinear's
  dual solver, ~10 us per row and class), i.e. 40 min on 2 cores, and even one training row per
  class would take 8 min.  So each topic's classes are trained in one ``train_ovr`` call on the
  rows of that topic (all the hard negatives, siblings included) plus ``--negatives`` (1,000)
  rows drawn at random from the other topics: about 3,000 rows per class problem, about 3.5
  minutes in all (negative sampling, as large-scale one-vs-rest trainers do; every class sees
  the same sampling, so the softmax is affected only through the rarer easy negatives).
  ``--negatives -1`` trains on all rows (exact, slow).
* trees, ``train_tree(..., C=--tree-C (50, the paper's LSHTC1 hf_C), eps=0.1, n_jobs=2)`` then
  ``.clip(0.1)``: balanced 2-means (max_leaves 100) and the hidden hierarchy itself.
* HNSW index (M=20, efC=100) on the flat model, built with ``--jobs`` threads: one thread takes
  about 6-7 minutes here (NMSLIB's sparse space, ~700 weights per class), and with several the
  graph differs slightly from run to run (NMSLIB draws the levels per thread), so HSG's figures
  may move by a fraction of a percent between first runs.

Trained models (and indexes) are cached in ``--cache`` (default ``/tmp/svbop-bench-inference``),
keyed by the parameters, so reruns skip training (the training times printed are then those of
the first run).  A first synthetic run takes about 11-12 minutes on 2 cores (flat training
~3.5 min, the HNSW build ~3.5 min: NMSLIB's sparse space, a wheel built without SIMD; trees ~1.5
min; the timings ~2.5 min), a rerun about 3; the dry-run about 2 minutes.

Run
---
    python benchmarks/bench_inference.py [--problem {dryrun,synthetic,both}] [--threads 1]
        [--seed 0] [--n-test 2000] [--repeat 3] [--cache DIR] [--jobs 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import svbop  # noqa: E402
from svbop.datasets.base import Hierarchy  # noqa: E402
from svbop.full import linear_scores, predict_sets_full, predict_sets_full_naive  # noqa: E402
from svbop.hf import predict_sets_hf  # noqa: E402
from svbop.hsg import predict_sets_hsg  # noqa: E402
from svbop.index import HNSWIndex  # noqa: E402
from svbop.linear import LinearModel, merge_models, train_ovr  # noqa: E402
from svbop.trees import BUILDER_VERSION as TREE_BUILDER_VERSION  # noqa: E402
from svbop.trees import TreeModel, balanced_kmeans_tree, train_tree, tree_from_hierarchy  # noqa: E402

UTILITIES = ("fbeta:beta=1", "credal:delta=2.2,gamma=1.2")
FULL_OVER_BARE = 1.3
NAIVE_OVER_FULL = 10.0  # dry-run: the paper's SVBOP-Full over ours, at least
HSG_OVER_FULL = 12.0  # dry-run, clipped model, k=100: HSG's time over Full's, at most
HF_SPEEDUP = 3.0  # synthetic: Full's time over HF_c's, at least (issue 27)
WARMUP_ROWS = 16

# the synthetic problem's shape (LSHTC1: 12,166 classes and 381,571 features)
SYN_K = 12_166
SYN_D = 381_571


# ------------------------------------------------------------------------------------------------
# small helpers
# ------------------------------------------------------------------------------------------------


def say(*args: Any) -> None:
    print(*args, flush=True)


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        return "?"


def key_of(params: dict) -> str:
    return hashlib.sha1(json.dumps(params, sort_keys=True).encode()).hexdigest()[:12]


class Cache:
    """Models, indexes and their training times in ``root/<problem>-<hash of the parameters>``."""

    def __init__(self, root: Path | None, problem: str, params: dict) -> None:
        self.dir = None if root is None else Path(root) / f"{problem}-{key_of(params)}"
        self.times: dict[str, float] = {}
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "params.json").write_text(json.dumps(params, indent=2, sort_keys=True) + "\n")
            if (self.dir / "times.json").is_file():
                self.times = json.loads((self.dir / "times.json").read_text())

    def _remember(self, name: str, seconds: float) -> None:
        self.times[name] = seconds
        if self.dir is not None:
            (self.dir / "times.json").write_text(json.dumps(self.times, indent=2, sort_keys=True) + "\n")

    def get(self, name: str, make: Callable[[], Any], load: Callable[[Path], Any], save: Callable[[Any, Path], None],
            suffix: str = ".npz") -> tuple[Any, float, bool]:
        """(object, seconds it took to make, whether it came from the cache)."""
        path = None if self.dir is None else self.dir / f"{name}{suffix}"
        if path is not None and path.is_file() and name in self.times:
            return load(path), self.times[name], True
        start = time.perf_counter()
        obj = make()
        seconds = time.perf_counter() - start
        if path is not None:
            save(obj, path)
        self._remember(name, seconds)
        return obj, seconds, False


def model_cached(cache: Cache, name: str, make: Callable[[], LinearModel]) -> tuple[LinearModel, float, bool]:
    return cache.get(name, make, LinearModel.load, lambda m, p: m.save(p))


def tree_cached(cache: Cache, name: str, make: Callable[[], TreeModel]) -> tuple[TreeModel, float, bool]:
    # the tree builder's version in the name: trees cached by an older balanced_kmeans_tree are built again
    return cache.get(f"{name}-b{TREE_BUILDER_VERSION}", make, TreeModel.load, lambda m, p: m.save(p))


def index_cached(cache: Cache, name: str, model: LinearModel, threads: int = 1) -> tuple[HNSWIndex, float, bool]:
    # "v2": indexes of svbop >= this version (centred bias, negdotprod_sparse_fast), not the older cached ones
    return cache.get(f"v2-{name}", lambda: HNSWIndex.from_model(model, M=20, ef_construction=100, n_threads=threads),
                     HNSWIndex.load, lambda ix, p: ix.save(p), suffix=".hnsw")


@dataclass
class Problem:
    name: str
    Xtr: sp.csr_matrix
    ytr: np.ndarray
    Xte: sp.csr_matrix
    yte: np.ndarray
    K: int
    flats: dict[str, LinearModel] = field(default_factory=dict)
    indexes: dict[str, HNSWIndex] = field(default_factory=dict)
    trees: dict[str, TreeModel] = field(default_factory=dict)
    facts: list[str] = field(default_factory=list)


def describe_flat(name: str, model: LinearModel, seconds: float, cached: bool) -> str:
    W = model.W
    per_class = np.diff(W.indptr) if sp.issparse(W) else np.count_nonzero(W, axis=1)
    kind = "CSR" if sp.issparse(W) else "dense"
    return (f"flat {name}: {kind} W {W.shape[0]} x {W.shape[1]}, nnz {model.nnz:,} (density {model.density:.3g}, "
            f"{per_class.mean():.0f} per class, max {per_class.max()}), trained in {seconds:.1f} s"
            f"{' (cached)' if cached else ''}")


def describe_tree(name: str, model: TreeModel, seconds: float, cached: bool) -> str:
    tree = model.tree
    K = tree.n_classes
    depth = tree.depth()[:K]
    n_children = np.bincount(tree.parent[tree.parent >= 0], minlength=tree.n_nodes)[K:]
    return (f"tree {name}: {tree.n_nodes - K} internal nodes, children per node mean {n_children.mean():.1f} "
            f"max {n_children.max()}, leaf depth mean {depth.mean():.2f} max {depth.max()}, "
            f"weights nnz {model.W.nnz:,}, built + trained in {seconds:.1f} s{' (cached)' if cached else ''}")


# ------------------------------------------------------------------------------------------------
# the LSHTC1 dry-run
# ------------------------------------------------------------------------------------------------


def dryrun_problem(args) -> Problem | None:
    from bench_models import DATA, load

    data = args.data or DATA
    if not (data / "cat_hier.txt").exists():
        say(f"LSHTC1 dry-run not found in {data} (see ../shared/data/README.md): skipped")
        return None
    start = time.perf_counter()
    dataset, X, train, test = load(data)
    X = sp.csr_matrix(X)
    X.sort_indices()
    if args.n_test and args.n_test < test.size:  # a seeded subset of the test rows
        test = np.sort(np.random.default_rng(args.seed).choice(test, args.n_test, replace=False))
    p = Problem("LSHTC1 dry-run", X[train], dataset.y[train], X[test], dataset.y[test], dataset.n_classes)
    load_s = time.perf_counter() - start
    cache = Cache(args.cache, "dryrun", {"C": 10.0, "eps": 0.1, "tree_C": 10.0, "max_leaves": 100, "v": 1})
    jobs = args.jobs
    flat, s, c = model_cached(cache, "flat", lambda: train_ovr(p.Xtr, p.ytr, p.K, C=10.0, eps=0.1, bias=1,
                                                                n_jobs=jobs, progress=False))
    p.flats["C=10"] = flat
    p.facts.append(describe_flat("C=10 (the pipeline's)", flat, s, c))
    if not args.no_clip:
        clipped = flat.clip(0.1)
        p.flats["C=10 clip 0.1"] = clipped
        p.facts.append(describe_flat("C=10 clip 0.1", clipped, 0.0, c) + " (+ the clip)")
    for name, model in p.flats.items():
        index, s, c = index_cached(cache, f"index-{'clip' if model.clip_threshold else 'dense'}", model)
        p.indexes[name] = index
        p.facts.append(f"HNSW index on flat {name}: M=20 efC=100, 1 thread, built in {s:.1f} s{' (cached)' if c else ''}")

    def predefined() -> TreeModel:
        return train_tree(p.Xtr, p.ytr, tree_from_hierarchy(dataset.hierarchy), C=10.0, eps=0.1, n_jobs=jobs,
                          progress=False)

    def kmeans() -> TreeModel:
        tree = balanced_kmeans_tree(p.Xtr, p.ytr, p.K, max_leaves=100, eps=1e-3)
        return train_tree(p.Xtr, p.ytr, tree, C=10.0, eps=0.1, n_jobs=jobs, progress=False)

    for name, make in (("predefined", predefined), ("2-means", kmeans)):
        model, s, c = tree_cached(cache, f"tree-{name}", make)
        p.trees[name] = model
        p.facts.append(describe_tree(name, model, s, c))
    p.facts.insert(0, f"loaded and featurised in {load_s:.1f} s (bench_models.load: tf-idf, training vocabulary)")
    return p


# ------------------------------------------------------------------------------------------------
# the synthetic LSHTC1-shaped problem
# ------------------------------------------------------------------------------------------------


@dataclass
class Synthetic:
    Xtr: sp.csr_matrix
    ytr: np.ndarray
    Xte: sp.csr_matrix
    yte: np.ndarray
    subtopic: np.ndarray  # of every class
    topic: np.ndarray  # of every subtopic


def _draw_features(rng: np.random.Generator, cdf: np.ndarray, size: int) -> np.ndarray:
    """About ``size`` distinct features drawn by the popularity ``cdf`` (in random order)."""
    draw = np.minimum(np.searchsorted(cdf, rng.random(int(size * 1.3) + 8)), cdf.size - 1)
    feats = np.unique(draw)
    rng.shuffle(feats)
    return feats[:size]


def _vocabulary(rng, pool: np.ndarray | None, size: int, share: float, cdf: np.ndarray, exponent: float):
    """Features (``share`` of them from ``pool``, the rest fresh) and the CDF of their Zipf weights."""
    inherited = np.zeros(0, dtype=np.int64)
    if pool is not None:
        inherited = rng.choice(pool, min(int(round(share * size)), pool.size), replace=False)
    feats = np.unique(np.concatenate([inherited, _draw_features(rng, cdf, size - inherited.size)]))
    rng.shuffle(feats)
    weights = 1.0 / (np.arange(feats.size) + 1.0) ** exponent
    return feats, weights / weights.sum()


def make_synthetic(seed: int, n_test: int, K: int = SYN_K, D: int = SYN_D, per_class=(3, 5), n_topics: int = 25,
                   n_subtopics: int = 450, sizes=(300, 1500, 4000), share: float = 0.6, tokens: int = 115,
                   mix=(0.22, 0.20, 0.15, 0.43), keep: float = 0.25) -> Synthetic:
    """The seeded LSHTC1-shaped problem described in the module docstring."""
    from svbop.features.tfidf import tfidf_features

    rng = np.random.default_rng(seed)
    popularity = np.empty(D)
    popularity[rng.permutation(D)] = 1.0 / (np.arange(D) + 3.0)
    cdf_background = np.cumsum(popularity)
    cdf_background /= cdf_background[-1]
    cdf_vocabulary = np.cumsum(np.sqrt(popularity))  # characteristic words: flatter than the background
    cdf_vocabulary /= cdf_vocabulary[-1]
    subtopic = rng.choice(n_subtopics, size=K, p=rng.dirichlet(np.full(n_subtopics, 2.0)))
    topic = rng.integers(0, n_topics, size=n_subtopics)
    top_voc = [_vocabulary(rng, None, sizes[2], 0.0, cdf_vocabulary, 0.8) for _ in range(n_topics)]
    sub_voc = [_vocabulary(rng, top_voc[topic[s]][0], sizes[1], share, cdf_vocabulary, 0.8) for s in range(n_subtopics)]
    cls_voc = [_vocabulary(rng, sub_voc[subtopic[c]][0], sizes[0], share, cdf_vocabulary, 0.4) for c in range(K)]
    counts = rng.integers(per_class[0], per_class[1] + 1, size=K)
    y_train = np.repeat(np.arange(K), counts)
    y_test = rng.choice(K, size=n_test, p=counts / counts.sum())
    y = np.concatenate([y_train, y_test])
    cdf_of = lambda w: np.cumsum(w) / np.sum(w)  # noqa: E731
    top_cdf = [cdf_of(w) for _, w in top_voc]
    sub_cdf = [cdf_of(w) for _, w in sub_voc]
    mix = np.asarray(mix) / np.sum(mix)
    cols, lengths = [], np.zeros(y.size, dtype=np.int64)
    for i, c in enumerate(y):
        n_c, n_s, n_t, n_b = rng.multinomial(tokens, mix)
        s = subtopic[c]
        t = topic[s]
        feats, weights = cls_voc[c]
        weights = weights * (rng.random(feats.size) < keep)  # this document's aspects of its class
        if weights.sum() == 0:
            weights[0] = 1.0
        parts = (
            feats[np.minimum(np.searchsorted(cdf_of(weights), rng.random(n_c)), feats.size - 1)],
            sub_voc[s][0][np.minimum(np.searchsorted(sub_cdf[s], rng.random(n_s)), sub_cdf[s].size - 1)],
            top_voc[t][0][np.minimum(np.searchsorted(top_cdf[t], rng.random(n_t)), top_cdf[t].size - 1)],
            np.minimum(np.searchsorted(cdf_background, rng.random(n_b)), D - 1),
        )
        row = np.concatenate(parts)
        cols.append(row)
        lengths[i] = row.size
    cols = np.concatenate(cols)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    counts_matrix = sp.csr_matrix((np.ones(cols.size), cols, indptr), shape=(y.size, D))
    counts_matrix.sum_duplicates()
    n_train = y_train.size
    X = sp.csr_matrix(tfidf_features(counts_matrix, np.arange(n_train)), dtype=np.float64)
    X.sort_indices()
    return Synthetic(X[:n_train], y_train, X[n_train:], y_test, subtopic, topic)


def hidden_tree(syn: Synthetic, K: int) -> Hierarchy:
    """The hidden hierarchy: root -> topics -> subtopics -> classes (empty groups dropped)."""
    subs = np.unique(syn.subtopic)
    tops = np.unique(syn.topic[subs])
    top_id = {t: K + 1 + i for i, t in enumerate(tops)}
    sub_id = {s: K + 1 + tops.size + i for i, s in enumerate(subs)}
    parent = np.empty(K + 1 + tops.size + subs.size, dtype=np.int64)
    parent[:K] = [sub_id[s] for s in syn.subtopic]
    parent[K] = -1
    for t, node in top_id.items():
        parent[node] = K
    for s, node in sub_id.items():
        parent[node] = top_id[syn.topic[s]]
    return tree_from_hierarchy(Hierarchy(parent, K))


def train_flat_sampled(Xtr, ytr, K: int, groups: np.ndarray, negatives: int, seed: int, C: float, jobs: int,
                       clip: float = 0.1) -> LinearModel:
    """One ``train_ovr`` per group of classes: the group's rows plus ``negatives`` random other rows."""
    rng = np.random.default_rng(seed)
    group_of_row = groups[ytr]
    parts = []
    labels = np.unique(groups)
    start = time.perf_counter()
    for n, g in enumerate(labels):
        classes = np.flatnonzero(groups == g)
        inside = group_of_row == g
        others = np.flatnonzero(~inside)
        if 0 <= negatives < others.size:
            others = rng.choice(others, negatives, replace=False)
        rows = np.sort(np.concatenate([np.flatnonzero(inside), others]))
        parts.append(train_ovr(Xtr[rows], ytr[rows], K, C=C, eps=0.1, bias=1, classes=classes, clip=clip,
                               n_jobs=jobs, progress=False))
        if (n + 1) % 5 == 0 or n + 1 == labels.size:
            print(f"  flat: {n + 1}/{labels.size} groups of classes, {time.perf_counter() - start:.0f} s",
                  file=sys.stderr, flush=True)
    return merge_models(parts, K)


def synthetic_problem(args) -> Problem:
    start = time.perf_counter()
    syn = make_synthetic(args.seed, args.n_test)
    gen_s = time.perf_counter() - start
    K = SYN_K
    p = Problem("synthetic LSHTC1-shaped", syn.Xtr, syn.ytr, syn.Xte, syn.yte, K)
    p.facts.append(f"generated (seed {args.seed}) and featurised in {gen_s:.1f} s; hidden hierarchy: "
                   f"{np.unique(syn.topic[np.unique(syn.subtopic)]).size} topics, {np.unique(syn.subtopic).size} "
                   f"subtopics; {np.bincount(syn.ytr, minlength=K).mean():.2f} training rows per class")
    params = {"seed": args.seed, "n_test": args.n_test, "flat_C": args.flat_C, "tree_C": args.tree_C,
              "negatives": args.negatives, "clip": 0.1, "max_leaves": 100, "v": 2}
    cache = Cache(args.cache, "synthetic", params)
    jobs = args.jobs
    groups = syn.topic[syn.subtopic]  # classes trained together: one topic of the hidden hierarchy

    def flat() -> LinearModel:
        return train_flat_sampled(p.Xtr, p.ytr, K, groups, args.negatives, args.seed, args.flat_C, jobs)

    model, s, c = model_cached(cache, "flat", flat)
    p.flats[f"C={args.flat_C:g} clip 0.1"] = model
    how = ("all training rows" if args.negatives < 0 else
           f"its topic's rows + {args.negatives} random others, one train_ovr per topic")
    p.facts.append(describe_flat(f"C={args.flat_C:g} clip 0.1", model, s, c) + f"; each class against {how}")
    index, s, c = index_cached(cache, f"index-{jobs}threads", model, threads=jobs)
    p.indexes[f"C={args.flat_C:g} clip 0.1"] = index
    p.facts.append(f"HNSW index on the flat model: M=20 efC=100, {jobs} build thread(s), built in {s:.1f} s"
                   f"{' (cached)' if c else ''}")

    def kmeans() -> TreeModel:
        tree = balanced_kmeans_tree(p.Xtr, p.ytr, K, max_leaves=100, eps=1e-3)
        return train_tree(p.Xtr, p.ytr, tree, C=args.tree_C, eps=0.1, n_jobs=jobs, progress=False).clip(0.1)

    def hidden() -> TreeModel:
        return train_tree(p.Xtr, p.ytr, hidden_tree(syn, K), C=args.tree_C, eps=0.1, n_jobs=jobs,
                          progress=False).clip(0.1)

    for name, make in (("2-means", kmeans), ("hidden hierarchy", hidden)):
        model, s, c = tree_cached(cache, f"tree-{name.replace(' ', '-')}", make)
        p.trees[name] = model
        p.facts.append(describe_tree(f"{name} (C={args.tree_C:g}, clip 0.1)", model, s, c))
    return p


# ------------------------------------------------------------------------------------------------
# timing and the table
# ------------------------------------------------------------------------------------------------


def time_all(tasks: dict[str, Callable[[Any], Any]], X, repeat: int) -> dict[str, tuple[float, Any]]:
    """Best of ``repeat`` wall times of every task on all rows: {key: (seconds, output of the last run)}.

    Every task is first run on a few rows (numba compiles on first use); then the repeats go round
    robin over the tasks, so that a change of the machine's load affects them all alike.
    """
    for fn in tasks.values():
        fn(X[:WARMUP_ROWS])
    best = {key: np.inf for key in tasks}
    out: dict[str, Any] = {}
    for _ in range(repeat):
        for key, fn in tasks.items():
            start = time.perf_counter()
            out[key] = fn(X)
            best[key] = min(best[key], time.perf_counter() - start)
    return {key: (best[key], out[key]) for key in tasks}


def same_sets(a: svbop.SetPredictions, b: svbop.SetPredictions) -> float:
    """Percentage of rows whose two sets hold the same classes (in any order)."""
    same = [np.array_equal(np.sort(sa), np.sort(sb)) for sa, sb in zip(a, b)]
    return 100.0 * float(np.mean(same))


@dataclass
class Row:
    method: str
    seconds: float
    n: int
    utility: str | None = None
    sets: svbop.SetPredictions | None = None
    stats: dict[str, np.ndarray] | None = None
    bare_ms: float | None = None  # the bare scoring of the flat model it is compared with
    full_ms: float | None = None  # SVBOP-Full of that flat model and utility
    naive_ms: float | None = None  # SVBOP-Full as the paper runs it, same flat model and utility
    full_sets: svbop.SetPredictions | None = None
    note: str = ""

    @property
    def ms(self) -> float:
        return 1000.0 * self.seconds / self.n


def run_problem(p: Problem, args) -> dict[str, Any]:
    say(f"\n{'=' * 100}\n{p.name}\n{'=' * 100}")
    say(f"load average at start: {load_average()}")
    nnz_tr = np.diff(p.Xtr.indptr)
    nnz_te = np.diff(p.Xte.indptr)
    say(f"K={p.K:,}  D={p.Xtr.shape[1]:,}  n_train={p.Xtr.shape[0]:,}  n_test={p.Xte.shape[0]:,}  "
        f"nnz/row train {nnz_tr.mean():.1f} (median {np.median(nnz_tr):.0f}), test {nnz_te.mean():.1f} "
        f"(median {np.median(nnz_te):.0f})")
    for fact in p.facts:
        say("  " + fact)
    X, y, t = p.Xte, p.yte, args.threads
    n = X.shape[0]
    tasks: dict[str, Callable[[Any], Any]] = {}
    for fname, model in p.flats.items():
        index = p.indexes.get(fname)
        tasks[f"bare|{fname}"] = lambda Z, m=model: linear_scores(m, Z, n_jobs=t)
        tasks[f"scipy|{fname}"] = lambda Z, m=model: m.decision_function(Z)
        if index is not None:
            tasks[f"query|{fname}"] = lambda Z, ix=index: ix.query(Z, min(100, p.K), ef=100, n_threads=t)
            if not index.sparse:  # the sparse rows sent dense to NMSLIB, as the paper does
                tasks[f"nquery|{fname}"] = lambda Z, ix=index: ix.query(Z, min(100, p.K), ef=100, n_threads=t,
                                                                       engine="nmslib")
        for u in UTILITIES:
            tasks[f"full|{fname}|{u}"] = lambda Z, m=model, u=u: predict_sets_full(m, Z, u, n_jobs=t)
            tasks[f"naive|{fname}|{u}"] = lambda Z, m=model, u=u: predict_sets_full_naive(m, Z, u, n_jobs=t)
            tasks[f"old|{fname}|{u}"] = lambda Z, m=model, u=u: svbop.predict_sets(m.predict_proba(Z), u, n_jobs=t)
            if index is not None:
                tasks[f"hsg|{fname}|{u}"] = lambda Z, m=model, ix=index, u=u: predict_sets_hsg(
                    m, ix, Z, u, k=100, n_jobs=t, return_stats=True)
                if not index.sparse:
                    tasks[f"nhsg|{fname}|{u}"] = lambda Z, m=model, ix=index, u=u: predict_sets_hsg(
                        m, ix, Z, u, k=100, n_jobs=t, engine="nmslib", return_stats=True)
    for tname, tree in p.trees.items():
        for u in UTILITIES:
            tasks[f"hf|{tname}|{u}"] = lambda Z, tr=tree, u=u: predict_sets_hf(tr, Z, u, n_jobs=t, return_stats=True)
    say(f"timing {len(tasks)} tasks on {n} rows, best of {args.repeat} (round robin) ...")
    timed = time_all(tasks, X, args.repeat)

    rows: list[Row] = []
    results: dict[str, Any] = {"full": [], "hf": [], "ratios": [], "naive": [], "hsg": []}
    main = next(iter(p.flats))
    main_full: dict[str, float] = {}
    main_naive: dict[str, float] = {}
    main_sets: dict[str, svbop.SetPredictions] = {}
    for fname in p.flats:
        bare_ms = 1000.0 * timed[f"bare|{fname}"][0] / n
        rows.append(Row(f"[{fname}] bare scoring linear_scores", timed[f"bare|{fname}"][0], n))
        rows.append(Row(f"[{fname}] scipy decision_function", timed[f"scipy|{fname}"][0], n, bare_ms=bare_ms))
        if f"query|{fname}" in timed:
            ids = timed[f"query|{fname}"][1][0]
            scores = timed[f"bare|{fname}"][1]
            k = ids.shape[1]
            exact = np.argpartition(-scores, k - 1, axis=1)[:, :k] if k < p.K else np.tile(np.arange(p.K), (n, 1))
            recall = np.mean([np.intersect1d(a, b).size / k for a, b in zip(ids, exact)])
            top1 = np.mean(ids[:, 0] == scores.argmax(axis=1))
            engine = "" if p.indexes[fname].sparse else " (svbop's search)"
            rows.append(Row(f"[{fname}] HNSW query k=100 alone{engine}", timed[f"query|{fname}"][0], n, bare_ms=bare_ms,
                            note=f"ef=100: recall@{k} of the exact top-{k} {100 * recall:.1f} %, "
                                 f"exact top-1 first {100 * top1:.1f} %"))
            if f"nquery|{fname}" in timed:
                rows.append(Row(f"[{fname}] HNSW query k=100 alone (NMSLIB's)", timed[f"nquery|{fname}"][0], n,
                                bare_ms=bare_ms))
        for u in UTILITIES:
            s_full, full = timed[f"full|{fname}|{u}"]
            full_ms = 1000.0 * s_full / n
            s_naive, naive = timed[f"naive|{fname}|{u}"]
            naive_ms = 1000.0 * s_naive / n
            if fname == main:
                main_full[u], main_sets[u], main_naive[u] = full_ms, full, naive_ms
            s_old, old = timed[f"old|{fname}|{u}"]
            common = dict(bare_ms=bare_ms, full_ms=full_ms, naive_ms=naive_ms, full_sets=full)
            rows.append(Row(f"[{fname}] Full as in the paper: predict_sets_full_naive", s_naive, n, u, naive, **common))
            rows.append(Row(f"[{fname}] Full: predict_proba + predict_sets", s_old, n, u, old, **common))
            rows.append(Row(f"[{fname}] Full: predict_sets_full", s_full, n, u, full, **common))
            results["full"].append((fname, u, full_ms))
            results["naive"].append((fname, u, naive_ms, full_ms))
            results["ratios"].append((fname, u, full_ms / bare_ms))
            if f"hsg|{fname}|{u}" in timed:
                s_hsg, (sets, stats) = timed[f"hsg|{fname}|{u}"]
                engine = "" if p.indexes[fname].sparse else " (svbop's search)"
                rows.append(Row(f"[{fname}] HSG k=100{engine}", s_hsg, n, u, sets, stats, **common))
                results["hsg"].append((fname, u, 1000.0 * s_hsg / n, full_ms))
            if f"nhsg|{fname}|{u}" in timed:
                s_hsg, (sets, stats) = timed[f"nhsg|{fname}|{u}"]
                rows.append(Row(f"[{fname}] HSG k=100 (NMSLIB's query, dense rows)", s_hsg, n, u, sets, stats, **common))
    main_bare = 1000.0 * timed[f"bare|{main}"][0] / n
    for tname in p.trees:
        for u in UTILITIES:
            s_hf, (sets, stats) = timed[f"hf|{tname}|{u}"]
            row = Row(f"[tree {tname}] HF", s_hf, n, u, sets, stats, bare_ms=main_bare, full_ms=main_full[u],
                      naive_ms=main_naive[u], full_sets=main_sets[u])
            rows.append(row)
            results["hf"].append((tname, u, row.ms, main_full[u]))
    print_table(rows, y, main)
    say(f"load average at end: {load_average()}")
    return results


def print_table(rows: list[Row], y: np.ndarray, main_flat: str) -> None:
    head = (f"{'method':<60} {'u':<7} {'ms/smp':>8} {'x bare':>7} {'Full/x':>7} {'paper/x':>7} {'top1%':>6} "
            f"{'rec%':>6} {'size':>6} {'util%':>6} {'=Full%':>7}  search")
    say("\n" + head)
    say("-" * len(head))
    for r in rows:
        ratio = f"{r.ms / r.bare_ms:7.2f}" if r.bare_ms else f"{1.0:7.2f}"
        speed = f"{r.full_ms / r.ms:7.2f}" if r.full_ms else f"{'':>7}"
        speed += f" {r.naive_ms / r.ms:7.2f}" if r.naive_ms else f" {'':>7}"
        u_name = "" if r.utility is None else ("F1" if r.utility.startswith("fbeta") else "2.2,1.2")
        if r.sets is not None:
            m = svbop.mean_scores(r.sets, y, [r.utility])
            label = svbop.utility(r.utility).label
            quality = (f"{m['top1_pct']:6.2f} {m['recall_pct']:6.2f} {m['mean_size']:6.2f} {m[f'{label}_pct']:6.2f} "
                       f"{same_sets(r.sets, r.full_sets):7.2f}")
        else:
            quality = f"{'':>6} {'':>6} {'':>6} {'':>6} {'':>7}"
        search = r.note
        if r.stats is not None and "queries" in r.stats:
            search = f"queries {r.stats['queries'].mean():.2f}, scored {r.stats['scored'].mean():.1f}"
        elif r.stats is not None and "expanded" in r.stats:
            nodes = r.stats["expanded"].mean()
            search = (f"expanded {nodes:.1f} (max {r.stats['expanded'].max()}), pulled {r.stats['pulled'].mean():.1f}, "
                      f"{1000.0 * r.ms / max(nodes, 1e-9):.1f} us/node")
        say(f"{r.method:<60} {u_name:<7} {r.ms:8.4f} {ratio} {speed} {quality}  {search}")
    say(f"(x bare: ms over bare scoring of the same flat model; for HF over bare scoring of flat [{main_flat}]. "
        f"Full/x: SVBOP-Full (predict_sets_full, flat [{main_flat}] for HF) ms over this method's ms; paper/x: "
        f"the same for SVBOP-Full as the paper runs it (predict_sets_full_naive), the paper's speed-up. "
        f"=Full%: rows with the same set as that SVBOP-Full)")


def print_targets(name: str, results: dict[str, Any], synthetic: bool) -> list[bool]:
    """PASS/FAIL of each target: every figure a ratio of two timings of this run."""
    verdicts = []

    def line(ok: bool, text: str) -> None:
        verdicts.append(ok)
        say(f"  {'PASS' if ok else 'FAIL'}  {text}")

    say(f"\nTargets, {name} (ratios of timings of this run):")
    for fname, u, ratio in results["ratios"]:
        line(ratio <= FULL_OVER_BARE, f"Full / bare scoring <= {FULL_OVER_BARE}: {ratio:.2f}  [{fname}, {u}]")
    if synthetic:
        for tname, u, hf_ms, full_ms in results["hf"]:
            if "2-means" in tname:
                line(full_ms / hf_ms >= HF_SPEEDUP, f"Full / HF >= {HF_SPEEDUP:g}: {full_ms / hf_ms:.2f} "
                     f"(Full {full_ms:.4f} ms, HF {hf_ms:.4f} ms)  [tree {tname}, {u}]")
        return verdicts
    for fname, u, naive_ms, full_ms in results["naive"]:
        line(naive_ms / full_ms >= NAIVE_OVER_FULL, f"Full as in the paper / Full >= {NAIVE_OVER_FULL:g}: "
             f"{naive_ms / full_ms:.1f} ({naive_ms:.4f} vs {full_ms:.4f} ms)  [{fname}, {u}]")
    for fname, u, hsg_ms, full_ms in results["hsg"]:
        if "clip" in fname:
            line(hsg_ms / full_ms <= HSG_OVER_FULL, f"HSG k=100 / Full <= {HSG_OVER_FULL:g}: {hsg_ms / full_ms:.1f} "
                 f"({hsg_ms:.4f} vs {full_ms:.4f} ms)  [{fname}, {u}]")
    for tname, u, hf_ms, full_ms in results["hf"]:
        if "2-means" in tname:
            line(hf_ms <= full_ms, f"HF no slower than Full: HF {hf_ms:.4f} ms, Full {full_ms:.4f} ms "
                 f"({full_ms / hf_ms:.2f}x)  [tree {tname}, {u}]")
    return verdicts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problem", choices=("dryrun", "synthetic", "both"), default="both")
    parser.add_argument("--threads", type=int, default=1, help="n_jobs of every predictor (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic problem (and test subsets)")
    parser.add_argument("--n-test", type=int, default=2000,
                        help="test rows (synthetic: generated; dry-run: a seeded subset if fewer than its 1,858; "
                             "0 = all)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per method (the best is kept)")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/svbop-bench-inference"),
                        help="folder for trained models and indexes")
    parser.add_argument("--no-cache", action="store_true", help="train everything, save nothing")
    parser.add_argument("--jobs", type=int, default=2, help="training processes (default 2)")
    parser.add_argument("--data", type=Path, default=None, help="the LSHTC1 dry-run folder")
    parser.add_argument("--no-clip", action="store_true", help="dry-run: skip the flat model clipped at 0.1")
    parser.add_argument("--flat-C", type=float, default=1000.0,
                        help="synthetic flat model's C (default 1000, config.yaml's lshtc1)")
    parser.add_argument("--tree-C", type=float, default=50.0, help="synthetic trees' C (default 50, the paper's)")
    parser.add_argument("--negatives", type=int, default=1000,
                        help="synthetic flat model: random rows of other topics per topic (-1: all rows)")
    args = parser.parse_args(argv)
    if args.no_cache:
        args.cache = None
    logging.getLogger("nmslib").setLevel(logging.WARNING)
    say(f"bench_inference: --problem {args.problem} --threads {args.threads} --seed {args.seed} "
        f"--n-test {args.n_test} --repeat {args.repeat}; numba kernels warmed up on {WARMUP_ROWS} rows; "
        f"{os.cpu_count()} CPUs")
    verdicts: list[bool] = []
    start, cpu = time.perf_counter(), time.process_time()
    if args.problem in ("dryrun", "both"):
        p = dryrun_problem(args)
        if p is not None:
            verdicts += print_targets(p.name, run_problem(p, args), synthetic=False)
            del p
    if args.problem in ("synthetic", "both"):
        p = synthetic_problem(args)
        verdicts += print_targets(p.name, run_problem(p, args), synthetic=True)
    say(f"\n{sum(verdicts)} of {len(verdicts)} targets met; total {time.perf_counter() - start:.0f} s wall, "
        f"{time.process_time() - cpu:.0f} s CPU (all threads), load average at the end {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
