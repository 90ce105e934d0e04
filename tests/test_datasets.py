"""svbop.datasets: containers and storage, digits, synthetic hierarchical text, splits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from svbop.datasets import (
    Dataset,
    Hierarchy,
    drop_small_classes,
    load_digits,
    load_split,
    make_hierarchical_text,
    make_split,
    save_split,
)

TINY = dict(n_classes=24, branching=(2, 3, 4), n_samples=600, n_features=2000)
# digests of make_hierarchical_text(**TINY, seed=0) as generated before random trees existed
TINY_NNZ, TINY_SUM, TINY_Y8 = 36459, 72082, [23, 9, 14, 6, 8, 5, 21, 18]


@pytest.fixture(scope="module")
def tiny():
    return make_hierarchical_text(**TINY, seed=0)


def small_tree() -> Hierarchy:
    # classes 0..3; internal 4 (parent of 0, 1), 5 (parent of 2, 3), root 6
    return Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), 4, ["a", "b", "c", "d", "ab", "cd", "root"])


# ------------------------------------------------------------------------------ Hierarchy
def test_hierarchy_structure():
    h = small_tree()
    assert (h.n_nodes, h.root) == (7, 6)
    assert h.depth().tolist() == [2, 2, 2, 2, 1, 1, 0]
    assert h.path(3).tolist() == [6, 5, 3]
    assert h.path(6).tolist() == [6]
    assert [c.tolist() for c in h.children()] == [[], [], [], [], [0, 1], [2, 3], [4, 5]]
    assert h.ancestors_at_depth(np.arange(4), 1).tolist() == [4, 4, 5, 5]


@pytest.mark.parametrize(
    "parent, n_classes, match",
    [
        (np.array([3, 3, 4, 4, 3]), 2, "cycle|reach the root|root"),  # 3 <-> 4 cycle, no root
        (np.array([2, 2, 5, 4, 3, -1]), 2, "node 3 does not reach the root 5.*cycle"),  # cycle 3 -> 4 -> 3 beside a root
        (np.array([2, 0, -1]), 2, "class 0"),  # a class with a child
        (np.array([2, 2, -1, -1]), 2, "exactly one root"),  # two roots
        (np.array([2, 2, -1, 2]), 2, "internal node 3 has no children"),
        (np.array([2, 7, -1]), 2, "node 1 has parent 7"),
    ],
)
def test_hierarchy_validation_names_the_problem(parent, n_classes, match):
    with pytest.raises(ValueError, match=match):
        Hierarchy(parent, n_classes)


def test_hierarchy_node_names_length_checked():
    with pytest.raises(ValueError, match="node_names"):
        Hierarchy(np.array([2, 2, -1]), 2, ["a", "b"])


# ------------------------------------------------------------------------------ Dataset
def _assert_same(a: Dataset, b: Dataset):
    assert (a.name, a.description, a.synthetic, a.class_names) == (b.name, b.description, b.synthetic, b.class_names)
    assert b.y.dtype == np.int64 and np.array_equal(a.y, b.y)
    if sp.issparse(a.X):
        assert sp.issparse(b.X) and b.X.dtype == a.X.dtype and b.X.shape == a.X.shape
        assert np.array_equal(a.X.indptr, b.X.indptr) and np.array_equal(a.X.indices, b.X.indices)
        assert np.array_equal(a.X.data, b.X.data)
    else:
        assert b.X.dtype == a.X.dtype and np.array_equal(a.X, b.X)
    assert (a.hierarchy is None) == (b.hierarchy is None)
    if a.hierarchy is not None:
        assert np.array_equal(a.hierarchy.parent, b.hierarchy.parent)
        assert a.hierarchy.n_classes == b.hierarchy.n_classes
        assert a.hierarchy.node_names == b.hierarchy.node_names


def test_dense_round_trip_is_exact(tmp_path, rng):
    X = rng.random((5, 2, 3, 3)).astype(np.float32)
    ds = Dataset("imgs", X, np.array([0, 3, 1, 2, 3]), list("abcd"), description="ünïcode ok", synthetic=False)
    path = ds.save(tmp_path / "sub" / "imgs.npz")
    _assert_same(ds, Dataset.load(path))
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["imgs.npz"]  # no temporary file left


def test_dense_floats_are_stored_uncompressed_and_other_matrices_compressed(tmp_path, rng, tiny):
    """zlib costs minutes per GB of float scores (a model's outputs) and hardly shrinks them: a dense
    float X is stored as it is; sparse matrices and integer pixels stay compressed."""
    import zipfile

    ds = Dataset("scores", rng.normal(size=(6, 4)), np.array([0, 1, 2, 3, 0, 1]), list("abcd"))
    path = ds.save(tmp_path / "scores.npz")
    _assert_same(ds, Dataset.load(path))
    with zipfile.ZipFile(path) as zf:
        assert {info.compress_type for info in zf.infolist()} == {zipfile.ZIP_STORED}
    pixels = Dataset("px", rng.integers(0, 255, (4, 3, 3), dtype=np.uint8), np.array([0, 1, 0, 1]), list("ab"))
    for kept in (pixels, tiny):
        with zipfile.ZipFile(kept.save(tmp_path / f"{kept.name}.npz")) as zf:
            assert {info.compress_type for info in zf.infolist()} == {zipfile.ZIP_DEFLATED}


def test_sparse_round_trip_with_hierarchy_is_exact(tmp_path, tiny):
    path = tiny.save(tmp_path / "tiny.npz")
    back = Dataset.load(path)
    _assert_same(tiny, back)
    # a hierarchy without node names, and a file name without the .npz suffix
    ds = Dataset("t", sp.random(6, 9, density=0.3, format="csr", random_state=1), np.array([0, 1, 2, 3, 0, 1]),
                 list("wxyz"), hierarchy=Hierarchy(small_tree().parent, 4))
    path = ds.save(tmp_path / "noext")
    assert path.exists()
    _assert_same(ds, Dataset.load(path))


def test_load_names_the_missing_key(tmp_path, tiny):
    path = tiny.save(tmp_path / "full.npz")
    with np.load(path) as data:
        kept = {k: data[k] for k in data.files if k != "class_names"}
    np.savez(tmp_path / "broken.npz", **kept)
    with pytest.raises(ValueError, match=r"broken\.npz.*'class_names'"):
        Dataset.load(tmp_path / "broken.npz")
    with pytest.raises(ValueError, match="no such file"):
        Dataset.load(tmp_path / "absent.npz")


def test_dataset_validation():
    X = np.zeros((3, 2))
    with pytest.raises(ValueError, match="y: has 2 labels"):
        Dataset("d", X, np.array([0, 1]), ["a", "b"])
    with pytest.raises(ValueError, match="label 2 out of range"):
        Dataset("d", X, np.array([0, 1, 2]), ["a", "b"])
    with pytest.raises(ValueError, match="hierarchy: has 4 classes"):
        Dataset("d", X, np.array([0, 1, 1]), ["a", "b"], hierarchy=small_tree())
    ds = Dataset("d", sp.coo_matrix(X), np.array([0, 1, 1]), ["a", "b"])
    assert isinstance(ds.X, sp.csr_matrix) and (ds.n_samples, ds.n_classes) == (3, 2)


# ------------------------------------------------------------------------------ digits
def test_digits():
    ds = load_digits()
    assert ds.X.shape == (1797, 8, 8) and ds.X.dtype == np.float32
    assert ds.X.min() == 0.0 and ds.X.max() == 1.0
    assert ds.y.dtype == np.int64 and set(np.unique(ds.y).tolist()) == set(range(10))
    assert ds.class_names == [str(d) for d in range(10)]
    assert ds.name == "digits" and not ds.synthetic and "UCI" in ds.description


# ------------------------------------------------------------------------------ synthetic
def test_synthetic_shape_balance_and_determinism(tiny):
    ds = tiny
    assert ds.synthetic and "synthetic" in ds.description.lower()
    assert isinstance(ds.X, sp.csr_matrix) and ds.X.shape == (600, 2000)
    assert ds.y.dtype == np.int64 and ds.n_classes == 24
    assert np.bincount(ds.y, minlength=24).tolist() == [25] * 24
    assert np.all(ds.X.data > 0) and np.all(ds.X.data == np.round(ds.X.data))
    doc_len = np.asarray(ds.X.sum(axis=1)).ravel()
    assert 100 < doc_len.mean() < 140
    again = make_hierarchical_text(**TINY, seed=0)
    assert np.array_equal(again.y, ds.y) and (again.X != ds.X).nnz == 0
    other = make_hierarchical_text(**TINY, seed=1)
    assert not np.array_equal(other.y, ds.y) and (other.X != ds.X).nnz > 0


def test_synthetic_remainder_spread():
    ds = make_hierarchical_text(6, branching=(2, 3), n_samples=40, n_features=300, seed=3)
    counts = np.bincount(ds.y, minlength=6)
    assert counts.sum() == 40 and set(counts.tolist()) == {6, 7}


def test_synthetic_hierarchy_matches_names(tiny):
    h, b = tiny.hierarchy, TINY["branching"]
    assert h.n_classes == math.prod(b) == 24
    assert h.n_nodes == 24 + 1 + 2 + 6
    depth = h.depth()
    assert np.all(depth[:24] == len(b)) and np.all(depth[24:] < len(b))
    assert [len(c) for c in h.children()[24:]] == [2, 3, 3, 4, 4, 4, 4, 4, 4]
    for c, name in enumerate(tiny.class_names):
        digits = name.split("/")[1:]
        assert name == "c/" + "/".join(map(str, np.unravel_index(c, b)))
        path_names = [h.node_names[v] for v in h.path(c)]
        assert path_names == ["n"] + ["n/" + "/".join(digits[:k]) for k in range(1, len(b))] + [name]


def test_synthetic_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n_classes.*prod"):
        make_hierarchical_text(25, branching=(2, 3, 4), n_samples=50, n_features=100)
    with pytest.raises(ValueError, match="mixture"):
        make_hierarchical_text(6, branching=(2, 3), n_samples=50, n_features=100, mixture=(1, 1))
    with pytest.raises(ValueError, match="n_features"):
        make_hierarchical_text(6, branching=(2, 3), n_samples=50, n_features=0)


def test_random_tree_has_the_asked_leaf_depths_and_even_branching():
    from svbop.datasets import random_tree

    h = random_tree(3000, [0, 0.1, 0.3, 0.6], rng=4)
    depth = h.depth()
    assert h.n_classes == 3000 and set(depth[:3000].tolist()) <= {2, 3, 4}
    share = np.bincount(depth[:3000], minlength=5)[2:] / 3000
    np.testing.assert_allclose(share, [0.1, 0.3, 0.6], atol=0.03)
    kids = np.diff(h.children_csr()[0])[3000:]
    assert kids.min() >= 1 and kids.mean() > 5  # not a chain of single children
    for c in (0, 1234, 2999):  # names spell the path of child positions
        path = h.path(c)
        assert h.node_names[c].startswith("c/") and h.node_names[path[-2]] == "n" + h.node_names[c][1:].rsplit("/", 1)[0]
    again = random_tree(3000, [0, 0.1, 0.3, 0.6], rng=4)
    assert np.array_equal(again.parent, h.parent)
    with pytest.raises(ValueError, match="leaf_depths"):
        random_tree(10, [0, -1])


def test_synthetic_rehearsal_shape_long_tail_and_test_part():
    ds = make_hierarchical_text(
        300, branching=None, leaf_depths=[0, 0.2, 0.8], n_samples=3000, n_test=1000, n_features=5000,
        class_size_exponent=0.75, doc_length=60, doc_length_sigma=0.65, seed=1,
    )
    assert ds.X.shape == (3000, 5000) and ds.n_classes == 300
    assert ds.part.tolist() == ["train"] * 2000 + ["test"] * 1000
    train = np.bincount(ds.y[:2000], minlength=300)
    assert train.min() >= 1  # every class can be learned
    assert train.max() > 10 * np.median(train)  # long-tailed, not balanced
    lengths = np.asarray(ds.X.sum(axis=1)).ravel()
    assert 50 < np.median(lengths) < 70 and 0.5 < np.log(lengths).std() < 0.8  # log-normal around 60
    assert set(np.unique(ds.hierarchy.depth()[ds.y]).tolist()) == {2, 3}
    with pytest.raises(ValueError, match="n_test"):
        make_hierarchical_text(300, branching=None, leaf_depths=[1], n_samples=400, n_test=200, n_features=50,
                               class_size_exponent=1.0)


def test_synthetic_balanced_tree_unchanged_by_the_rehearsal_options(tiny):
    # the quickstart's data must not move when unrelated options exist: pinned digests
    assert tiny.X.nnz == TINY_NNZ and int(tiny.X.sum()) == TINY_SUM and tiny.y[:8].tolist() == TINY_Y8


def test_linear_model_learns_and_confuses_siblings(tiny):
    TfidfTransformer = pytest.importorskip("sklearn.feature_extraction.text").TfidfTransformer
    LogisticRegression = pytest.importorskip("sklearn.linear_model").LogisticRegression
    split = make_split(tiny.n_samples, {"test": 0.4}, seed=0, y=tiny.y)
    tr, te = split["train"], split["test"]
    tfidf = TfidfTransformer(sublinear_tf=True).fit(tiny.X[tr])
    with threadpool_limits(1):  # BLAS threads make this tiny fit ~30x slower on a busy machine
        clf = LogisticRegression(C=10.0, max_iter=500).fit(tfidf.transform(tiny.X[tr]), tiny.y[tr])
    proba = clf.predict_proba(tfidf.transform(tiny.X[te]))
    pred = clf.classes_[proba.argmax(axis=1)]
    truth = tiny.y[te]
    accuracy = np.mean(pred == truth)
    assert accuracy > 0.4  # chance is 1/24
    assert accuracy < 0.95  # not trivially separable: there is uncertainty to exploit
    wrong = pred != truth
    parent = tiny.hierarchy.parent
    sibling_share = np.mean(parent[pred[wrong]] == parent[truth[wrong]])
    chance = 3 / 23  # another class with the same parent, among the 23 wrong classes
    assert sibling_share > 3 * chance
    # confidence varies from row to row: some rows are sure, others are not
    top = proba.max(axis=1)
    assert np.mean(top < 0.5) > 0.1 and np.mean(top > 0.8) > 0.1


# ------------------------------------------------------------------------------ splits
def _check_partition(split, n):
    assert list(split) == ["train", "validation", "calibration", "test"]
    allidx = np.concatenate(list(split.values()))
    assert np.array_equal(np.sort(allidx), np.arange(n))
    for v in split.values():
        assert v.dtype == np.int64 and np.all(np.diff(v) > 0)


def test_split_sizes_fractions_and_counts():
    s = make_split(1000, {"validation": 0.1, "calibration": 150, "test": 0.25})
    assert [len(s[k]) for k in s] == [500, 100, 150, 250]
    _check_partition(s, 1000)
    s = make_split(7, {"test": 0.5})  # 3.5 rounds to 4
    assert [len(s[k]) for k in s] == [3, 0, 0, 4]
    s = make_split(5, {})
    assert s["train"].tolist() == [0, 1, 2, 3, 4] and s["test"].size == 0


def test_split_deterministic_and_seeded():
    a = make_split(200, {"test": 0.3, "calibration": 0.2}, seed=4)
    b = make_split(200, {"test": 0.3, "calibration": 0.2}, seed=4)
    c = make_split(200, {"test": 0.3, "calibration": 0.2}, seed=5)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["test"], c["test"])


def test_stratified_split_keeps_every_class_in_train(rng):
    sizes = np.r_[[4, 4, 5, 6, 9], rng.integers(20, 200, size=15)]
    y = rng.permutation(np.repeat(np.arange(sizes.size), sizes))
    s = make_split(y.size, {"validation": 0.2, "calibration": 0.2, "test": 0.4}, seed=0, y=y)
    _check_partition(s, y.size)
    assert np.all(np.bincount(y[s["train"]], minlength=sizes.size) >= 1)
    for part, frac in [("train", 0.2), ("validation", 0.2), ("calibration", 0.2), ("test", 0.4)]:
        counts = np.bincount(y[s[part]], minlength=sizes.size)
        assert np.all(np.abs(counts - frac * sizes) <= 2), part
    # labels need not be 0..K-1
    s2 = make_split(y.size, {"test": 0.5}, seed=0, y=y * 10 - 7)
    _check_partition(s2, y.size)


@pytest.mark.parametrize(
    "sizes, match",
    [
        ({"tset": 0.2}, "'tset'"),
        ({"train": 0.5}, "'train'"),
        ({"test": -1}, r"sizes\['test'\]"),
        ({"validation": -0.1}, r"sizes\['validation'\]"),
        ({"calibration": 1.5}, r"sizes\['calibration'\]"),
        ({"test": 0.6, "validation": 0.4}, "test=6.*leave no training rows"),
        ({"calibration": 10}, "calibration=10.*no training rows"),
    ],
)
def test_split_rejects_bad_sizes(sizes, match):
    with pytest.raises(ValueError, match=match):
        make_split(10, sizes)


def test_split_save_load(tmp_path):
    s = make_split(50, {"test": 0.2, "validation": 5}, seed=1)
    path = save_split(tmp_path / "split.npz", s)
    back = load_split(path)
    assert all(np.array_equal(s[k], back[k]) and back[k].dtype == np.int64 for k in s)
    np.savez(tmp_path / "overlap.npz", train=np.array([0, 1]), validation=np.array([1]),
             calibration=np.array([], dtype=np.int64), test=np.array([2]))
    with pytest.raises(ValueError, match=r"overlap\.npz.*row 1"):
        load_split(tmp_path / "overlap.npz")
    np.savez(tmp_path / "nokey.npz", train=np.array([0, 1]), test=np.array([2]))
    with pytest.raises(ValueError, match=r"nokey\.npz.*'validation'"):
        load_split(tmp_path / "nokey.npz")


def test_from_source():
    from svbop.datasets import from_source

    ds = from_source("syn", {"synthetic": {"n_classes": 6, "branching": [2, 3], "n_samples": 30, "n_features": 50}}, seed=2)
    assert ds.name == "syn" and ds.n_classes == 6 and ds.synthetic
    assert np.array_equal(ds.y, make_hierarchical_text(6, branching=(2, 3), n_samples=30, n_features=50, seed=2).y)
    assert from_source("d", {"builtin": "digits"}).name == "d"
    with pytest.raises(ValueError, match="source.builtin.*'mnist'"):
        from_source("x", {"builtin": "mnist"})
    with pytest.raises(ValueError, match="source.synthetic"):
        from_source("x", {"synthetic": {"n_classes": 6, "branching": [2, 3], "bogus": 1}})


# ------------------------------------------------------------------------------ small_classes: drop
def _ragged() -> Dataset:
    """Classes a (1 row), b (6), c (2), d (5) below the tree of small_tree(); ids and parts per row."""
    y = np.array([1, 0, 1, 2, 3, 1, 3, 1, 3, 2, 1, 3, 3, 1])
    X = sp.csr_matrix(np.arange(y.size * 2, dtype=np.float32).reshape(-1, 2))
    return Dataset("ragged", X, y, ["a", "b", "c", "d"], hierarchy=small_tree(), x_kind="sparse",
                   part=np.array(["train"] * 10 + ["test"] * 4), ids=[f"r{i}" for i in range(y.size)])


def test_drop_small_classes_removes_their_rows_renumbers_and_prunes_the_hierarchy(tmp_path, caplog):
    data = _ragged()
    with caplog.at_level("WARNING"):  # train, validation, calibration, test: a class needs 4 rows
        out = drop_small_classes(data, {"validation": 0.1, "calibration": 2, "test": 0.2}, where="datasets.r.split.small_classes")
    assert out.class_names == ["b", "d"] and out.n_samples == 11
    keep = np.isin(data.y, [1, 3])
    assert out.y.tolist() == [{1: 0, 3: 1}[int(c)] for c in data.y[keep]]
    assert out.ids.tolist() == data.ids[keep].tolist() and out.part.tolist() == data.part[keep].tolist()
    assert (out.X.toarray() == data.X.toarray()[keep]).all()
    # leaves b, d under ab, cd under the root; nothing refers to a dropped class
    assert out.hierarchy.n_classes == 2 and out.hierarchy.node_names == ["b", "d", "ab", "cd", "root"]
    assert [out.hierarchy.node_names[n] for n in out.hierarchy.path(1)] == ["root", "cd", "d"]
    assert ("datasets.r.split.small_classes: drop: dropped 2 of 4 classes with fewer rows than the split's 4 parts "
            "(train, validation, calibration, test), e.g. 'a' (1 row), 'c' (2 rows), and their 3 of 14 rows; "
            "2 classes and 11 rows left; hierarchy pruned to 5 of 7 nodes") in caplog.text
    out.save(tmp_path / "d.npz")  # a consistent dataset file: the split and the models read it
    again = Dataset.load(tmp_path / "d.npz")
    assert again.class_names == ["b", "d"] and again.hierarchy.parent.tolist() == out.hierarchy.parent.tolist()
    caplog.clear()
    with caplog.at_level("WARNING"):  # every class left has a row for every part
        split = make_split(again.n_samples, {"validation": 0.1, "calibration": 2, "test": 0.2}, y=again.y,
                           small_classes="drop")
    assert "fewer rows than the split's" not in caplog.text
    assert set(again.y[split["train"]].tolist()) == set(again.y[split["test"]].tolist()) == {0, 1}


def test_drop_small_classes_counts_only_the_parts_the_split_fills(caplog):
    data = _ragged()
    out = drop_small_classes(data, {"test": "source", "validation": 0, "calibration": 0.0})
    assert out.class_names == ["b", "c", "d"]  # train and test: a class needs 2 rows
    assert drop_small_classes(data, {"validation": 0, "calibration": 0, "test": 0}) is data  # train only
    one_big = Dataset("one", np.zeros((8, 1)), [0] * 5 + [1, 2, 3], ["a", "b", "c", "d"])
    with pytest.raises(ValueError, match=r"^split\.small_classes: drop would leave 1 of 4 classes \(the others have "
                                         r"fewer rows than the split's 4 parts, train, validation, calibration, test\)"):
        drop_small_classes(one_big, {"validation": 1, "calibration": 1, "test": 1})


def test_make_split_accepts_drop_and_refuses_other_modes():
    make_split(10, {"test": 0.2}, y=np.repeat([0, 1], 5), small_classes="drop")
    with pytest.raises(ValueError, match=r"small_classes: expected one of \['warn', 'error', 'drop'\], got 'ignore'"):
        make_split(10, {"test": 0.2}, small_classes="ignore")
