"""svbop's own search of NMSLIB's HNSW graph (svbop._hnsw_kernels): sparse queries of a dense index.

The same graph and float32 vectors as NMSLIB's query, inner products over the query's non-zeros:
it must find what NMSLIB finds (the same search), the exact top-k with a wide beam, and read
nothing of a damaged file into the kernels.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("nmslib", reason="needs NMSLIB's python binding (pip install nmslib)")

from svbop.index import HNSWIndex, _read_graph  # noqa: E402

K, D, N = 600, 3_000, 120


@pytest.fixture(scope="module")
def problem():
    """Dense weights of high dimension with a bias, and tf-idf-like sparse queries (about 40 non-zeros)."""
    rng = np.random.default_rng(27)
    W = rng.standard_normal((K, D)) * (rng.random((K, D)) < 0.3)
    b = rng.standard_normal(K)
    X = sp.random(N, D, density=40 / D, random_state=np.random.RandomState(5), format="csr")
    X.data = rng.random(X.nnz) + 0.1
    return W, b, X


@pytest.fixture(scope="module")
def index(problem):
    W, b, _ = problem
    # a small M puts nodes on several levels, so the greedy descent through the upper levels runs
    # (M = 4 left 3 of the 600 nodes unreachable, for NMSLIB's query as for ours)
    return HNSWIndex.build(W, b, M=8, ef_construction=50)


def exact(W, b, X):
    return np.asarray(X @ W.T) + b


def test_the_graph_read_from_nmslibs_file_is_nmslibs(index, problem):
    W, b, _ = problem
    graph = index._own_graph()
    assert graph.max_level >= 2, "the fixture should give a graph with upper levels"
    assert graph.vectors.shape == (K, D + 1) and graph.vectors.dtype == np.float32
    np.testing.assert_array_equal(np.sort(graph.ids), np.arange(K))
    # the vectors are NMSLIB's float32 copy of [w_c, b_c - mean(b)], in its order of the objects
    want = np.hstack([W, (b - b.mean())[:, None]])[graph.ids].astype(np.float32)
    np.testing.assert_array_equal(graph.vectors, want)
    assert graph.count0.min() >= 1 and graph.count0.max() <= graph.links0.shape[1]
    assert (np.diff(graph.upper_ptr) <= graph.max_level).all()
    assert np.diff(graph.upper_ptr)[graph.entry] == graph.max_level
    reached, todo = {graph.entry}, [graph.entry]
    while todo:  # every node can be reached on level 0 (a beam as wide as K is exhaustive)
        node = todo.pop()
        for nb in graph.links0[node, : graph.count0[node]]:
            if int(nb) not in reached:
                reached.add(int(nb))
                todo.append(int(nb))
    assert len(reached) == K


@pytest.mark.parametrize("k", [1, 10, 40])
def test_a_beam_as_wide_as_K_finds_the_exact_top_k(index, problem, k):
    W, b, X = problem
    ids, scores = index.query(X, k, ef=K, engine="svbop")
    want = exact(W, b, X)
    order = np.argsort(-want, axis=1, kind="stable")[:, :k]
    np.testing.assert_allclose(scores, np.take_along_axis(want, ids, axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.take_along_axis(want, ids, axis=1), np.take_along_axis(want, order, axis=1),
                               rtol=1e-5, atol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 0)


@pytest.mark.parametrize("ef", [10, 30, 100])
def test_it_finds_what_nmslibs_query_finds(index, problem, ef):
    """Same graph, same search: the same classes, up to float32 near-ties (the sums' order differs)."""
    _, _, X = problem
    ours, our_scores = index.query(X, 10, ef=ef, engine="svbop")
    theirs, their_scores = index.query(X, 10, ef=ef, engine="nmslib")
    same = np.mean([np.intersect1d(a, t).size / 10 for a, t in zip(ours, theirs)])
    assert same >= 0.99, f"{same:.3f} of the classes found agree"
    np.testing.assert_allclose(our_scores[ours == theirs], their_scores[ours == theirs], rtol=1e-4, atol=1e-4)


def test_auto_uses_it_for_sparse_queries_only_and_threads_change_nothing(index, problem):
    _, _, X = problem
    ours = index.query(X, 10, ef=40, engine="svbop")
    auto = index.query(X, 10, ef=40)
    np.testing.assert_array_equal(auto[0], ours[0])
    np.testing.assert_array_equal(auto[1], ours[1])
    threaded = index.query(X, 10, ef=40, n_threads=2)
    np.testing.assert_array_equal(threaded[0], ours[0])
    np.testing.assert_array_equal(threaded[1], ours[1])
    dense = index.query(X.toarray(), 10, ef=40)  # dense queries: NMSLIB's
    np.testing.assert_array_equal(dense[0], index.query(X, 10, ef=40, engine="nmslib")[0])
    # duplicate entries of a non-canonical CSR add up, as in toarray()
    twice = sp.csr_matrix((np.repeat(X.data / 2, 2), np.repeat(X.indices, 2), 2 * X.indptr), shape=X.shape)
    got = index.query(twice, 10, ef=40)
    np.testing.assert_array_equal(got[0], ours[0])
    np.testing.assert_allclose(got[1], ours[1], rtol=1e-12)
    # an empty query row scores every class by its bias alone
    empty = index.query(sp.csr_matrix((1, D)), 5, ef=K)
    _, b, _ = problem
    np.testing.assert_array_equal(empty[0][0], np.argsort(-b, kind="stable")[:5])


def test_engine_is_checked(index, problem):
    W, b, X = problem
    with pytest.raises(ValueError, match="engine must be one of"):
        index.query(X, 5, engine="faiss")
    with pytest.raises(ValueError, match="engine='svbop' searches a dense index with sparse"):
        index.query(X.toarray(), 5, engine="svbop")
    sparse = HNSWIndex.build(sp.csr_matrix(W), b)
    with pytest.raises(ValueError, match="this index is sparse"):
        sparse.query(X, 5, engine="svbop")
    with pytest.raises(ValueError, match="NaN or infinite"):
        bad = X.copy()
        bad.data[0] = np.nan
        index.query(bad, 5)


def test_a_loaded_index_reads_its_own_file_and_answers_the_same(index, problem, tmp_path):
    _, _, X = problem
    index.save(tmp_path / "idx")
    loaded = HNSWIndex.load(tmp_path / "idx")
    got = loaded.query(X, 10, ef=40)
    want = index.query(X, 10, ef=40)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_a_damaged_graph_file_is_refused_with_its_name_never_searched(index, tmp_path):
    index.save(tmp_path / "idx")
    path = tmp_path / "idx"
    raw = bytearray(path.read_bytes())
    header = 68
    per = int.from_bytes(raw[8:16], "little")
    off0 = int.from_bytes(raw[16:24], "little")
    maxM = int.from_bytes(raw[40:48], "little")
    cases = {
        "a level-0 neighbour id out of range": (header + 3 * per + off0 + 4, (K + 7).to_bytes(4, "little")),
        "a level-0 neighbour count outside": (header + 3 * per + off0, (10_000).to_bytes(4, "little")),
        "elements, the index has": (4, (K - 1).to_bytes(4, "little")),
        "distance function": (56, (2).to_bytes(4, "little")),
        "regular layout": (0, (0).to_bytes(4, "little")),
    }
    for what, (offset, patch) in cases.items():
        damaged = bytearray(raw)
        damaged[offset : offset + len(patch)] = patch
        path.write_bytes(bytes(damaged))
        with pytest.raises(ValueError, match=what) as err:
            _read_graph(path, K, D)
        assert str(path) in str(err.value) and "rebuild the index" in str(err.value)
    for cut in (10, header + per, len(raw) - 3):
        path.write_bytes(bytes(raw[:cut]))
        with pytest.raises(ValueError, match=str(path)):
            _read_graph(path, K, D)
    path.write_bytes(bytes(raw) + b"\0\0\0\0")
    with pytest.raises(ValueError, match="bytes after the last object"):
        _read_graph(path, K, D)
    # an upper-level neighbour out of range: the first neighbour of the first node with one
    damaged = bytearray(raw)
    pos = header + K * per
    for _ in range(K):
        mass = int.from_bytes(damaged[pos : pos + 4], "little")
        if mass and int.from_bytes(damaged[pos + 4 : pos + 8], "little") > 0:
            damaged[pos + 8 : pos + 12] = (K + 1).to_bytes(4, "little")
            break
        pos += 4 + mass
    else:
        pytest.fail("no upper-level neighbour in the fixture's graph")
    assert mass % (4 * (maxM + 1)) == 0
    path.write_bytes(bytes(damaged))
    with pytest.raises(ValueError, match="an upper-level neighbour id out of range"):
        _read_graph(path, K, D)
    path.write_bytes(bytes(raw))
    assert _read_graph(path, K, D).vectors.shape == (K, D + 1)
