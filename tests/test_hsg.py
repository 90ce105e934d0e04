"""SVBOP-HSG (svbop.hsg): HNSW-delivered classes, exact scores, Algorithm 1 with doubling."""

import numpy as np
import pytest
import scipy.sparse as sp

import svbop
from svbop.full import predict_sets_full
from svbop.hsg import HSGProvider, exact_scores, predict_sets_hsg
from svbop.index import HNSWIndex
from svbop.linear import LinearModel

CONVEX = [s for s in svbop.STANDARD_UTILITIES if svbop.utility(s).properties(120).early_stop_valid]


def problem(sparse_w: bool, K=120, D=80, n=200, seed=0):
    rng = np.random.default_rng(seed)
    W = sp.random(K, D, density=0.15, random_state=seed, format="csr") * 3
    b = rng.normal(size=K) * 0.3
    X = sp.random(n, D, density=0.1, random_state=seed + 1, format="csr")
    model = LinearModel(W if sparse_w else W.toarray(), b, np.arange(K))
    return model, X


@pytest.fixture(scope="module", params=["sparse", "dense"])
def setup(request):
    model, X = problem(request.param == "sparse")
    index = HNSWIndex(M=16, ef_construction=200).fit(model.W, model.b)
    return model, index, X


def identical(a, b) -> np.ndarray:
    return np.array([np.array_equal(a[i], b[i]) for i in range(len(a))])


@pytest.mark.parametrize("spec", svbop.STANDARD_UTILITIES)
def test_exhaustive_index_gives_svbop_full(setup, spec):
    model, index, X = setup
    K = model.n_classes
    full = predict_sets_full(model, X, spec)
    hsg = predict_sets_hsg(model, index, X, spec, k=K, ef=K)
    assert identical(hsg, full).all()


@pytest.mark.parametrize("spec", [s for s in CONVEX if s != "precision"])  # precision: always one class
def test_doubling_appends_new_classes_until_algorithm_1_stops(setup, spec):
    """k = 1: every row whose optimal set has more than one class needs the doubling; with an
    exact index (ef = K) the appended classes are the right ones and the sets equal Full's."""
    model, index, X = setup
    K = model.n_classes
    full = predict_sets_full(model, X, spec)
    hsg, stats = predict_sets_hsg(model, index, X, spec, k=1, ef=K, return_stats=True)
    assert identical(hsg, full).all()
    big = full.sizes > 1
    assert big.any()
    # a set of s classes needs at least s + 1 delivered classes (the first that fails) or all K
    assert np.all(stats["scored"][big] >= np.minimum(full.sizes[big] + 1, K))
    assert np.all(stats["queries"][big] >= 1 + np.ceil(np.log2(np.minimum(full.sizes[big] + 1, K))))
    assert np.all(stats["queries"] == 1 + np.ceil(np.log2(np.maximum(stats["scored"], 1))).astype(int))


def test_batched_equals_the_papers_provider_with_an_approximate_index(setup):
    model, index, X = setup
    K = model.n_classes
    for spec in ("fbeta:beta=1", "fbeta:beta=5"):
        batched = predict_sets_hsg(model, index, X, spec, k=2)
        for i in range(0, X.shape[0], 7):
            provider = HSGProvider(model, index, k=2)
            result = svbop.svbop(provider, X[i], spec, K=K, require_sorted=False)
            np.testing.assert_array_equal(result.classes, batched[i])


def test_approximate_sets_are_algorithm_1_on_the_stream_they_got():
    """A tiny ef makes the index miss classes; the set must still be a prefix of what it
    delivered, chosen by Algorithm 1 on exact scores."""
    model, X = problem(True, K=300, D=40, n=100, seed=3)
    index = HNSWIndex(M=4, ef_construction=8).fit(model.W, model.b)
    hsg, stats = predict_sets_hsg(model, index, X, "fbeta:beta=1", k=3, return_stats=True)
    full = predict_sets_full(model, X, "fbeta:beta=1")
    agreement = identical(hsg, full).mean()
    assert 0 < agreement <= 1
    for i in range(0, X.shape[0], 9):
        result = svbop.svbop(HSGProvider(model, index, k=3), X[i], "fbeta:beta=1", K=300, require_sorted=False)
        np.testing.assert_array_equal(result.classes, hsg[i])


def test_exact_scores_equal_the_model(setup):
    model, _, X = setup
    ids = np.tile(np.array([[5, 0, -1, 119]]), (X.shape[0], 1))
    S = exact_scores(model, X, ids)
    D = model.decision_function(X)
    np.testing.assert_allclose(S[:, [0, 1, 3]], D[:, [5, 0, 119]], rtol=1e-13, atol=1e-13)
    assert np.all(S[:, 2] == -np.inf)
    if sp.issparse(model.W):  # same summation order as scipy: equal bit for bit
        np.testing.assert_array_equal(S[:, [0, 1, 3]], D[:, [5, 0, 119]])


def test_mismatched_index_and_bad_k_are_refused(setup):
    model, index, X = setup
    other, _ = problem(True, K=50)
    with pytest.raises(ValueError, match="does not match the model"):
        predict_sets_hsg(other, index, X, "fbeta:beta=1")
    with pytest.raises(ValueError, match="k must be a positive integer"):
        predict_sets_hsg(model, index, X, "fbeta:beta=1", k=0)
    with pytest.raises(ValueError, match="index must be"):
        predict_sets_hsg(model, "hnsw.bin", X, "fbeta:beta=1")


@pytest.mark.parametrize("spec", svbop.STANDARD_UTILITIES)
def test_hsg_asked_for_every_class_is_exact_when_the_graph_misses_classes(spec):
    """K = 1000 classes in D = 5 dimensions: NMSLIB's graph returns fewer than K classes even for
    k = ef = K; the classes it missed are scored exactly, so the sets equal SVBOP-Full's."""
    rng = np.random.default_rng(11)
    K, D = 1000, 5
    model = LinearModel(rng.normal(size=(K, D)) * 2, rng.normal(size=K), np.arange(K))
    X = sp.csr_matrix(rng.normal(size=(60, D)))
    index = HNSWIndex(M=4, ef_construction=10).fit(model.W, model.b)
    returned = (index.query(X, K, ef=K)[0] >= 0).sum(axis=1)
    assert returned.min() < K, "the graph reached every class: the test needs a graph that misses some"
    full = predict_sets_full(model, X, spec)
    hsg = predict_sets_hsg(model, index, X, spec, k=K, ef=K)
    assert identical(hsg, full).all()
    for i in range(0, X.shape[0], 13):  # the paper's provider, one row at a time, alike
        provider = HSGProvider(model, index, k=K, ef=K)
        got = svbop.svbop(provider, X[i], spec, K=K, require_sorted=False)
        np.testing.assert_array_equal(got.classes, full[i])


@pytest.mark.parametrize("sparse_w", [True, False])
def test_bias_centring_changes_no_score_and_no_set(sparse_w):
    """The index holds b - mean(b): query scores still equal w.x + b, and with an exhaustive
    index HSG's sets are Full's whether the bias is centred or not."""
    model, X = problem(sparse_w, seed=5)
    model = LinearModel(model.W, model.b - 6.0, model.classes)  # a large common bias, as liblinear's
    K = model.n_classes
    full = predict_sets_full(model, X, "fbeta:beta=1")
    for center in (True, False):
        index = HNSWIndex(M=16, ef_construction=200, center_bias=center).fit(model.W, model.b)
        assert index.bias_shift == (pytest.approx(np.mean(model.b)) if center else 0.0)
        ids, scores = index.query(X, 10, ef=K)
        exact = model.decision_function(X)
        np.testing.assert_allclose(scores, np.take_along_axis(exact, ids, axis=1), rtol=1e-5, atol=1e-5)
        assert identical(predict_sets_hsg(model, index, X, "fbeta:beta=1", k=K, ef=K), full).all()


def test_index_recall_is_the_share_of_the_exact_top_k_returned(setup):
    model, index, X = setup
    K = model.n_classes
    from svbop.hsg import index_recall

    assert index_recall(model, index, X, K) == 1.0  # asked for everything: everything (or tied)
    got = index_recall(model, index, X, 5, ef=5)
    ids, _ = index.query(X, 5, ef=5)
    exact = np.argsort(-model.decision_function(X), axis=1, kind="stable")[:, :5]
    by_hand = np.mean([np.intersect1d(a, b).size / 5 for a, b in zip(ids, exact)])
    assert got == pytest.approx(by_hand)
    weak = HNSWIndex(M=2, ef_construction=2).fit(model.W, model.b)
    assert index_recall(model, weak, X, 20, ef=20) < 1.0


def test_index_scores_by_default_are_the_exact_scores_to_float32_precision(setup):
    """By default the classes carry the index's float32 inner products (napkinXC's way), which
    equal the exact scores to float32 precision; ``rescore=True`` gives the exact ones."""
    model, index, X = setup
    exact = model.decision_function(X)
    for i in range(0, X.shape[0], 17):
        for rescore in (False, True):
            provider = HSGProvider(model, index, k=10, rescore=rescore)
            provider.init_prediction(X[i])
            classes = np.array([c for c, _ in provider._queue])
            probs = np.array([p for _, p in provider._queue])
            row = exact[i, classes]
            want = np.exp(row - row[0])
            if rescore:
                np.testing.assert_array_equal(probs, want)
            else:
                np.testing.assert_allclose(probs, want, rtol=1e-5)
    by_index = predict_sets_hsg(model, index, X, "fbeta:beta=1", k=10)
    by_model = predict_sets_hsg(model, index, X, "fbeta:beta=1", k=10, rescore=True)
    assert identical(by_index, by_model).mean() >= 0.95


def test_rescore_must_be_a_flag(setup):
    model, index, X = setup
    with pytest.raises(ValueError, match="rescore must be True or False"):
        predict_sets_hsg(model, index, X, "fbeta:beta=1", rescore="yes")
    with pytest.raises(ValueError, match="rescore must be True or False"):
        HSGProvider(model, index, rescore=1)


def test_exact_scores_by_weight_rows_and_by_feature_columns_agree_bit_for_bit():
    """Sparse weights: many candidates per row make the kernel walk the columns x uses, one
    candidate makes it walk the candidate's row; both sum as scipy does, bit for bit."""
    model, X = problem(True, K=300, D=200, n=80, seed=7)
    D = model.decision_function(X)
    W = sp.csr_matrix(model.W)
    row_cost = np.diff(W.indptr)
    col_cost = np.diff(sp.csr_matrix(W.T).indptr)
    x_cost = np.array([2 * col_cost[X.indices[X.indptr[i]:X.indptr[i + 1]]].sum() for i in range(X.shape[0])])
    every = np.tile(np.arange(300), (X.shape[0], 1))
    one = np.tile(np.array([[int(np.argmin(row_cost))]]), (X.shape[0], 1))
    assert np.all(x_cost < row_cost.sum()) and np.all(x_cost > row_cost[one[0, 0]])  # both walks are taken
    np.testing.assert_array_equal(exact_scores(model, X, every), D)
    np.testing.assert_array_equal(exact_scores(model, X, one), D[:, one[0]])
