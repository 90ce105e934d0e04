"""SVBOP-HF (svbop.hf): exact with respect to the tree's factorised distribution."""

import heapq

import numpy as np
import pytest
import scipy.sparse as sp

import svbop
from svbop.datasets import Hierarchy
from svbop.hf import HFProvider, TreeSearchLayout, predict_sets_hf
from svbop.trees import TreeModel, balanced_kmeans_tree, train_tree, tree_from_hierarchy

UTILITIES = svbop.STANDARD_UTILITIES  # (1/x)-convex ones and two that are not (log, reject)


def random_model(tree: Hierarchy, D: int, seed: int, scale: float = 2.0, uniform_nodes: int = 0) -> TreeModel:
    """Random sparse node weights; ``uniform_nodes`` internal nodes get zero weights (exact ties)."""
    rng = np.random.default_rng(seed)
    n = tree.n_nodes
    W = sp.random(n, D, density=0.3, random_state=seed, format="lil") * scale
    internal = np.arange(tree.n_classes, n)
    W[tree.root] = 0
    b = rng.normal(size=n) * 0.5
    b[tree.root] = 0
    if uniform_nodes:
        indptr, children = tree.children_csr()
        for v in rng.choice(internal, size=min(uniform_nodes, internal.size - 1), replace=False):
            kids = children[indptr[v]:indptr[v + 1]]
            W[kids] = 0
            b[kids] = 0
    trained = np.zeros(n, dtype=bool)
    trained[internal] = True
    return TreeModel(tree, sp.csr_matrix(W), b, trained)


def binary_tree(K: int) -> Hierarchy:
    parent = [-1] * (2 * K - 1)
    nodes = list(range(K))
    nxt = K
    while len(nodes) > 1:
        merged = []
        for i in range(0, len(nodes) - 1, 2):
            parent[nodes[i]] = parent[nodes[i + 1]] = nxt
            merged.append(nxt)
            nxt += 1
        if len(nodes) % 2:
            merged.append(nodes[-1])
        nodes = merged
    return Hierarchy(np.array(parent[:nxt]), K)


def wide_tree(K: int) -> Hierarchy:
    return Hierarchy(np.array([K] * K + [-1]), K)


def caterpillar_tree(K: int) -> Hierarchy:
    """Every internal node has one leaf and the next internal node: depth K - 1."""
    parent = np.full(2 * K - 1, -1)
    for c in range(K - 1):
        parent[c] = K + c
        if c > 0:
            parent[K + c] = K + c - 1
    parent[K - 1] = 2 * K - 2
    return Hierarchy(parent, K)


def predefined_tree() -> Hierarchy:
    """A taxonomy with single-child chains and uneven depths, collapsed as the pipeline does."""
    # classes 0..9; internal 10..17 with chains 14 -> 15 -> (0, 1) and 16 -> 2
    parent = np.array([15, 15, 16, 11, 11, 11, 12, 12, 13, 13, -1, 10, 10, 10, 10, 14, 13])
    return tree_from_hierarchy(Hierarchy(parent, 10))


SHAPES = {
    "binary": lambda: binary_tree(37),
    "wide": lambda: wide_tree(30),
    "caterpillar": lambda: caterpillar_tree(25),
    "predefined": predefined_tree,
}


def queries(D: int, n: int, seed: int) -> sp.csr_matrix:
    return sp.random(n, D, density=0.4, random_state=seed + 100, format="csr")


def assert_same_sets(a, b):
    assert len(a) == len(b)
    bad = [i for i in range(len(a)) if not np.array_equal(a[i], b[i])]
    assert not bad, f"{len(bad)} rows differ, first {bad[0]}: {a[bad[0]]} vs {b[bad[0]]}"


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("spec", UTILITIES)
def test_hf_equals_algorithm_1_on_exhaustive_leaf_probabilities(shape, spec):
    tree = SHAPES[shape]()
    model = random_model(tree, D=12, seed=len(shape), uniform_nodes=2)
    X = queries(12, 150, seed=len(shape))
    P = model.predict_proba(X)
    expected = svbop.predict_sets(P, spec)
    got = predict_sets_hf(model, X, spec)
    assert_same_sets(got, expected)
    np.testing.assert_allclose(got.expected_utility, expected.expected_utility, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("spec", ["fbeta:beta=1", "credal:delta=2.2,gamma=1.2", "log"])
def test_hf_on_trained_trees_of_data(spec):
    rng = np.random.default_rng(3)
    K, D, N = 40, 30, 800
    y = rng.integers(0, K, N)
    y[:K] = np.arange(K)
    centers = rng.random((K, D)) * (rng.random((K, D)) < 0.3)
    X = sp.csr_matrix(centers[y] + 0.5 * rng.random((N, D)))
    for max_leaves in (2, 7):
        tree = balanced_kmeans_tree(X, y, K, max_leaves=max_leaves)
        model = train_tree(X, y, tree, C=1.0, eps=0.01)
        expected = svbop.predict_sets(model.predict_proba(X[:300]), spec)
        assert_same_sets(predict_sets_hf(model, X[:300], spec, n_jobs=2), expected)


def test_exact_ties_come_out_by_class_id_like_predict_sets():
    tree = binary_tree(16)
    model = random_model(tree, D=5, seed=0)
    model = TreeModel(tree, sp.csr_matrix(model.W.shape), np.zeros(tree.n_nodes), model.trained)  # all uniform
    X = queries(5, 3, seed=0)
    for spec in ("fbeta:beta=1", "precision", "recall", "log"):
        expected = svbop.predict_sets(model.predict_proba(X), spec)
        assert_same_sets(predict_sets_hf(model, X, spec), expected)
    np.testing.assert_array_equal(predict_sets_hf(model, X, "recall")[0], np.arange(16))


def test_best_first_expands_exactly_the_nodes_that_can_hold_an_accepted_class():
    """A* minimality with the bound: an internal node is expanded only if its probability exceeds
    that of the last class Algorithm 1 pulled (all of those are) or a class of its probability could
    still pass Algorithm 1's test (so a confident row visits about one path, not the tree)."""
    tree = binary_tree(512)
    model = random_model(tree, D=12, seed=11, scale=6.0)
    X = queries(12, 60, seed=11)
    node_p = np.exp(model.node_log_proba(X))
    leaf_order = np.argsort(-node_p[:, :512], axis=1, kind="stable")
    sets, stats = predict_sets_hf(model, X, "fbeta:beta=1", return_stats=True)
    g = svbop.utility("fbeta:beta=1").values(512)
    rows = np.arange(X.shape[0])
    pulled = stats["pulled"]
    last = node_p[rows, leaf_order[rows, pulled - 1]]
    mass = np.array([node_p[i, leaf_order[i, :pulled[i]]].sum() for i in rows])
    best = np.array([max(g[j] * node_p[i, leaf_order[i, :j + 1]].sum() for j in range(pulled[i])) for i in rows])
    internal = node_p[:, 512:]
    could_pass = g[pulled][:, None] * (mass[:, None] + internal) >= (1.0 - svbop.TIE_RTOL) * best[:, None]
    above = (internal > last[:, None]).sum(axis=1)
    assert np.all(stats["expanded"] >= above)
    assert np.all(stats["expanded"] <= above + ((internal <= last[:, None]) & could_pass).sum(axis=1))
    assert stats["expanded"].mean() < 0.2 * (tree.n_nodes - 512)
    # the bound stops before pulling the class that fails: never more than the set plus one
    assert np.all(pulled <= sets.sizes + 1) and np.any(pulled == sets.sizes)
    # and it saves expansions over searching down to that class
    first_fail = node_p[rows, leaf_order[rows, np.minimum(sets.sizes, 511)]]
    assert stats["expanded"].sum() < (internal > first_fail[:, None]).sum()


def test_long_sets_beyond_the_first_buffer_are_complete():
    tree = wide_tree(200)
    model = TreeModel(tree, sp.csr_matrix((201, 3)), np.zeros(201), np.arange(201) >= 200)
    sets = predict_sets_hf(model, np.ones((4, 3)), "recall")
    assert sets.sizes.tolist() == [200] * 4
    np.testing.assert_array_equal(sets[2], np.arange(200))


def test_provider_is_the_papers_algorithms_6_and_7():
    tree = SHAPES["predefined"]()
    model = random_model(tree, D=12, seed=5)
    X = queries(12, 20, seed=5)
    P = model.predict_proba(X)
    for i in range(X.shape[0]):
        provider = HFProvider(model)
        provider.init_prediction(X[i])
        stream = []
        while (item := provider.get_next_class()) is not None:
            stream.append(item)
        classes = [c for c, _ in stream]
        assert sorted(classes) == list(range(tree.n_classes))
        np.testing.assert_allclose([p for _, p in stream], P[i, classes], rtol=1e-12)
        assert all(a[1] >= b[1] for a, b in zip(stream, stream[1:]))
        for spec in ("fbeta:beta=1", "log"):
            result = svbop.svbop(HFProvider(model), X[i], spec, K=tree.n_classes)
            np.testing.assert_array_equal(result.classes, predict_sets_hf(model, X[i], spec)[0])


def test_layout_groups_children_weights_by_feature(monkeypatch):
    import svbop.hf as hf

    monkeypatch.setattr(hf, "_DIRECT_MIN", 2.0)  # the sparse form (a node kept over every feature id has none)
    monkeypatch.setattr(hf, "_DENSE_MIN", 2.0)
    monkeypatch.setattr(hf, "_LAYOUT_MAX", 0.0)
    tree = wide_tree(3)
    W = sp.csr_matrix(np.array([[0, 2.0, 0], [1.0, 3.0, 0], [0, 0, 0], [0, 0, 0]]))
    model = TreeModel(tree, W, np.zeros(4), np.array([False, False, False, True]))
    lay = TreeSearchLayout.from_model(model)
    v = 3
    assert lay.nmode[v] == hf.NODE_SPARSE
    lo, hi = lay.eptr[v]
    entries = [(int(lay.sfeat[e]), int(lay.schild[e]), float(lay.sval[e])) for e in range(lo, hi)]
    assert entries == [(0, 1, 1.0), (1, 0, 2.0), (1, 1, 3.0)]  # by feature, then child
    assert lay.sfeat.dtype == np.int32 and lay.schild.dtype == np.uint8


def test_layout_bytes_follow_the_model_not_the_feature_ids():
    """Issue 49: the layout of a million-class model held 4.6 times its CSR bytes (hash tables at a load of
    1/3-2/3 and a bitmap over every feature id per node).  With a wide feature space and nodes of many
    sparse children, the layout must stay within 1.5 times the model's CSR bytes (the old one took 17 times
    here), and give the same sets as the exhaustive search."""
    rng = np.random.default_rng(3)
    K, D, per_class = 400, 1_000_000, 60
    tree = Hierarchy(np.r_[np.repeat(np.arange(K, K + 4), K // 4), [K + 4] * 4, -1], K)
    rows = np.repeat(np.arange(tree.n_nodes - 1), per_class)
    W = sp.csr_matrix((rng.normal(size=rows.size), (rows, rng.integers(0, D, rows.size))), shape=(tree.n_nodes, D))
    W.sum_duplicates()
    model = TreeModel(tree, W, rng.normal(size=tree.n_nodes), np.r_[np.zeros(K, bool), np.ones(5, bool)])
    lay = TreeSearchLayout.from_model(model)
    csr = W.data.nbytes + W.indices.nbytes + W.indptr.nbytes
    assert lay.nbytes <= 1.5 * csr, (lay.nbytes, csr)
    X = sp.csr_matrix(W[rng.integers(0, K, 30)].toarray() > 0, dtype=float)  # rows on their classes' features
    X = sp.csr_matrix(X + sp.random(30, D, density=2e-5, random_state=3))
    for spec in ("fbeta:beta=1", "log"):
        assert_same_sets(predict_sets_hf(model, X, spec), svbop.predict_sets(model.predict_proba(X), spec))


def test_bad_input_is_refused_with_the_reason():
    tree = wide_tree(4)
    model = random_model(tree, D=3, seed=0)
    with pytest.raises(ValueError, match="X has 4 features, the model has 3"):
        predict_sets_hf(model, np.ones((2, 4)), "fbeta:beta=1")
    with pytest.raises(ValueError, match="row 1 contains NaN"):
        predict_sets_hf(model, np.array([[1.0, 0, 0], [np.nan, 0, 0]]), "fbeta:beta=1")
    part = TreeModel(tree, model.W, model.b, np.zeros(5, dtype=bool))
    with pytest.raises(ValueError, match="merge the parts"):
        predict_sets_hf(part, np.ones((1, 3)), "fbeta:beta=1")
    with pytest.raises(ValueError, match="K=7"):
        predict_sets_hf(model, np.ones((1, 3)), svbop.utility("fbeta:beta=1", K=7))


def test_reference_heap_order_matches_kernel_tie_rule():
    """heapq on (-log p, tie key, node) pops internal nodes before leaves of equal probability."""
    q = [(-0.0, 3, 3), (-0.0, -1, 9), (-0.0, 1, 1)]
    heapq.heapify(q)
    assert [heapq.heappop(q)[2] for _ in range(3)] == [9, 1, 3]


def test_blocks_over_every_feature_id_stay_within_their_budget_shallowest_first(monkeypatch):
    import svbop.hf as hf

    monkeypatch.setattr(hf, "_DIRECT_MIN", 0.0)  # every node qualifies; the budget picks
    model = random_model(binary_tree(64), D=300, seed=4)
    csr = model.W.data.nbytes + model.W.indices.nbytes + model.W.indptr.nbytes
    for budget in (0.0, 0.5, 2.0):
        monkeypatch.setattr(hf, "_DIRECT_BUDGET", budget)
        lay = TreeSearchLayout.from_model(model)
        direct = np.flatnonzero(lay.nmode == hf.NODE_DIRECT)
        assert lay.vval.nbytes <= budget * csr + 13 * model.W.nnz
        depth = model.tree.depth()
        internal = np.flatnonzero(np.diff(lay.child_ptr) > 0)
        if direct.size:  # no node left out is shallower than one kept
            left = depth[np.setdiff1d(internal, direct)]
            assert not left.size or depth[direct].max() <= left.min()
        assert (direct.size == 0) == (budget == 0.0)
        X = queries(300, 40, seed=1)
        assert_same_sets(predict_sets_hf(model, X, "fbeta:beta=1"),
                         svbop.predict_sets(model.predict_proba(X), "fbeta:beta=1"))


@pytest.mark.parametrize("rank", [False, True])
@pytest.mark.parametrize("one_weighted", [False, True])
@pytest.mark.parametrize("direct_min", [0.0, 2.0])
@pytest.mark.parametrize("dense_min", [0.0, 2.0])
@pytest.mark.parametrize("scan_max", [0, 10**9])
def test_search_scan_dense_and_direct_paths_give_the_same_exact_sets(monkeypatch, scan_max, dense_min, direct_min,
                                                                   one_weighted, rank):
    """Nodes with weights on most feature ids keep them as a block over every feature id (every node with
    direct_min 0, none with 2).  Otherwise nodes keep their children's weights as a dense block (every
    node with two or more weighted children with dense_min 0) or as sparse entries (none with 2), and
    find the row's features by binary search (scan_max 0) or read a dense copy of the row at theirs
    (scan_max 10**9).  With one_weighted, the second child of every node has no weights and bias 0 (as
    train_tree's binary nodes): the node's one weighted child is stored alone.  With rank, every dense
    node and every sparse node with one entry a feature (one_weighted) has a rank directory (a bit test and
    a popcount instead of the search or the scan).  Every combination must give the exhaustive answer."""
    import svbop.hf as hf

    monkeypatch.setattr(hf, "_LAYOUT_MAX", np.inf if rank else 0.0)
    monkeypatch.setattr(hf, "_SCAN_MAX", scan_max)
    monkeypatch.setattr(hf, "_DENSE_MIN", dense_min)
    monkeypatch.setattr(hf, "_DIRECT_MIN", direct_min)  # 0: every node keeps a block over all feature ids
    monkeypatch.setattr(hf, "_DIRECT_BUDGET", np.inf)
    tree = binary_tree(64)
    model = random_model(tree, D=300, seed=4)
    if one_weighted:
        indptr, children = tree.children_csr()
        second = children[indptr[tree.n_classes + 1:] - 1]  # the last child of every internal node
        W = model.W.tolil()
        W[second] = 0
        b = model.b.copy()
        b[second] = 0.0
        model = TreeModel(tree, sp.csr_matrix(W), b, model.trained)
        model.W.eliminate_zeros()
        lay = hf._layout(model)
        internal = np.diff(lay.child_ptr) > 0
        assert (np.diff(lay.aptr)[internal] == 1).all()
    rng = np.random.default_rng(4)
    rows = [rng.choice(300, size=rng.integers(1, 4), replace=False) for _ in range(80)]
    X = sp.csr_matrix((rng.random(sum(map(len, rows))), np.concatenate(rows),
                       np.concatenate([[0], np.cumsum([len(r) for r in rows])])), shape=(80, 300))
    lay = hf._layout(model)
    internal = np.diff(lay.child_ptr) > 0
    expect = (hf.NODE_DIRECT if direct_min == 0.0 else
              hf.NODE_DENSE if dense_min == 0.0 and not one_weighted else hf.NODE_SPARSE)
    assert (lay.nmode[internal] == expect).all()
    if expect == hf.NODE_DIRECT:  # kept over every feature id only
        assert lay.sfeat.size == lay.dfeat.size == 0 and (lay.vptr[internal] >= 0).all()
    else:
        assert (lay.vptr < 0).all() and lay.vval.size == 0
    assert (lay.dptr[internal] >= 0).all() == (expect == hf.NODE_DENSE)
    ranked = rank and (expect == hf.NODE_DENSE or (expect == hf.NODE_SPARSE and one_weighted))
    assert (lay.rptr[internal] >= 0).all() == ranked and ((lay.rptr >= 0).any() or not ranked)
    for spec in ("fbeta:beta=1", "fbeta:beta=5", "log"):
        assert_same_sets(predict_sets_hf(model, X, spec), svbop.predict_sets(model.predict_proba(X), spec))


def test_where_probabilities_underflow_hf_orders_by_log_probability():
    """Huge weights: many leaf probabilities underflow to 0 in predict_proba, so predict_sets can
    only list them by class id; HF lists the same classes by decreasing log-probability (the true
    order), which node_log_proba confirms."""
    tree = binary_tree(16)
    model = random_model(tree, D=12, seed=9, scale=2000.0)
    X = queries(12, 60, seed=9)
    P = model.predict_proba(X)
    assert (P == 0).any(axis=1).mean() > 0.5, "the test needs rows whose probabilities underflow"
    logp = model.node_log_proba(X)[:, : tree.n_classes]
    assert np.isfinite(logp).all()
    hf = predict_sets_hf(model, X, "recall")  # g constant: every class is in the set
    exhaustive = svbop.predict_sets(P, "recall")
    for i in range(X.shape[0]):
        assert sorted(hf[i]) == sorted(exhaustive[i]) == list(range(tree.n_classes))
        np.testing.assert_array_equal(np.diff(logp[i, hf[i]]) <= 0, True)  # decreasing log-probability
        zero = P[i, exhaustive[i]] == 0  # predict_sets: the underflowed classes last, by class id
        assert np.all(np.diff(exhaustive[i][zero]) > 0)


@pytest.mark.parametrize("path", ["direct", "dense search", "dense scan", "dense rank", "sparse search", "sparse scan",
                                  "sparse rank"])
def test_children_scores_are_summed_in_feature_order_on_every_path(monkeypatch, path):
    """Class 0's score is exactly class 1's (1) when summed in feature order, ((1e16 + 1) - 1e16) + 1
    = 1 (1e16 + 1 rounds to 1e16), and 0 or 2 in the other orders of the last two; so the exact tie
    (and the set order by class id that predict_sets gives it) survives only if every storage path
    adds the products in feature order."""
    import svbop.hf as hf

    settings = {  # _SCAN_MAX, _DENSE_MIN, _DIRECT_MIN, _LAYOUT_MAX
        "direct": (0, 2.0, 0.0, 0.0),
        "dense search": (0, 0.0, 2.0, 0.0),
        "dense scan": (10**9, 0.0, 2.0, 0.0),
        "dense rank": (0, 0.0, 2.0, np.inf),
        "sparse search": (0, 2.0, 2.0, 0.0),
        "sparse scan": (10**9, 2.0, 2.0, 0.0),
        "sparse rank": (0, 2.0, 2.0, np.inf),
    }[path]
    for name, value in zip(("_SCAN_MAX", "_DENSE_MIN", "_DIRECT_MIN", "_LAYOUT_MAX"), settings):
        monkeypatch.setattr(hf, name, value)
    monkeypatch.setattr(hf, "_DIRECT_BUDGET", np.inf)
    D = 40
    W = np.zeros((4, D))
    W[0, :4] = [1e16, 1.0, -1e16, 1.0]
    W[1, 4] = 1.0
    W[2, 5:] = 1e-3  # features the row does not have: a hash table pays where the node has many more than x
    model = TreeModel(wide_tree(3), sp.csr_matrix(W), np.zeros(4), np.array([False, False, False, True]))
    X = sp.csr_matrix(np.r_[np.ones(5), np.zeros(D - 5)].reshape(1, -1))
    scores = (X @ model.W.T).toarray()[0]
    assert scores[0] == scores[1] == 1.0
    assert (hf._layout(model).rptr[3] >= 0) == path.endswith("rank")
    expected = svbop.predict_sets(model.predict_proba(X), "recall")
    assert expected[0].tolist()[:2] == [0, 1]
    assert_same_sets(predict_sets_hf(model, X, "recall"), expected)


def test_hf_on_the_search_layout_alone_equals_hf_on_the_model():
    """At extreme K the weights are dropped once the layout is built: the layout is all HF reads."""
    from svbop.hf import TreeSearchLayout
    rng = np.random.default_rng(5)
    X = sp.random(300, 40, density=0.3, format="csr", random_state=6)
    y = rng.integers(0, 12, 300)
    y[:12] = np.arange(12)
    tree = balanced_kmeans_tree(X, y, 12, max_leaves=3)
    model = train_tree(X, y, tree, C=1.0, eps=0.01, progress=False)
    layout = TreeSearchLayout.from_model(model)
    for u in ("fbeta:beta=1", "credal:delta=1.6,gamma=0.6"):
        a, b = predict_sets_hf(model, X[:80], u), predict_sets_hf(layout, X[:80], u)
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
    with pytest.raises(ValueError, match="model must be a TreeModel or a TreeSearchLayout, got csr_matrix"):
        predict_sets_hf(model.W, X[:3], "fbeta:beta=1")


def test_layout_from_weights_mapped_from_an_uncompressed_model_is_the_same(tmp_path, monkeypatch):
    """TreeModel.save(compress=False) + load maps the weights from the file (read-only); the layout
    is then built a batch of nodes at a time, letting go of the pages read: the same layout and sets."""
    from svbop import _npz, hf
    from svbop._memory import file_mapped
    rng = np.random.default_rng(8)
    X = sp.random(400, 300, density=0.1, format="csr", random_state=9)
    y = rng.integers(0, 40, 400)
    y[:40] = np.arange(40)
    model = train_tree(X, y, balanced_kmeans_tree(X, y, 40, max_leaves=6), C=1.0, eps=0.01, progress=False)
    model.save(tmp_path / "stored.npz", compress=False)
    monkeypatch.setattr(_npz, "_MAP_BYTES", 0)  # map every member, however small
    monkeypatch.setattr(hf, "_BATCH_WEIGHTS", 97)  # many batches
    mapped = TreeModel.load(tmp_path / "stored.npz")
    assert file_mapped(mapped.W.data, mapped.W.indices)
    with pytest.raises(ValueError, match="read-only"):
        mapped.W.data[0] = 1.0
    assert len(hf._node_batches(np.arange(40, mapped.tree.n_nodes), *mapped.tree.children_csr(), mapped.W.indptr)) > 3
    a, b = TreeSearchLayout.from_model(model), TreeSearchLayout.from_model(mapped)
    for field in a.__dataclass_fields__:
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    s1, s2 = predict_sets_hf(model, X[:100], "fbeta:beta=1"), predict_sets_hf(mapped, X[:100], "fbeta:beta=1")
    np.testing.assert_array_equal(s1.indices, s2.indices)
    np.testing.assert_array_equal(s1.indptr, s2.indptr)
    compressed = tmp_path / "packed.npz"
    model.save(compressed)
    assert not file_mapped(TreeModel.load(compressed).W.data)
