"""Probabilistic class trees (svbop.trees): tree building, node training, probabilities."""

import numpy as np
import pytest
import scipy.sparse as sp

from svbop.datasets import Hierarchy
from svbop.linear import softmax, train_ovr
from svbop.trees import (
    TreeModel,
    balanced_2means,
    balanced_kmeans_tree,
    class_profiles,
    collapse_single_children,
    merge_trees,
    node_examples,
    split_nodes,
    train_tree,
    tree_from_hierarchy,
)


def clustered(K=23, N=1200, D=80, seed=0):
    """Sparse non-negative data where each class has its own feature profile."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, N)
    y[:K] = np.arange(K)  # every class has an example
    centers = rng.random((K, D)) * (rng.random((K, D)) < 0.2)
    X = centers[y] + 0.3 * rng.random((N, D)) * (rng.random((N, D)) < 0.1)
    return sp.csr_matrix(X), y


def test_class_profiles_are_normalised_class_sums():
    X = sp.csr_matrix(np.array([[3.0, 0, 0], [1.0, 0, 0], [0, 0, 2.0], [0, 4.0, 0]]))
    y = np.array([0, 0, 1, 1])
    P = class_profiles(X, y, 3).toarray()
    np.testing.assert_allclose(P[0], [1, 0, 0])
    np.testing.assert_allclose(P[1], [0, 4, 2] / np.sqrt(20))
    np.testing.assert_array_equal(P[2], 0)  # no example: zero profile


def test_balanced_2means_separates_two_obvious_groups_in_halves():
    rng = np.random.default_rng(1)
    a = np.abs(rng.normal(size=(5, 6))) * [1, 1, 1, 0, 0, 0]
    b = np.abs(rng.normal(size=(4, 6))) * [0, 0, 0, 1, 1, 1]
    P = np.vstack([a, b])
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    left = balanced_2means(sp.csr_matrix(P), rng=3)
    assert left.sum() == 5  # ceil(9 / 2)
    assert len(set(left[:5])) == 1 and len(set(left[5:])) == 1 and left[0] != left[5]


def _mean_similarity(P, left):
    """Mean cosine similarity of the rows to their cluster's normalised sum."""
    sims = 0.0
    for part in (left, ~left):
        c = P[part].sum(axis=0)
        sims += (P[part] @ (c / np.linalg.norm(c))).sum()
    return sims / P.shape[0]


def test_balanced_2means_keeps_the_best_of_several_initial_pairs():
    """One random pair often ends in a poor local optimum; n_init restarts keep the split of
    highest mean similarity, never worse than the first draw's and better on some seeds."""
    rng = np.random.default_rng(7)
    topics = np.abs(rng.normal(size=(6, 40))) * (rng.random((6, 40)) < 0.3)
    P = topics[rng.integers(0, 6, 60)] + 0.3 * np.abs(rng.normal(size=(60, 40))) * (rng.random((60, 40)) < 0.2)
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    one = [_mean_similarity(P, balanced_2means(sp.csr_matrix(P), rng=s, n_init=1)) for s in range(20)]
    many = [_mean_similarity(P, balanced_2means(sp.csr_matrix(P), rng=s, n_init=8)) for s in range(20)]
    assert all(m >= o - 1e-12 for m, o in zip(many, one))
    assert sum(m > o + 1e-9 for m, o in zip(many, one)) >= 3
    assert np.std(many) < np.std(one)
    with pytest.raises(ValueError, match="n_init"):
        balanced_2means(sp.csr_matrix(P), n_init=0)


@pytest.mark.parametrize("K,max_leaves", [(23, 3), (64, 4), (101, 10), (5, 100), (2, 2)])
def test_balanced_kmeans_tree_is_balanced_and_covers_every_class_once(K, max_leaves):
    X, y = clustered(K=K, N=max(1200, 6 * K))
    tree = balanced_kmeans_tree(X, y, K, max_leaves=max_leaves, seed=0)
    assert tree.n_classes == K
    # every class is exactly one leaf (Hierarchy guarantees leaves 0..K-1 have no children)
    below = [set() for _ in range(tree.n_nodes)]
    for c in range(K):
        for node in tree.path(c):
            below[node].add(c)
    assert below[tree.root] == set(range(K))
    for node, kids in enumerate(tree.children()):
        if node < K:
            continue
        leaf_kids = [k for k in kids if k < K]
        if leaf_kids:  # a bottom node: at most max_leaves classes, all as direct children
            assert len(kids) == len(leaf_kids) <= max_leaves
        else:  # a split: two halves whose sizes differ by at most one
            assert len(kids) == 2
            sizes = [len(below[k]) for k in kids]
            assert abs(sizes[0] - sizes[1]) <= 1


def test_collapse_single_children_removes_chains_and_a_single_child_root():
    # root 6 -> 5 -> 4 -> {2, 3}; 3 -> {0, 1}
    h = Hierarchy(np.array([3, 3, 4, 4, 5, 6, -1]), 3)
    c = collapse_single_children(h)
    np.testing.assert_array_equal(c.parent, [3, 3, 4, 4, -1])
    # a single-child node in the middle: root 5 -> {4, 2}; 4 -> 3 -> {0, 1}
    h = Hierarchy(np.array([3, 3, 5, 4, 5, -1]), 3)
    c = tree_from_hierarchy(h)
    np.testing.assert_array_equal(c.parent, [3, 3, 4, 4, -1])
    assert collapse_single_children(c) is c  # nothing to do


def test_node_examples_route_every_example_down_its_path():
    # root 5 -> {4, 2}; 4 -> {0, 1, 3}
    tree = Hierarchy(np.array([4, 4, 5, 4, 5, -1]), 4)
    y = np.array([2, 0, 3, 1, 2])
    indptr, rows, child = node_examples(tree, y)
    at = lambda v: (rows[indptr[v]:indptr[v + 1]].tolist(), child[indptr[v]:indptr[v + 1]].tolist())
    assert at(5) == ([0, 1, 2, 3, 4], [0, 1, 1, 1, 0])  # children of 5 sorted: 2, 4
    assert at(4) == ([1, 2, 3], [0, 2, 1])  # children of 4 sorted: 0, 1, 3
    assert indptr[0] == indptr[4]  # leaves get no examples


def test_leaf_probabilities_sum_to_one_and_nodes_sum_their_children():
    X, y = clustered()
    tree = balanced_kmeans_tree(X, y, 23, max_leaves=4)
    model = train_tree(X, y, tree, C=1.0, eps=0.01, progress=False)
    P = model.predict_proba(X[:50])
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    logp = model.node_log_proba(X[:50])
    indptr, children = tree.children_csr()
    for v in range(23, tree.n_nodes):
        kids = children[indptr[v]:indptr[v + 1]]
        np.testing.assert_allclose(np.exp(logp[:, kids]).sum(axis=1), np.exp(logp[:, v]), rtol=1e-12)
    assert np.mean(model.predict(X) == y) > 0.8  # the classes are separable


def test_a_one_level_tree_is_the_flat_one_vs_rest_softmax():
    X, y = clustered(K=7)
    tree = Hierarchy(np.array([7] * 7 + [-1]), 7)
    model = train_tree(X, y, tree, C=2.0, eps=0.01, progress=False)
    flat = train_ovr(X, y, 7, C=2.0, eps=0.01, progress=False)
    np.testing.assert_allclose(model.predict_proba(X), flat.predict_proba(X), rtol=1e-9, atol=1e-12)


def test_a_binary_node_is_one_logistic_model():
    X, y = clustered(K=2)
    tree = Hierarchy(np.array([2, 2, -1]), 2)
    model = train_tree(X, y, tree, C=1.0, eps=0.01, progress=False)
    single = train_ovr(X, y, 2, classes=[0], C=1.0, eps=0.01, progress=False)
    expected = 1.0 / (1.0 + np.exp(-single.decision_function(X)[:, 0]))
    np.testing.assert_allclose(model.predict_proba(X)[:, 0], expected, rtol=1e-9)
    assert model.W[1].nnz == 0 and model.b[1] == 0.0  # the second child scores 0


def test_parts_and_parallel_jobs_give_the_same_model():
    X, y = clustered(K=30, N=1500)
    tree = balanced_kmeans_tree(X, y, 30, max_leaves=4)
    whole = train_tree(X, y, tree, C=1.0, eps=0.1, progress=False)
    groups = split_nodes(tree, y, 3)
    assert sorted(np.concatenate(groups).tolist()) == list(range(30, tree.n_nodes))
    merged = merge_trees([train_tree(X, y, tree, C=1.0, eps=0.1, nodes=g, progress=False) for g in groups])
    assert (merged.W != whole.W).nnz == 0 and np.array_equal(merged.b, whole.b)
    forked = train_tree(X, y, tree, C=1.0, eps=0.1, n_jobs=2, progress=False)
    assert (forked.W != whole.W).nnz == 0 and np.array_equal(forked.b, whole.b)


def test_node_weights_are_sparse_to_the_features_their_examples_use():
    X, y = clustered(K=8)
    X = sp.hstack([X, sp.csr_matrix((X.shape[0], 1000))], format="csr")  # unused features
    tree = balanced_kmeans_tree(X, y, 8, max_leaves=2)
    model = train_tree(X, y, tree, progress=False)
    assert model.W.shape == (tree.n_nodes, X.shape[1])
    assert model.W[:, -1000:].nnz == 0


def test_a_node_without_examples_is_uniform_over_its_children():
    X, y = clustered(K=6)
    keep = y < 4  # classes 4 and 5 have no training example
    tree = Hierarchy(np.array([6, 6, 7, 7, 8, 8, 9, 9, 9, -1]), 6)
    model = train_tree(X[keep], y[keep], tree, progress=False)
    logp = model.node_log_proba(X[:5])
    np.testing.assert_allclose(logp[:, 4] - logp[:, 8], np.log(0.5))
    np.testing.assert_allclose(model.predict_proba(X[:5]).sum(axis=1), 1.0)


def test_save_load_round_trip(tmp_path):
    X, y = clustered(K=9)
    tree = balanced_kmeans_tree(X, y, 9, max_leaves=3)
    model = train_tree(X, y, tree, progress=False)
    model.save(tmp_path / "tree.npz")
    back = TreeModel.load(tmp_path / "tree.npz")
    np.testing.assert_array_equal(back.tree.parent, tree.parent)
    np.testing.assert_array_equal(back.predict_proba(X), model.predict_proba(X))


def test_merge_and_parts_refuse_what_does_not_fit():
    X, y = clustered(K=9)
    tree = balanced_kmeans_tree(X, y, 9, max_leaves=3)
    a, b = split_nodes(tree, y, 2)
    part = train_tree(X, y, tree, nodes=a, progress=False)
    with pytest.raises(ValueError, match="merge the parts"):
        part.predict_proba(X)
    with pytest.raises(ValueError, match="missing nodes"):
        merge_trees([part])
    with pytest.raises(ValueError, match="overlapping"):
        merge_trees([part, part, train_tree(X, y, tree, nodes=b, progress=False)])
    with pytest.raises(ValueError, match="internal nodes"):
        train_tree(X, y, tree, nodes=[0])
    with pytest.raises(ValueError, match="max_leaves"):
        balanced_kmeans_tree(X, y, 9, max_leaves=1)


def test_softmax_probabilities_sum_to_one_even_for_huge_scores():
    S = np.array([[1e308, -1e308, 0.0], [-5.0, -5.0, -5.0], [1000.0, 999.0, -np.inf]])
    P = softmax(S)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    np.testing.assert_allclose(P[1], 1 / 3)
    np.testing.assert_allclose(P[2, :2], [1 / (1 + np.exp(-1)), 1 / (1 + np.exp(1))])


def test_tree_files_round_trip_and_clip_keeps_large_weights(tmp_path):
    from svbop.trees import load_tree, save_tree

    X, y = clustered(K=9)
    tree = balanced_kmeans_tree(X, y, 9, max_leaves=3)
    save_tree(tmp_path / "t.npz", tree)
    np.testing.assert_array_equal(load_tree(tmp_path / "t.npz").parent, tree.parent)
    model = train_tree(X, y, tree, progress=False)
    clipped = model.clip(0.1)
    assert clipped.W.nnz < model.W.nnz and np.all(np.abs(clipped.W.data) >= 0.1)
    big = np.abs(model.W.toarray()) >= 0.1
    np.testing.assert_array_equal(clipped.W.toarray()[big], model.W.toarray()[big])


@pytest.mark.realdata
def test_lshtc1_dryrun_trees_learn_as_well_as_the_flat_model():
    """Real data: the LSHTC1 dry-run's predefined hierarchy and a 2-means tree, trained as the
    pipeline does, give proper distributions and about the flat model's top-1 accuracy."""
    from conftest import need_shared_data

    from svbop.datasets import read_dataset
    from svbop.features.tfidf import tfidf_features

    root = need_shared_data("lshtc1-dryrun", "the LSHTC1 dry-run libsvm files and cat_hier.txt")
    prefix = "Task2_Train_RDFData_Test_CrawlData__"
    spec = {"kind": "libsvm", "parts": {"train": [f"{prefix}train.txt", f"{prefix}validation.txt"],
                                        "test": [f"{prefix}test.txt"]}, "ignore_features": [0]}
    data = read_dataset(root, spec, hierarchy={"format": "lshtc_paths", "file": "cat_hier.txt"})
    train, test = np.flatnonzero(data.part == "train"), np.flatnonzero(data.part == "test")
    X = tfidf_features(data.X, train, drop_unseen=True)
    K = data.n_classes
    predefined = tree_from_hierarchy(data.hierarchy)
    assert predefined.n_nodes < data.hierarchy.n_nodes  # cat_hier.txt has single-child chains
    assert np.all(np.bincount(predefined.parent[predefined.parent >= 0])[K:] >= 2)
    kmeans = balanced_kmeans_tree(X[train], data.y[train], K, max_leaves=100)
    flat = train_ovr(X[train], data.y[train], K, C=10, eps=0.1, n_jobs=2, progress=False)
    flat_top1 = np.mean(flat.predict(X[test]) == data.y[test])
    for tree in (predefined, kmeans):
        model = train_tree(X[train], data.y[train], tree, C=10, eps=0.1, n_jobs=2, progress=False)
        P = model.predict_proba(X[test])
        np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-9)
        assert np.mean(P.argmax(axis=1) == data.y[test]) > flat_top1 - 0.05


def _reference_2means(P, rng, eps=1e-3, max_iter=100, n_init=4):
    """The balanced 2-means written plainly in numpy over every feature id (dense centroids), as
    svbop computed it before the compiled kernel: the kernel must give the same split."""
    n, half = P.shape[0], (P.shape[0] + 1) // 2
    best, best_score = None, -np.inf
    for _ in range(n_init):
        first, second = rng.choice(n, size=2, replace=False)
        c = np.stack([P[first].toarray().ravel(), P[second].toarray().ravel()])
        previous, left = -np.inf, np.zeros(n, dtype=bool)
        for _ in range(max_iter):
            sims = np.asarray(P @ c.T)
            order = np.argsort(sims[:, 1] - sims[:, 0], kind="stable")
            left[:] = False
            left[order[:half]] = True
            score = (sims[left, 0].sum() + sims[~left, 1].sum()) / n
            if score - previous < eps:
                break
            previous = score
            c = np.stack([np.asarray(P[part].sum(axis=0)).ravel() for part in (left, ~left)])
            c /= np.maximum(np.linalg.norm(c, axis=1, keepdims=True), 1e-300)
        if best is None or score > best_score + 1e-9:
            best, best_score = left.copy(), score
    return best


@pytest.mark.parametrize("seed", range(6))
def test_compiled_2means_equals_the_plain_numpy_one_on_a_node_of_few_columns(seed):
    """The kernel works on the node's columns renumbered 0..u-1 (u << D): the same split as dense
    centroids over every feature id, with most feature ids unused."""
    rng = np.random.default_rng(seed)
    topics = np.abs(rng.normal(size=(5, 60))) * (rng.random((5, 60)) < 0.3)
    Q = topics[rng.integers(0, 5, 41)] + 0.3 * np.abs(rng.normal(size=(41, 60))) * (rng.random((41, 60)) < 0.2)
    Q[7] = 0.0  # an empty profile
    D = 50_000
    columns = np.sort(rng.choice(D, 60, replace=False))  # the node's features, scattered over D ids
    P = sp.csr_matrix((Q[:, np.arange(60)][Q != 0], columns[np.nonzero(Q)[1]], np.r_[0, np.cumsum((Q != 0).sum(1))]),
                      shape=(41, D))
    P = class_profiles(P, np.arange(41), 41)
    expected = _reference_2means(P, np.random.default_rng(seed), n_init=3)
    np.testing.assert_array_equal(balanced_2means(P, rng=seed, n_init=3), expected)


def test_compact_rows_renumbers_columns_in_feature_order_and_leaves_the_scratch_clean():
    from svbop._tree_kernels import compact_rows
    rng = np.random.default_rng(3)
    X = sp.random(40, 10_000, density=0.002, format="csr", random_state=4)
    pos = np.full(X.shape[1], -1, dtype=np.int64)
    for rows in (np.array([3, 1, 3, 39]), np.arange(40), np.array([], dtype=np.int64), rng.choice(40, 9)):
        indptr, local, data, columns = compact_rows(X.indptr, X.indices, X.data, rows.astype(np.int64), pos)
        sub = X[rows]
        np.testing.assert_array_equal(columns, np.unique(sub.indices))
        back = sp.csr_matrix((data, columns[local], indptr), shape=(rows.size, X.shape[1]))
        assert (back != sub).nnz == 0
        assert np.all(pos == -1)


def test_node_weights_gathered_in_small_chunks_give_the_same_model(monkeypatch):
    """The node weights arrive largest node first and are copied to their rows chunk by chunk:
    segments that cross chunk boundaries (a chunk of 7 weights) land where one chunk puts them."""
    from svbop import trees
    X, y = clustered(K=30, N=1500)
    tree = balanced_kmeans_tree(X, y, 30, max_leaves=4)
    whole = train_tree(X, y, tree, C=1.0, eps=0.1, progress=False)
    monkeypatch.setattr(trees._NodeWeights, "CHUNK", 7)
    for jobs in (1, 2):
        small = train_tree(X, y, tree, C=1.0, eps=0.1, progress=False, n_jobs=jobs)
        assert (small.W != whole.W).nnz == 0 and np.array_equal(small.W.indptr, whole.W.indptr)
        assert np.array_equal(small.b, whole.b)
    clipped = train_tree(X, y, tree, C=1.0, eps=0.1, progress=False, clip=0.2)
    assert (clipped.W != whole.clip(0.2).W).nnz == 0


@pytest.mark.parametrize("K,max_leaves", [(23, 3), (64, 4), (9, 2)])
def test_node_costs_and_training_rows_follow_the_examples_below_each_node(K, max_leaves):
    """The trainer finds a node's rows as one slice of the rows sorted by their class's depth-first
    place: the same rows, in the same order, with the same child labels as node_examples."""
    from svbop.trees import _examples_below, _NodeTrainer
    X, y = clustered(K=K, N=600)
    tree = balanced_kmeans_tree(X, y, K, max_leaves=max_leaves)
    indptr, rows, child = node_examples(tree, y)
    np.testing.assert_array_equal(_examples_below(tree, y)[K:], np.diff(indptr)[K:])
    np.testing.assert_array_equal(_examples_below(tree, y)[:K], np.bincount(y, minlength=K))
    trainer = _NodeTrainer(X, y, tree, {"C": 1.0, "eps": 0.1, "bias": 1.0, "seed": 1})
    for v in range(K, tree.n_nodes):
        slice_rows = np.sort(trainer.order[trainer.start[trainer.first[v]]:trainer.start[trainer.last[v]]])
        np.testing.assert_array_equal(slice_rows, rows[indptr[v]:indptr[v + 1]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_class_profiles_equal_the_normalised_sparse_product(dtype):
    """The kernel sums each class's rows as scipy's Y @ X does (in float64, rows in order), from a
    float32 X without a float64 copy of it; the norms are summed in feature order (rounding apart)."""
    X = sp.random(500, 3000, density=0.01, format="csr", random_state=2, dtype=dtype)
    y = np.random.default_rng(2).integers(0, 40, 500)
    y[y == 7] = 8  # a class without rows
    Y = sp.csr_matrix((np.ones(y.size), (y, np.arange(y.size))), shape=(40, y.size))
    P = sp.csr_matrix(Y @ X.astype(np.float64))
    P.sum_duplicates()
    norms = np.sqrt(np.asarray(P.multiply(P).sum(axis=1)).ravel())
    expected = sp.diags(np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)) @ P
    got = class_profiles(X, y, 40)
    assert got.dtype == np.float64 and got.has_sorted_indices and got[7].nnz == 0
    np.testing.assert_allclose(got.toarray(), expected.toarray(), rtol=1e-13, atol=0)
    np.testing.assert_array_equal(got.indices, sp.csr_matrix(expected).sorted_indices().indices)


@pytest.mark.parametrize("alone", [0, 150_000, 1 << 40])
def test_large_nodes_trained_alone_first_give_the_same_model(monkeypatch, alone):
    """With workers, nodes whose liblinear problem passes _ALONE_BYTES are trained one at a time in
    the calling process first (the memory of two at once is the peak at extreme K): same model."""
    from svbop import trees
    from svbop.trees import _NodeTrainer
    X, y = clustered(K=30, N=1500)
    tree = balanced_kmeans_tree(X, y, 30, max_leaves=4)
    whole = train_tree(X, y, tree, C=1.0, eps=0.1, progress=False)
    trainer = _NodeTrainer(X, y, tree, {"C": 1.0, "eps": 0.1, "bias": 1.0, "seed": 1})
    indptr, rows, _ = node_examples(tree, y)
    nodes = np.arange(30, tree.n_nodes)
    expected = [16 * (X[rows[indptr[v]:indptr[v + 1]]].nnz + 2 * (indptr[v + 1] - indptr[v])) for v in nodes]
    np.testing.assert_array_equal(trainer.problem_bytes(nodes), expected)
    assert 0 < (trainer.problem_bytes(nodes) > 150_000).sum() < nodes.size  # the middle case splits the nodes
    monkeypatch.setattr(trees, "_ALONE_BYTES", alone)
    forked = train_tree(X, y, tree, C=1.0, eps=0.1, progress=False, n_jobs=2)
    assert (forked.W != whole.W).nnz == 0 and np.array_equal(forked.W.indptr, whole.W.indptr)
    assert np.array_equal(forked.b, whole.b)


def test_train_tree_refuses_bad_features_and_options_before_any_node_is_trained():
    """The nodes build their liblinear problems themselves (no train_ovr per node): the checks it made
    are made once, up front, with its messages."""
    X, y = clustered(K=6)
    tree = balanced_kmeans_tree(X, y, 6, max_leaves=2)
    bad = X.copy()
    bad.data[3] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinite values"):
        train_tree(bad, y, tree, progress=False)
    for option, value, message in (("C", 0.0, "C must be a finite number > 0"), ("eps", np.inf, "eps must be a finite"),
                                   ("bias", np.nan, "bias must be a finite number"),
                                   ("seed", -1, "seed must be an integer in 0..2\\*\\*32-1")):
        with pytest.raises(ValueError, match=message):
            train_tree(X, y, tree, progress=False, **{option: value})
    X32 = X.astype(np.float32)  # read as it is: the same model as from its float64 copy
    np.testing.assert_array_equal(train_tree(X32, y, tree, progress=False).W.toarray(),
                                  train_tree(X32.astype(np.float64), y, tree, progress=False).W.toarray())
