"""Outputs larger than memory (issue 49, item 6): passes by blocks of rows hold one block resident,
and give the same results, bit for bit, as the passes over the whole matrix in memory."""

import json
import sys

import numpy as np
import pytest

from svbop import _blocks
from svbop._blocks import gather_rows, release_rows, resident_bytes, row_blocks
from svbop.calibration import calibrate_parts, calibrate_streams
from svbop.io import NpzReader, RowStream, save_arrays

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resident memory is read from /proc (Linux)")


def _logits(n, K, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, K)) * 2.0
    y = rng.integers(0, K, n)
    z[np.arange(n), y] += 3.0 * rng.random(n)
    return (1.7 * z).astype(np.float32), y


def _file_pages() -> int:
    """Bytes of mapped files resident in this process (RssFile): where a mapped matrix's pages count."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("RssFile:"))


def _mapped(tmp_path, name, arr, mode="r"):
    np.save(tmp_path / name, arr)
    return np.load(tmp_path / name, mmap_mode=mode)


@linux
@pytest.mark.parametrize("mode", ["r", "c"])
def test_a_pass_over_a_mapped_matrix_holds_one_block(tmp_path, mode):
    """64 MB mapped: a plain pass leaves all of it resident, row_blocks about one 1 MB block."""
    A = _mapped(tmp_path, "a.npy", np.ones((16384, 1024), dtype=np.float32), mode)
    base = resident_bytes()
    total = sum(float(b.sum(dtype=np.float64)) for _, _, b in row_blocks(A, block_bytes=1 << 20))
    blocked = resident_bytes() - base
    assert total == A.size
    assert blocked < 8 << 20, f"{blocked >> 20} MB resident after a pass by 1 MB blocks over 64 MB"
    A.sum()
    assert resident_bytes() - base > 48 << 20  # the whole pass maps it all (what row_blocks avoids)
    release_rows(A)
    assert resident_bytes() - base < 8 << 20


def test_release_keeps_what_was_written_to_a_copy_on_write_map(tmp_path):
    A = _mapped(tmp_path, "a.npy", np.zeros((2048, 1024), dtype=np.float32), "c")
    A[5, 7] = 3.0
    release_rows(A)
    assert A[5, 7] == 3.0 and float(A.sum()) == 3.0
    assert float(np.load(tmp_path / "a.npy").sum()) == 0.0  # and the file is untouched


def test_gather_rows_by_blocks_equals_fancy_indexing(tmp_path, monkeypatch):
    Z, _ = _logits(3000, 7)
    A = _mapped(tmp_path, "z.npy", Z)
    idx = np.sort(np.random.default_rng(1).choice(3000, 1200, replace=False))
    for limit in (1 << 30, 1000):  # in memory; through a temporary file
        monkeypatch.setattr(_blocks, "GATHER_IN_MEMORY_BYTES", limit)
        got = gather_rows(A, idx)
        assert got.dtype == Z.dtype and np.array_equal(got, Z[idx])
    run = gather_rows(A, np.arange(100, 400))
    assert np.shares_memory(run, A) and np.array_equal(run, Z[100:400])


def test_save_arrays_writes_a_mapped_matrix_and_a_row_stream_by_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 4096)
    Z, y = _logits(5000, 9)
    A = _mapped(tmp_path, "z.npy", Z)
    stream = RowStream(Z.shape, np.float32, (Z[lo: lo + 333] for lo in range(0, len(Z), 333)))
    save_arrays(tmp_path / "o.npz", compress=False, A=A, S=stream, y=y)
    with NpzReader(tmp_path / "o.npz") as data:
        assert np.array_equal(data["A"], Z) and np.array_equal(data["S"], Z) and np.array_equal(data["y"], y)
    with np.load(tmp_path / "o.npz") as data:  # numpy's own reader agrees (CRC, header)
        assert np.array_equal(data["S"], Z)
    short = RowStream(Z.shape, np.float32, iter([Z[:10]]))
    with pytest.raises(ValueError, match="10 rows written"):
        save_arrays(tmp_path / "p.npz", compress=False, S=short)
    assert not (tmp_path / "p.npz").exists()


@pytest.mark.parametrize("outputs", ["logits", "probabilities"])
def test_calibrate_streams_equals_calibrate_parts_bit_for_bit(tmp_path, outputs):
    parts = {}
    labels = {}
    for i, (p, n) in enumerate((("validation", 900), ("calibration", 500), ("test", 1100))):
        Z, y = _logits(n, 12, seed=i)
        if outputs == "probabilities":
            e = np.exp(Z.astype(np.float64) - Z.max(axis=1, keepdims=True))
            Z = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
        parts[p], labels[p] = Z, y
    utilities = ["fbeta:beta=1", "credal:delta=1.6,gamma=0.6"]
    probs, record = calibrate_parts(parts, labels, outputs=outputs, utilities=utilities)
    mapped = {p: _mapped(tmp_path, f"{p}.npy", Z) for p, Z in parts.items()}
    streams, finish = calibrate_streams(mapped, labels, outputs=outputs, utilities=utilities, block_rows=128)
    save_arrays(tmp_path / "flat.npz", compress=False, **{f"P_{p}": s for p, s in streams.items()})
    got = finish()
    assert record["temperature"] != 1.0
    assert json.dumps(got, sort_keys=True) == json.dumps(record, sort_keys=True)
    with NpzReader(tmp_path / "flat.npz") as data:
        for p in parts:
            assert data[f"P_{p}"].dtype == probs[p].dtype and np.array_equal(data[f"P_{p}"], probs[p])


def test_calibrate_streams_record_needs_the_streams_consumed():
    Z, y = _logits(300, 5)
    _, finish = calibrate_streams({"validation": Z, "test": Z}, {"validation": y, "test": y})
    with pytest.raises(RuntimeError, match="not consumed"):
        finish()


def test_model_outputs_beyond_memory_are_stacked_by_blocks_with_the_same_values(tmp_path, monkeypatch):
    from svbop.datasets import Dataset
    from svbop.datasets import outputs as outputs_module
    from svbop.datasets.outputs import read_model_outputs

    parts = {}
    for i, (p, n) in enumerate((("validation", 700), ("test", 1300))):
        Z, y = _logits(n, 11, seed=10 + i)
        np.save(tmp_path / f"{p}_s.npy", Z)
        np.save(tmp_path / f"{p}_y.npy", y)
        parts[p] = {"scores": f"{p}_s.npy", "labels": f"{p}_y.npy"}
    whole = read_model_outputs(tmp_path, parts, outputs="logits")
    assert whole.X.dtype == np.float64
    monkeypatch.setattr(outputs_module, "STACK_IN_MEMORY_BYTES", 1000)
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 4096)
    big = read_model_outputs(tmp_path, parts, outputs="logits")
    assert big.X.dtype == np.float32 and _blocks.mapping_of(big.X) is not None  # the scores' own type, mapped
    assert np.array_equal(big.X, whole.X) and np.array_equal(big.y, whole.y) and np.array_equal(big.part, whole.part)
    big.save(tmp_path / "dataset.npz")  # written by blocks
    back = Dataset.load(tmp_path / "dataset.npz")
    assert np.array_equal(back.X, whole.X) and back.X.dtype == np.float32
    one = read_model_outputs(tmp_path, {"test": parts["test"]}, outputs="logits")  # one part: its own map, no copy
    assert one.X.dtype == np.float32 and np.array_equal(one.X, np.load(tmp_path / "test_s.npy"))


def test_top1_and_the_example_rows_by_blocks_equal_the_whole_matrix_passes(tmp_path, monkeypatch):
    from svbop.metrics import top1_accuracy
    from svbop.report import model as report_model

    Z, y = _logits(9000, 13, seed=4)
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P = (P / P.sum(axis=1, keepdims=True)).astype(np.float32)
    A = _mapped(tmp_path, "p.npy", P)
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", 4096)
    assert top1_accuracy(A, y) == float(np.mean(P.argmax(axis=1) == y))
    # the example rows as picked before, on the whole matrix at once
    top1 = np.argmax(P, axis=1)
    p1, p_true = P[np.arange(len(y)), top1], P[np.arange(len(y)), y]
    wrong = top1 != y
    H = report_model._entropy_bits(P)
    second = wrong & (np.sum(P > p_true[:, None], axis=1) == 1)
    picks = {}
    for name, mask, key in (("uncertain", np.ones(len(y), bool), H), ("wrong_confident", wrong, p1),
                            ("wrong_near", second, -np.abs(H - np.median(H[second]))),
                            ("typical", np.ones(len(y), bool), -np.abs(H - np.median(H))), ("confident", ~wrong, p1)):
        mask = mask.copy()
        mask[list(picks.values())] = False
        idx = np.flatnonzero(mask)
        picks[name] = int(idx[np.argmax(key[idx])])
    assert report_model._pick_examples(A, y) == picks


def test_a_streamed_calibration_allocates_blocks_not_rows(tmp_path):
    """tracemalloc (numpy reports its buffers to it): the streamed pass's peak is a few blocks and
    per-row numbers, a fraction of the matrix, while the in-memory one holds the whole matrix."""
    import tracemalloc

    n, K = 24000, 200
    Z, y = _logits(n, K, seed=5)
    A = _mapped(tmp_path, "z.npy", Z)
    labels = {"validation": y[:2000], "test": y}
    scores = {"validation": Z[:2000], "test": A}
    tracemalloc.start()
    try:
        streams, finish = calibrate_streams(scores, labels, block_rows=256)
        tracemalloc.reset_peak()
        for stream in streams.values():
            for _ in stream.blocks:
                pass
        finish()
        streamed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        calibrate_parts(scores, labels)
        whole = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    matrix = n * K * 4
    assert whole > matrix  # the in-memory path holds the test probabilities (at least)
    assert streamed < matrix / 4, f"streamed peak {streamed >> 10} KiB for a {matrix >> 10} KiB matrix"


@linux
def test_conformal_sets_of_a_mapped_matrix_hold_a_chunk_and_equal_the_in_memory_ones(tmp_path):
    from svbop import predict_sets
    from svbop.conformal import ConformalSetPredictor

    Z, y = _logits(20000, 400, seed=6)
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    P = (P / P.sum(axis=1, keepdims=True)).astype(np.float32)  # 32 MB
    A = _mapped(tmp_path, "p.npy", P)
    del Z
    for score in ("aps", "lac"):
        cp = ConformalSetPredictor(score=score, epsilon=0.1, random_state=0).fit(P[:3000], y[:3000])
        cp.predict(P[:100])  # compiled kernels loaded (their libraries are mapped files too)
        base = _file_pages()
        seeds = np.arange(P.shape[0])  # APS's uniforms by row (each call draws fresh ones otherwise)
        got = cp.predict(A, chunk_bytes=1 << 20, row_seeds=seeds)
        grown = _file_pages() - base
        assert grown < 8 << 20, f"{score}: {grown >> 20} MB of the 32 MB map resident after predict"
        want = cp.predict(P, row_seeds=seeds)
        assert np.array_equal(got.indptr, want.indptr) and np.array_equal(got.indices, want.indices)
        assert np.array_equal(cp.predict_mask(A, row_seeds=seeds), cp.predict_mask(P, row_seeds=seeds))
    predict_sets(P[:100], "fbeta:beta=1")
    base = _file_pages()
    got = predict_sets(A, "fbeta:beta=1", chunk_bytes=1 << 20)
    assert _file_pages() - base < 8 << 20
    want = predict_sets(P, "fbeta:beta=1")
    assert np.array_equal(got.indices, want.indices) and np.array_equal(got.expected_utility, want.expected_utility)


def test_venn_abers_streams_every_part_as_calibrate_parts_makes_it():
    """calibrate_streams(method="venn_abers") gives calibrate_parts' probabilities, each part its own
    rows (parts of different sizes), whatever the block size."""
    from svbop.calibration import calibrate_parts, calibrate_streams

    rng = np.random.default_rng(3)
    scores = {p: rng.normal(size=(n, 4)) * 2 for p, n in (("validation", 120), ("calibration", 90), ("test", 210))}
    labels = {p: rng.integers(0, 4, len(Z)) for p, Z in scores.items()}
    want, record = calibrate_parts(scores, labels, method="venn_abers")
    streams, finish = calibrate_streams(scores, labels, method="venn_abers", block_rows=50)
    for p, stream in streams.items():
        assert stream.shape == want[p].shape
        np.testing.assert_array_equal(np.concatenate(list(stream.blocks)), want[p])
    assert finish()["method"] == record["method"] == "venn_abers"
