"""Crafted HNSW index files and out-of-range sparse features (issue 36, classes 1 and 2).

The sidecar's sha256 is no defence against a crafted index: whoever crafts the files can
recompute it.  Each test builds a small real index, saves it, edits bytes of the graph, the data
or the sidecar, re-signs the sidecar, and loads and queries it.  Loads and queries that could
crash the interpreter (NMSLIB reading an inconsistent file, a kernel indexing with a feature id
past ``D``) run in a child process whose address space is capped, which prints one line per case:
``ValueError: ...`` for a refusal, ``answered`` for an answer; a crash fails the test with the
child's exit status instead of taking the suite down.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from watched import run_watched

pytest.importorskip("nmslib", reason="needs NMSLIB's python binding (pip install nmslib)")

from svbop.index import HNSWIndex  # noqa: E402
from svbop.linear import LinearModel  # noqa: E402

WORKFLOW = Path(__file__).resolve().parents[1] / "workflow"
#: Address space of the children: a load must never allocate what a crafted header claims.
CAP = 3 << 30
K, D = 120, 12
HEADER = 68  # the optimized graph file's header (svbop.index._GRAPH_HEADER)
REGULAR_HEADER = 40  # the regular (sparse) graph file's header


def in_child(script: str, *args: str) -> list[str]:
    """Run ``script`` in a capped child process; its stdout lines (it must not crash)."""
    code = "import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, ({0}, {0}))\n".format(CAP)
    env = {**os.environ, "PYTHONPATH": f"{WORKFLOW}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    run = run_watched([sys.executable, "-c", code + textwrap.dedent(script), *args], env=env)
    assert run.returncode == 0, (f"the child died (status {run.returncode}) after:\n{run.stdout[-3000:]}\n"
                                 f"{run.stderr[-3000:]}")
    return run.stdout.splitlines()


#: Loads each index named on the command line and queries it dense and sparse, every engine.
LOAD_AND_QUERY = """
    import numpy as np, scipy.sparse as sp
    from svbop.index import HNSWIndex
    X = np.random.default_rng(0).standard_normal((5, int(sys.argv[1])))
    X[:, ::2] = 0.0
    for path in sys.argv[2:]:
        index = None
        try:
            index = HNSWIndex.load(path)
            for Xq in (X, sp.csr_matrix(X)):
                for engine in ("nmslib", "auto"):
                    ids, scores = index.query(Xq, 3, ef=10, engine=engine)
                    assert np.isfinite(scores).all(), scores
            print("answered", flush=True)
        except ValueError as exc:
            print(f"ValueError: {exc}".replace("\\n", " "), flush=True)
        del index
        import gc; gc.collect()
"""


def load_in_child(paths: list[Path]) -> list[str]:
    out = in_child(LOAD_AND_QUERY, str(D), *map(str, paths))
    assert len(out) == len(paths), out
    return out


def resign(path: Path, info: dict | None = None) -> None:
    """Record the graph's and data's current sizes and sha256 in the sidecar (as a crafter would)."""
    graph, data, sidecar = HNSWIndex.files(path)
    info = json.loads(sidecar.read_text()) if info is None else info
    info["files"] = {role: {"bytes": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
                     for role, f in (("graph", graph), ("data", data))}
    sidecar.write_text(json.dumps(info))


def crafted(source: Path, folder: Path, name: str, graph=None, data=None, info=None) -> Path:
    """A copy of the saved index ``source`` as ``folder/name`` with its graph / data bytes (or sidecar
    dict) passed through the given functions, then re-signed."""
    out = folder / name
    for src, dst in zip(HNSWIndex.files(source), HNSWIndex.files(out)):
        shutil.copyfile(src, dst)
    g, d, s = HNSWIndex.files(out)
    if graph is not None:
        g.write_bytes(bytes(graph(bytearray(g.read_bytes()))))
    if data is not None:
        d.write_bytes(bytes(data(bytearray(d.read_bytes()))))
    sidecar = json.loads(s.read_text())
    if info is not None:
        sidecar = info(sidecar)
    resign(out, sidecar)
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A dense and a sparse (clipped) index of the same random model, saved."""
    rng = np.random.default_rng(36)
    W, b = rng.standard_normal((K, D)), rng.standard_normal(K)
    folder = tmp_path_factory.mktemp("indexes")
    dense, sparse = folder / "dense", folder / "sparse"
    HNSWIndex.build(W, b, M=4, ef_construction=20).save(dense)
    HNSWIndex.from_model(LinearModel(W, b, np.arange(K)).clip(0.8), M=4, ef_construction=20).save(sparse)
    return dense, sparse


# ------------------------------------------------------------------------------ dense graph files
def _u32(buf, at):
    return int.from_bytes(buf[at : at + 4], "little")


def _put(buf, at, value, width=4, signed=False):
    buf[at : at + width] = int(value).to_bytes(width, "little", signed=signed)
    return buf


def _layout(buf):
    per, off0 = int.from_bytes(buf[8:16], "little"), int.from_bytes(buf[16:24], "little")
    maxM = int.from_bytes(buf[40:48], "little")
    return per, off0, maxM


def _upper_lists(buf):
    """(offset of each object's upper-level byte count, that count) of an optimized graph file."""
    per, _, _ = _layout(buf)
    pos, out = HEADER + K * per, []
    for _ in range(K):
        mass = _u32(buf, pos)
        out.append((pos, mass))
        pos += 4 + mass
    return out


def _upper_past_end(buf):
    pos, _ = _upper_lists(buf)[-1]
    return _put(buf, pos, len(buf))  # the last object's upper levels "run past the end of the file"


def _neighbour_below_its_level(buf):
    """A link on level 1 to a node that lives on level 0 only (NMSLIB would read its level-1 links)."""
    _, _, maxM = _layout(buf)
    lists = _upper_lists(buf)
    flat = next(i for i, (_, mass) in enumerate(lists) if mass == 0)
    pos, _ = next((p, m) for p, m in lists if m)
    _put(buf, pos + 4, max(1, _u32(buf, pos + 4)))  # at least one neighbour on level 1
    return _put(buf, pos + 8, flat)


def _vector_value(value, row=5, column=2):
    """Set one value of one vector in the optimized graph file (object ``row``, after its header)."""
    def edit(buf):
        at = HEADER + row * _layout(buf)[0] + 16 + 4 * column
        buf[at : at + 4] = struct.pack("<f", value)
        return buf
    return edit


def _data_value(value, row=5, column=2):
    def edit(buf):
        stride = 8 + 16 + 4 * (D + 1)
        at = 8 + row * stride + 24 + 4 * column
        buf[at : at + 4] = struct.pack("<f", value)
        return buf
    return edit


def test_crafted_dense_graphs_are_refused_before_nmslib_reads_them(saved, tmp_path):
    """Each crafted graph passes the sidecar's digest (re-signed); the loader's own reader refuses
    it naming the file, and NMSLIB never sees it (before: SIGSEGV on a query or when the
    half-built NMSLIB index was freed, NaN scores, or answers from a neighbour's links)."""
    dense, _ = saved
    per = _layout(bytearray(HNSWIndex.files(dense)[0].read_bytes()))[0]
    off0 = HEADER + 3 * per + 16 + 4 * (D + 1)
    cases = {
        "upper levels run past the end": (dict(graph=_upper_past_end), "upper levels"),
        "cut 40 bytes short": (dict(graph=lambda b: b[:-40]), "not a consistent"),
        "level-0 neighbour out of range": (dict(graph=lambda b: _put(b, off0 + 4, K + 7)), "neighbour id out of range"),
        "level-0 count too large": (dict(graph=lambda b: _put(b, off0, 10_000)), "neighbour count outside"),
        "neighbour below its level": (dict(graph=_neighbour_below_its_level), "not itself on that level"),
        "NaN vector in the graph": (dict(graph=_vector_value(np.nan), data=_data_value(np.nan)), "NaN or infinite"),
        "inf vector in the data": (dict(data=_data_value(np.inf)), "NaN or infinite"),
        "graph and data disagree": (dict(data=_data_value(123.0)), "vectors differ"),
        "search method": (dict(graph=lambda b: _put(b, 60, 7, 8)), "search method 7"),
        "entry point out of range": (dict(graph=lambda b: _put(b, 36, K)), "entry"),
        "object size 2**40 in the data": (dict(data=lambda b: _put(b, 8, 1 << 40, 8)), "not 13 float32 values"),
        "data count 2**40": (dict(data=lambda b: _put(b, 0, 1 << 40, 8)), "objects, the index has"),
        "data file cut short": (dict(data=lambda b: b[:-7]), "bytes, not 120 objects"),
    }
    paths = [crafted(dense, tmp_path, name.replace(" ", "_").replace("*", ""), **edits)
             for name, (edits, _) in cases.items()]
    for (name, (_, fragment)), path, line in zip(cases.items(), paths, load_in_child(paths)):
        assert line.startswith("ValueError: "), (name, line)
        assert fragment in line, (name, line)
        assert str(path) in line, (name, line)  # the user's file, not the private copy


def test_the_sidecar_is_checked_strictly(saved, tmp_path):
    dense, sparse = saved
    def set_(key, value):
        return lambda info: {**info, key: value}
    cases = [
        (dense, set_("sparse", "false"), "sparse must be true or false, got 'false'"),
        (dense, set_("sparse", 0), "sparse must be true or false"),
        (dense, set_("K", 120.0), "K must be an integer"),
        (dense, set_("D", True), "D must be an integer"),
        (dense, set_("M", 10**12), "M must be an integer in 1..32768"),
        (dense, set_("bias_shift", "0"), "bias_shift must be a finite number"),
        (dense, set_("space", "l2"), "space must be one of"),
        (dense, lambda info: {**info, "sparse": True, "space": "negdotprod_sparse_fast"}, "optimized layout"),
        (sparse, lambda info: {**info, "sparse": False, "space": "negdotprod"}, "regular layout"),
        (dense, set_("build_threads", "many"), "build_threads must be a positive integer or null"),
        (dense, lambda info: {k: v for k, v in info.items() if k != "space"}, "missing keys ['space']"),
    ]
    paths = [crafted(src, tmp_path, f"s{i}", info=edit) for i, (src, edit, _) in enumerate(cases)]
    for (_, _, fragment), path, line in zip(cases, paths, load_in_child(paths)):
        assert line.startswith("ValueError: ") and fragment in line, (fragment, line)
        assert str(path) in line
    with pytest.raises(ValueError, match="M must be at most 32768"):  # an index it could not load back
        HNSWIndex(M=32769)


def test_a_deep_or_huge_sidecar_is_refused_before_it_is_parsed(saved, tmp_path):
    dense, _ = saved
    for depth, fragment in ((100_000, "more than the 65536"), (5_000, "nested too deeply")):
        path = crafted(dense, tmp_path, f"deep{depth}")
        HNSWIndex.files(path)[2].write_text("[" * depth + "]" * depth)
        with pytest.raises(ValueError, match=fragment) as err:
            HNSWIndex.load(path)
        assert str(HNSWIndex.files(path)[2]) in str(err.value)
    path = crafted(dense, tmp_path, "huge", info=lambda info: {**info, "padding": "x" * 100_000})
    with pytest.raises(ValueError, match="more than the 65536"):
        HNSWIndex.load(path)


# ----------------------------------------------------------------------------- sparse index files
def _regular_nodes(buf):
    """Per node of a regular graph file: [(offset of its level count, level, [(offset of count, count)])]."""
    pos, nodes = REGULAR_HEADER, []
    for _ in range(K):
        level = _u32(buf, pos)
        lists, at = [], pos + 4
        for _ in range(level + 1):
            count = _u32(buf, at)
            lists.append((at, count))
            at += 4 + 4 * count
        nodes.append((pos, level, lists))
        pos = at
    return nodes


def _regular_edit(kind):
    def edit(buf):
        nodes = _regular_nodes(buf)
        if kind in ("neighbour", "negative"):  # the first level-0 neighbour of node 0
            at, _ = next(lst[0] for _, _, lst in nodes if lst[0][1])
            return _put(buf, at + 4, K + 3) if kind == "neighbour" else _put(buf, at + 4, -5, signed=True)
        if kind == "count":
            at, _ = nodes[7][2][0]
            return _put(buf, at, 1 << 30)
        if kind == "level":
            at, _, _ = next(n for n in nodes if n[1] == 0)
            return _put(buf, at, 60)
        if kind == "below":  # a level-1 link to a node on level 0 only
            flat = next(i for i, n in enumerate(nodes) if n[1] == 0)
            _, _, lists = next(n for n in nodes if n[1] >= 1 and n[2][1][1])
            return _put(buf, lists[1][0] + 4, flat)
        raise AssertionError(kind)
    return edit


def _sparse_objects(buf):
    pos, out = 8, []
    for _ in range(K):
        size = int.from_bytes(buf[pos : pos + 8], "little")
        out.append((pos, size))
        pos += 8 + size
    return out


def _sparse_edit(kind):
    def edit(buf):
        pos, size = next(o for o in _sparse_objects(buf) if o[1] > 16 + 16 + 16 + 12)
        data = pos + 8 + 16
        blocks = int.from_bytes(buf[data : data + 8], "little")
        assert blocks == 1
        ids_at = data + 16 + 16
        count = int.from_bytes(buf[data + 16 : data + 24], "little")
        if kind == "feature past D":
            return _put(buf, ids_at + 2 * (count - 1), D + 5, 2)
        if kind == "unsorted":
            first, second = bytes(buf[ids_at : ids_at + 2]), bytes(buf[ids_at + 2 : ids_at + 4])
            buf[ids_at : ids_at + 4] = second + first
            return buf
        if kind == "nan":
            buf[ids_at + 2 * count : ids_at + 2 * count + 4] = struct.pack("<f", np.nan)
            return buf
        if kind == "object size":
            return _put(buf, pos, 1 << 40, 8)
        if kind == "data length":
            return _put(buf, pos + 8 + 8, size, 8)  # the object's own length claims 16 bytes more
        if kind == "block count":
            return _put(buf, data, 1 << 40, 8)
        raise AssertionError(kind)
    return edit


def test_crafted_sparse_index_files_are_refused(saved, tmp_path):
    """The sparse index's graph (NMSLIB's regular layout) and data file (packed sparse vectors) are
    parsed in full as well: every count, level, neighbour, block, feature id and value."""
    _, sparse = saved
    cases = {
        "neighbour out of range": (dict(graph=_regular_edit("neighbour")), "neighbour id out of range"),
        "negative neighbour": (dict(graph=_regular_edit("negative")), "neighbour id out of range"),
        "huge neighbour count": (dict(graph=_regular_edit("count")), "neighbours"),
        "level above the top": (dict(graph=_regular_edit("level")), "above the top level"),
        "neighbour below its level": (dict(graph=_regular_edit("below")), "not itself on that level"),
        "graph cut short": (dict(graph=lambda b: b[:-40]), "not a consistent"),
        "graph entry out of range": (dict(graph=lambda b: _put(b, 12, K + 1)), "entry"),
        "feature past D": (dict(data=_sparse_edit("feature past D")), "feature id"),
        "unsorted ids": (dict(data=_sparse_edit("unsorted")), "not increasing"),
        "NaN value": (dict(data=_sparse_edit("nan")), "NaN or infinite"),
        "object size 2**40": (dict(data=_sparse_edit("object size")), "bytes recorded"),
        "data length beyond the object": (dict(data=_sparse_edit("data length")), "bytes recorded"),
        "block count 2**40": (dict(data=_sparse_edit("block count")), "blocks in"),
        "trailing bytes": (dict(data=lambda b: b + b"\0" * 8), "after the last object"),
        # a count of 2**31 - 1 everywhere (sidecar, graph, data): refused before 16 GiB of per-node arrays
        "K of 2**31 - 1": (dict(graph=lambda b: _put(b, 4, 2**31 - 1), data=lambda b: _put(b, 0, 2**31 - 1, 8),
                                info=lambda info: {**info, "K": 2**31 - 1}), "too short for 2147483647 nodes"),
    }
    paths = [crafted(sparse, tmp_path, name.replace(" ", "_").replace("*", ""), **edits)
             for name, (edits, _) in cases.items()]
    for (name, (_, fragment)), path, line in zip(cases.items(), paths, load_in_child(paths)):
        assert line.startswith("ValueError: ") and fragment in line, (name, line)
        assert str(path) in line, (name, line)


def test_untouched_indexes_still_load_and_answer(saved, tmp_path):
    dense, sparse = saved
    assert load_in_child([dense, sparse]) == ["answered", "answered"]


def test_the_old_sparse_space_is_checked_too(tmp_path, monkeypatch):
    """Indexes of the plain ``negdotprod_sparse`` space ((id, value) pairs) still load, and a
    feature id past D in one is refused."""
    import svbop.index as index_module

    rng = np.random.default_rng(1)
    W = sp.random(K, D, density=0.4, random_state=1, format="csr")
    monkeypatch.setattr(index_module, "_SPARSE_SPACE", "negdotprod_sparse")
    index = HNSWIndex.build(W, rng.standard_normal(K), M=4, ef_construction=20)
    assert index.space == "negdotprod_sparse"
    index.save(tmp_path / "old")
    loaded = HNSWIndex.load(tmp_path / "old")
    Xq = sp.random(4, D, density=0.5, random_state=2, format="csr")
    np.testing.assert_array_equal(loaded.query(Xq, 5, ef=K)[0], index.query(Xq, 5, ef=K)[0])

    def past_d(buf):
        pos = 8
        size = int.from_bytes(buf[pos : pos + 8], "little")
        assert size > 16
        return _put(buf, pos + 8 + 16, D + 2)  # the first pair's id

    path = crafted(tmp_path / "old", tmp_path, "old_bad", data=past_d)
    with pytest.raises(ValueError, match=f"{path}.dat: .*feature id {D + 2} outside 0..{D}"):
        HNSWIndex.load(path)


# ---------------------------------------------------------------------- read once, at load time
@pytest.mark.parametrize("change", ["replaced", "deleted"])
def test_files_changed_after_load_change_nothing(saved, tmp_path, change):
    """The graph is read once, at load, from the bytes whose digest was checked: a graph file
    replaced (by another valid, re-signed index) or deleted afterwards does not change the answers
    (before: svbop's search read the file lazily at its first query, unchecked)."""
    dense, _ = saved
    path = crafted(dense, tmp_path, "idx")
    index = HNSWIndex.load(path)
    X = sp.random(6, D, density=0.5, random_state=3, format="csr")
    if change == "replaced":
        rng = np.random.default_rng(99)
        HNSWIndex.build(rng.standard_normal((K, D)), rng.standard_normal(K), M=4, ef_construction=20).save(path)
    else:
        for file in HNSWIndex.files(path):
            file.unlink()
    fresh = HNSWIndex.load(dense)
    for engine in ("svbop", "nmslib"):
        got, want = index.query(X, 5, ef=30, engine=engine), fresh.query(X, 5, ef=30, engine=engine)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


# ------------------------------------------------------------------------------- k and ef bounds
def test_k_and_ef_are_bounded_by_the_number_of_classes(saved):
    """ef above K is clipped to K (the same search: a beam as wide as the graph); before, ef=10**9
    made svbop's search allocate 10**9-long arrays (MemoryError) and ef=2**31 was a pybind cast
    error in NMSLIB's query."""
    dense, _ = saved
    index = HNSWIndex.load(dense)
    X = np.random.default_rng(4).standard_normal((3, D))
    X[:, ::3] = 0
    for Xq, engine in ((X, "nmslib"), (sp.csr_matrix(X), "svbop")):
        want = index.query(Xq, 4, ef=K, engine=engine)
        for ef in (K + 1, 10**9, 2**31, 2**63 - 1, np.int64(2**40)):
            got = index.query(Xq, 4, ef=ef, engine=engine)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
    for k in (0, K + 1, 2**31, 1.5, True, None):
        with pytest.raises(ValueError, match=f"k must be an integer in 1..{K}"):
            index.query(X, k)
    for ef in (3, 0, -1, 4.0, True, "10"):
        with pytest.raises(ValueError, match="ef must be an integer >= k = 4"):
            index.query(X, 4, ef=ef)


# ------------------------------------------------------------ class 2: feature ids past the width
#: Every public entry that takes feature rows, given a CSR row with a column index ``bad``.
OUT_OF_RANGE = """
    import numpy as np, scipy.sparse as sp
    from svbop import predict_sets_full, predict_sets_full_naive, predict_sets_hf, predict_sets_hsg
    from svbop.full import linear_scores
    from svbop.hf import HFProvider
    from svbop.hsg import HSGProvider, exact_scores, index_recall
    from svbop.index import HNSWIndex
    from svbop.linear import LinearModel
    from svbop.trees import balanced_kmeans_tree, train_tree
    K, D = 40, 9
    rng = np.random.default_rng(0)
    dense = LinearModel(rng.standard_normal((K, D)), rng.standard_normal(K), np.arange(K))
    clipped = dense.clip(0.5)
    y = np.concatenate([np.arange(K), rng.integers(0, K, 160)])
    Xtrain = sp.csr_matrix(np.abs(rng.standard_normal((200, D))))
    tree = train_tree(Xtrain, y, balanced_kmeans_tree(Xtrain, y, K, max_leaves=4), C=1.0, eps=0.1, progress=False)
    index = HNSWIndex.from_model(dense, M=4, ef_construction=20)
    sparse_index = HNSWIndex.from_model(clipped, M=4, ef_construction=20)
    entries = {
        "full sparse W": lambda X: predict_sets_full(clipped, X, "fbeta:beta=1"),
        "full dense W": lambda X: predict_sets_full(dense, X, "fbeta:beta=1"),
        "full naive": lambda X: predict_sets_full_naive(clipped, X, "fbeta:beta=1"),
        "linear_scores": lambda X: linear_scores(clipped, X),
        "decision_function": lambda X: clipped.decision_function(X),
        "predict_proba": lambda X: dense.predict_proba(X),
        "hsg": lambda X: predict_sets_hsg(dense, index, X, "fbeta:beta=1", k=3),
        "hsg provider": lambda X: HSGProvider(dense, index, k=3).init_prediction(one),
        "exact_scores": lambda X: exact_scores(dense, X, np.zeros((X.shape[0], 2), dtype=int)),
        "index_recall": lambda X: index_recall(dense, index, X, 3),
        "query svbop": lambda X: index.query(X, 3, engine="svbop"),
        "query nmslib": lambda X: index.query(X, 3, engine="nmslib"),
        "query sparse index": lambda X: sparse_index.query(X, 3),
        "hf": lambda X: predict_sets_hf(tree, X, "fbeta:beta=1"),
        "hf provider": lambda X: HFProvider(tree).init_prediction(one),
        "tree predict_proba": lambda X: tree.predict_proba(X),
    }
    bad = int(sys.argv[1])
    X = sp.csr_matrix((np.array([1.0, 2.0, 0.5]), np.array([1, bad, 0]), np.array([0, 2, 3])), shape=(2, D))
    # one row for the providers (slicing X would drop the bad index)
    one = sp.csr_matrix((np.array([1.0, 2.0]), np.array([1, bad]), np.array([0, 2])), shape=(1, D))
    for name, call in entries.items():
        try:
            call(X)
            print(name, "answered", flush=True)
        except ValueError as exc:
            print(name, f"ValueError: {exc}", flush=True)
"""


@pytest.mark.parametrize("bad", [9, 10**8, -1])
def test_feature_ids_past_the_width_are_refused_by_every_entry(bad):
    """A CSR row whose column index is just past D (before: the next feature's weights, silently),
    far past it (before: SIGSEGV) or negative: one ValueError naming X, from every entry."""
    out = in_child(OUT_OF_RANGE, str(bad))
    assert len(out) == 16, out
    for line in out:
        name, _, result = line.partition(" ValueError: ")
        assert result.lower().startswith("x: column index") and f"{bad}" in result and "outside 0..8" in result, line


def test_unsorted_rows_with_duplicates_are_still_accepted():
    """The check is on the range only: an unsorted CSR with duplicate entries (summed, as scipy
    does) gives the sets of its canonical form."""
    from svbop import predict_sets_full

    rng = np.random.default_rng(5)
    model = LinearModel(rng.standard_normal((30, 7)), rng.standard_normal(30), np.arange(30)).clip(0.3)
    X = sp.csr_matrix((np.array([0.5, 1.0, 0.5, 2.0]), np.array([4, 1, 4, 0]), np.array([0, 3, 4])), shape=(2, 7))
    assert not X.has_canonical_format
    got = predict_sets_full(model, X, "fbeta:beta=1")
    canonical = X.copy()
    canonical.sum_duplicates()
    want = predict_sets_full(model, canonical, "fbeta:beta=1")
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.indptr, want.indptr)


def test_other_sparse_formats_and_broken_indptr_are_checked():
    from svbop._checks import check_sparse_structure

    good = sp.random(4, 6, density=0.5, random_state=0, format="csr")
    for fmt in ("csr", "csc", "coo", "bsr", "lil", "dok"):
        check_sparse_structure(good.asformat(fmt), "X")
    csc = good.tocsc()
    csc.indices[0] = 40
    with pytest.raises(ValueError, match="X: row index 40 at position 0 is outside 0..3"):
        check_sparse_structure(csc, "X")
    coo = good.tocoo()
    coo.col[1] = 6
    with pytest.raises(ValueError, match="X: column index 6"):
        check_sparse_structure(coo, "X")
    broken = good.copy()
    broken.indptr[2] = broken.indptr[3] + 1
    with pytest.raises(ValueError, match="X: indptr decreases"):
        check_sparse_structure(broken, "X")
    broken = good.copy()
    broken.indptr[-1] = broken.nnz + 5
    with pytest.raises(ValueError, match="x: indptr ends at"):
        check_sparse_structure(broken, "x")


def test_hsg_with_an_ef_beyond_k_is_the_search_at_ef_k():
    """SVBOP-HSG passes ``max(ef, k)`` to the index: ``ef = 10**12`` (the config's old unbounded
    ``hsg.ef``) is the search at ``ef = K`` (before: MemoryError in svbop's search)."""
    from svbop import predict_sets_hsg
    from svbop.hsg import HSGProvider

    rng = np.random.default_rng(6)
    model = LinearModel(rng.standard_normal((K, D)), rng.standard_normal(K), np.arange(K))
    index = HNSWIndex.from_model(model, M=4, ef_construction=20)
    X = sp.random(5, D, density=0.5, random_state=6, format="csr")
    want = predict_sets_hsg(model, index, X, "fbeta:beta=1", k=3, ef=K)
    got = predict_sets_hsg(model, index, X, "fbeta:beta=1", k=3, ef=10**12)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.indptr, want.indptr)
    provider = HSGProvider(model, index, k=3, ef=10**12)
    provider.init_prediction(X[0])
    assert provider.get_next_class()[0] == want.indices[0]


def test_hsg_refuses_an_index_whose_ids_are_not_the_models_classes():
    """An index of the right size whose ids are not 0..K-1 (built with other ``classes``, or a
    crafted data file with valid but foreign ids): SVBOP-HSG refuses the ids its first query returns
    instead of indexing the weights with them (before: read outside the weights when rescoring)."""
    out = in_child("""
        import numpy as np, scipy.sparse as sp
        from svbop import predict_sets_hsg
        from svbop.hsg import HSGProvider
        from svbop.index import HNSWIndex
        from svbop.linear import LinearModel
        rng = np.random.default_rng(7)
        model = LinearModel(rng.standard_normal((50, 6)), rng.standard_normal(50), np.arange(50))
        index = HNSWIndex.build(model.W, model.b, M=4, ef_construction=20, classes=np.arange(50) + 10**6)
        X = sp.random(3, 6, density=0.6, random_state=7, format="csr")
        for call in (lambda: predict_sets_hsg(model, index, X, "fbeta:beta=1", k=4, rescore=True),
                     lambda: HSGProvider(model, index, k=4, rescore=True).init_prediction(X[0])):
            try:
                call()
                print("answered")
            except ValueError as exc:
                print(f"ValueError: {exc}")
    """)
    assert len(out) == 2
    for line in out:
        assert line.startswith("ValueError: index returned class id 10000") and "outside the model's 0..49" in line, line
