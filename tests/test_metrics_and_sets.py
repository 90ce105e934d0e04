import numpy as np
import pytest

import svbop
from svbop.io import load_scores, load_sets, save_sets


def test_per_sample_utility_recall_and_size():
    sets = [[0, 1], [2], [0, 1, 2], []]
    y = [1, 0, 2, 0]
    np.testing.assert_allclose(svbop.set_utility(sets, y, "fbeta:beta=1"), [2 / 3, 0, 0.5, 0])
    np.testing.assert_array_equal(svbop.recall(sets, y), [True, False, True, False])
    np.testing.assert_array_equal(svbop.set_sizes(sets), [2, 1, 3, 0])
    np.testing.assert_allclose(svbop.set_utility(sets, y, "precision"), [0.5, 0, 1 / 3, 0])


def test_mean_scores_in_percent_with_paper_labels():
    P = np.array([[0.6, 0.4, 0.0], [0.2, 0.3, 0.5]])
    y = np.array([1, 2])
    sets = svbop.predict_sets(P, "fbeta:beta=1")
    scores = svbop.mean_scores(sets, y, ["fbeta:beta=1", "credal:delta=2.2,gamma=1.2"], P=P)
    # F1 adds the next class while p_{s+1} >= C_s / (s + 1): 0.4 >= 0.3 and 0.3 >= 0.25
    assert sets.to_list() == [[0, 1], [2, 1]]
    assert scores["recall_pct"] == 100.0
    assert scores["mean_size"] == 2.0
    assert scores["top1_pct"] == 50.0
    assert scores["fbeta_1_pct"] == pytest.approx(100 * 2 / 3)
    assert scores["credal_2.2_1.2_pct"] == pytest.approx(100 * 0.8)
    assert svbop.top1_accuracy(P, y) == 0.5
    # without P, top-1 is each set's first class; an empty set counts as a miss
    no_p = svbop.mean_scores(svbop.SetPredictions.from_sets([[1, 0], []], 3), y)
    assert no_p["top1_pct"] == 50.0 and no_p["mean_size"] == 1.0
    assert svbop.mean_scores(svbop.SetPredictions.from_sets([[], []], 3), y)["top1_pct"] == 0.0


def test_set_predictions_container():
    sets = svbop.SetPredictions.from_sets([[3, 1], [], [2]], n_classes=4, expected_utility=[0.1, 0.0, 0.3])
    assert len(sets) == 3 and sets[0].tolist() == [3, 1] and sets[-1].tolist() == [2]
    assert sets.sizes.tolist() == [2, 0, 1]
    assert sets.contains([1, 0, 2]).tolist() == [True, False, True]
    assert sets.take([2, 0]).to_list() == [[2], [3, 1]]
    assert sets[1:].to_list() == [[], [2]]
    assert sets.to_mask().sum() == 3 and sets.to_mask()[0, 3]
    with pytest.raises(IndexError):
        sets[3]
    with pytest.raises(ValueError, match="class indices must be in 0..3"):
        svbop.SetPredictions.from_sets([[4]], n_classes=4)
    with pytest.raises(ValueError, match="indptr"):
        svbop.SetPredictions(np.array([0]), np.array([0, 2]), 3)


def test_save_and_load_round_trip(tmp_path):
    P = np.random.default_rng(0).dirichlet(np.ones(30), size=50)
    sets = svbop.predict_sets(P, "credal:delta=2.2,gamma=1.2")
    save_sets(tmp_path / "s.npz", sets)
    back = load_sets(tmp_path / "s.npz")
    assert back == sets
    np.testing.assert_array_equal(back.expected_utility, sets.expected_utility)
    save_sets(tmp_path / "s.csv", sets)
    assert load_sets(tmp_path / "s.csv", n_classes=30) == sets
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary file


def test_load_scores_formats_and_errors(tmp_path):
    P = np.array([[0.2, 0.8], [0.5, 0.5]])
    np.save(tmp_path / "p.npy", P)
    np.savez(tmp_path / "p.npz", probs=P, other=np.zeros(2))
    np.savetxt(tmp_path / "p.csv", P, delimiter=",")
    for name in ("p.npy", "p.npz", "p.csv"):
        np.testing.assert_allclose(load_scores(tmp_path / name), P)
    (tmp_path / "bad.csv").write_text("0.1,0.9\n0.2,abc\n")
    with pytest.raises(ValueError, match="bad.csv: not a numeric matrix"):
        load_scores(tmp_path / "bad.csv")
    np.savez(tmp_path / "two.npz", a=P, b=P)
    with pytest.raises(ValueError, match="say which one with --key"):
        load_scores(tmp_path / "two.npz")
    with pytest.raises(ValueError, match="no such file"):
        load_scores(tmp_path / "missing.npy")
    (tmp_path / "sets.txt").write_text("0 1\nx\n")
    with pytest.raises(ValueError, match="sets.txt, line 2"):
        load_sets(tmp_path / "sets.txt")


def test_set_agreement_compares_sets_regardless_of_order():
    from svbop.metrics import set_agreement

    a = svbop.SetPredictions.from_sets([[0, 1], [2], [1, 2, 3], [], [3]], 4)
    b = svbop.SetPredictions.from_sets([[1, 0], [2], [1, 2], [], [0]], 4)
    assert set_agreement(a, b) == pytest.approx(3 / 5)  # rows 0 (order differs), 1 and 3 (both empty)
    assert set_agreement(a, a) == 1.0 and set_agreement(b, a) == set_agreement(a, b)
    assert set_agreement([[0, 2], [1]], [[2, 0], [1, 0]]) == 0.5  # plain lists
    empty = svbop.SetPredictions.from_sets([], 4)
    assert set_agreement(empty, empty) == 1.0
    # equal sizes but different members in a later row must not hide behind an earlier match
    c = svbop.SetPredictions.from_sets([[0, 1], [2, 3]], 4)
    d = svbop.SetPredictions.from_sets([[1, 0], [3, 1]], 4)
    assert set_agreement(c, d) == 0.5
    with pytest.raises(ValueError, match="2 and 5 rows"):
        set_agreement(c, a)
    with pytest.raises(ValueError, match="4 and 5 classes"):
        set_agreement(a, svbop.SetPredictions.from_sets([[0]] * 5, 5))


def test_evaluate_methods_with_svbop_timing_columns():
    from svbop.evaluation import METHODS, evaluate_methods, timing_columns

    assert METHODS[:5] == ("svbop_full", "svbop_full_naive", "svbop_hsg", "svbop_hf_predefined", "svbop_hf_kmeans")
    y = np.array([0, 1, 2, 1])
    full = svbop.SetPredictions.from_sets([[0], [1, 2], [2], [0]], 3)
    hsg = svbop.SetPredictions.from_sets([[0], [2, 1], [2, 0], [0]], 3)
    sets = {("svbop_full", "fbeta_1"): full, ("svbop_hsg", "fbeta_1"): hsg, ("top_s", "1"): full}
    timings = {("svbop_full", "fbeta_1"): {"ms_per_sample": 0.5}, ("svbop_hsg", "fbeta_1"): {"ms_per_sample": 0.1}}
    extra = timing_columns(sets, timings)
    assert extra[("svbop_full", "fbeta_1")] == {"t_test_ms": 0.5}
    assert extra[("svbop_hsg", "fbeta_1")] == {
        "t_test_ms": 0.1, "agreement_with_full_pct": 75.0, "speedup_vs_full": pytest.approx(5.0)
    }
    rows = evaluate_methods(sets, y, ["fbeta:beta=1"], dataset="d", extra=extra)
    assert [(r["method"], r.get("t_test_ms")) for r in rows] == [("svbop_full", 0.5), ("svbop_hsg", 0.1), ("top_s", None)]
    assert rows[1]["recall_pct"] == 75.0 and rows[1]["agreement_with_full_pct"] == 75.0
    # with the paper's SVBOP-Full timed too, every other method also gets its speed-up over that one
    sets[("svbop_full_naive", "fbeta_1")] = full
    timings[("svbop_full_naive", "fbeta_1")] = {"ms_per_sample": 2.0}
    extra = timing_columns(sets, timings)
    assert extra[("svbop_full_naive", "fbeta_1")] == {
        "t_test_ms": 2.0, "agreement_with_full_pct": 100.0, "speedup_vs_full": pytest.approx(0.25)}
    assert extra[("svbop_hsg", "fbeta_1")]["speedup_vs_full_naive"] == pytest.approx(20.0)
    assert "speedup_vs_full_naive" not in extra[("svbop_full", "fbeta_1")]
    with pytest.raises(ValueError, match="no svbop_full sets and timing for 'fbeta_5'"):
        timing_columns({**sets, ("svbop_hsg", "fbeta_5"): hsg}, {("svbop_hsg", "fbeta_5"): {"ms_per_sample": 1.0}})
    with pytest.raises(ValueError, match="unknown method 'svbop_fast'"):
        evaluate_methods({("svbop_fast", "fbeta_1"): full}, y, ["fbeta:beta=1"], dataset="d")


def test_scores_file_keeps_float32_and_is_stored_uncompressed(tmp_path):
    import zipfile

    from svbop.io import SCORES_DTYPE, save_arrays

    P = np.random.default_rng(1).dirichlet(np.ones(40), size=30).astype(SCORES_DTYPE)
    y = np.arange(30) % 40
    save_arrays(tmp_path / "scores.npz", compress=False, P_test=P, y_test=y)
    with zipfile.ZipFile(tmp_path / "scores.npz") as zf:
        assert {info.compress_type for info in zf.infolist()} == {zipfile.ZIP_STORED}
    with np.load(tmp_path / "scores.npz") as data:
        assert data["P_test"].dtype == np.float32 and SCORES_DTYPE == np.float32
        np.testing.assert_array_equal(data["P_test"], P)
        np.testing.assert_array_equal(data["y_test"], y)
    save_arrays(tmp_path / "small.npz", y=y)  # the default stays compressed
    with zipfile.ZipFile(tmp_path / "small.npz") as zf:
        assert {info.compress_type for info in zf.infolist()} == {zipfile.ZIP_DEFLATED}


def test_stored_members_are_read_without_copies_and_equal_numpys_reading(tmp_path, monkeypatch):
    """NpzReader reads uncompressed members itself (mapped copy-on-write from a size on, else one
    readinto): the arrays equal np.load's, are plain writable ndarrays, and a write never reaches
    the file; compressed members and Fortran-ordered ones go through numpy."""
    import svbop._npz as npz
    from svbop.io import NpzReader, load_score_arrays, save_arrays

    monkeypatch.setattr(npz, "_MAP_BYTES", 1000)  # map the 30 x 40 float32 matrix (4,800 bytes)
    rng = np.random.default_rng(3)
    P = rng.dirichlet(np.ones(40), size=30).astype(np.float32)
    arrays = {"P_test": P, "y_test": np.arange(30), "F": np.asfortranarray(rng.random((5, 4))),
              "big": np.arange(3, dtype=">i4"), "empty": np.zeros((0, 3)), "name": np.array("x")}
    save_arrays(tmp_path / "s.npz", compress=False, **arrays)
    save_arrays(tmp_path / "z.npz", **arrays)
    for path in (tmp_path / "s.npz", tmp_path / "z.npz"):
        with NpzReader(path) as data, np.load(path) as ref:
            for key in arrays:
                got = data[key]
                assert type(got) is np.ndarray and got.dtype == ref[key].dtype and got.shape == ref[key].shape
                np.testing.assert_array_equal(got, ref[key])
            got = data["P_test"]
            if path.name == "s.npz":  # save_arrays aligns the data of its uncompressed members: mapped
                assert got.flags.aligned and got.ctypes.data % 64 == 0 and got.base is not None
            got[0, 0] = 7.0
        np.testing.assert_array_equal(np.load(path)["P_test"], P)
    np.savez(tmp_path / "plain.npz", P_test=P)  # numpy's own layout: data at any offset, copied
    with NpzReader(tmp_path / "plain.npz") as data:
        got = data["P_test"]
        assert got.flags.aligned and got.flags.owndata
        np.testing.assert_array_equal(got, P)
    P_back, y_back = load_score_arrays(tmp_path / "s.npz", "P_test", "y_test")
    np.testing.assert_array_equal(P_back, P)
    bad = P.copy()
    bad[4, 2] = np.nan
    save_arrays(tmp_path / "bad.npz", compress=False, P_test=bad)
    with pytest.raises(ValueError, match=r"bad\.npz: key 'P_test': value nan at row 4, column 2 is not finite"):
        load_score_arrays(tmp_path / "bad.npz", "P_test")
    bad[4, 2] = 1.5
    save_arrays(tmp_path / "bad.npz", compress=False, P_test=bad)
    with pytest.raises(ValueError, match=r"value 1\.5 at row 4, column 2 is outside \[0, 1\]"):
        load_score_arrays(tmp_path / "bad.npz", "P_test")


def test_contains_and_repeated_class_need_no_memory_the_size_of_the_sets():
    import tracemalloc

    K, n = 3000, 500
    rng = np.random.default_rng(2)
    indices = np.concatenate([rng.permutation(K) for _ in range(n)])  # every set holds every class
    sets = svbop.SetPredictions(indices, np.arange(n + 1) * K, K)
    y = rng.integers(0, K, n)
    sets.contains(y), sets.repeated_class()  # compile (or load) the kernels first
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        hit, repeated = sets.contains(y), sets.repeated_class()
        extra = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert hit.all() and repeated is None
    assert extra < indices.nbytes / 20  # the old ways (np.repeat, a lexsort of all entries) took several times it
    # the answers: labels outside a set, and the first set repeating a class with its smallest such class
    small = svbop.SetPredictions.from_sets([[2, 0], [1], [], [3, 1, 3, 1], [0, 0]], 4)
    assert small.contains([0, 2, 1, 1, 0]).tolist() == [True, False, False, True, True]
    assert small.contains(np.array([0.0, 1.0, 1.0, 1.5, 0.0])).tolist() == [True, True, False, False, True]
    assert small.repeated_class() == (3, 1)
    assert svbop.SetPredictions.from_sets([[0, 1], [2]], 3).repeated_class() is None


def test_set_files_read_each_method_when_used(tmp_path):
    from svbop.evaluation import evaluate_methods
    from svbop.io import SetFiles

    y = np.array([0, 1, 2])
    sets = {("top_s", "1"): svbop.SetPredictions.from_sets([[0], [2], [2]], 3),
            ("icp", "0.10"): svbop.SetPredictions.from_sets([[0, 1], [1, 2], [0]], 3)}
    paths = {}
    for (method, param), s in sets.items():
        paths[method, param] = tmp_path / f"{method}_{param}.npz"
        save_sets(paths[method, param], s)
    files = SetFiles({**paths, ("icp", "0.01"): tmp_path / "missing.npz"})
    assert ("icp", "0.01") in files and len(files) == 3  # membership reads no file
    with pytest.raises(ValueError, match="missing.npz: no such file"):
        files["icp", "0.01"]
    assert files["top_s", "1"] == sets["top_s", "1"]
    assert evaluate_methods(SetFiles(paths), y, ["fbeta:beta=1"], dataset="d") == evaluate_methods(
        sets, y, ["fbeta:beta=1"], dataset="d")


@pytest.mark.parametrize("K, stored", [(30, np.uint8), (12166, np.uint16), (70000, np.uint32)])
def test_sets_files_store_classes_in_the_smallest_type_and_load_as_int64(tmp_path, K, stored):
    rng = np.random.default_rng(K)
    sets = svbop.SetPredictions.from_sets([rng.permutation(K)[: rng.integers(0, 50)] for _ in range(20)] + [[K - 1]], K)
    save_sets(tmp_path / "s.npz", sets)
    with np.load(tmp_path / "s.npz") as data:
        assert data["indices"].dtype == stored
    back = load_sets(tmp_path / "s.npz")
    assert back == sets and back.indices.dtype == np.int64


def test_timing_columns_carry_the_repeats_spread_and_load_of_each_record():
    from svbop.evaluation import timing_columns

    full = svbop.SetPredictions.from_sets([[0], [1]], 2)
    sets = {("svbop_full", "fbeta_1"): full, ("svbop_hsg", "fbeta_1"): full}
    timings = {("svbop_full", "fbeta_1"): {"ms_per_sample": 0.5, "repeats": 3, "ms_per_sample_min": 0.4,
                                           "ms_per_sample_max": 0.9, "load_start": [1.5, 1, 1], "load_end": [2.5, 1, 1],
                                           "cpu_count": 2},
               # read_timing of a file of one measurement: no load known
               ("svbop_hsg", "fbeta_1"): {"ms_per_sample": 0.1, "repeats": 1, "ms_per_sample_min": 0.1,
                                          "ms_per_sample_max": 0.1, "load_start": None, "load_end": None,
                                          "cpu_count": None}}
    extra = timing_columns(sets, timings)
    assert extra[("svbop_full", "fbeta_1")] == {"t_test_ms": 0.5, "t_test_ms_min": 0.4, "t_test_ms_max": 0.9,
                                                "t_test_repeats": 3.0, "load_start": 1.5, "load_end": 2.5,
                                                "cpu_count": 2.0}
    hsg = extra[("svbop_hsg", "fbeta_1")]
    assert hsg["t_test_repeats"] == 1.0 and hsg["t_test_ms_min"] == hsg["t_test_ms_max"] == 0.1
    assert np.isnan(hsg["load_start"]) and np.isnan(hsg["cpu_count"])
