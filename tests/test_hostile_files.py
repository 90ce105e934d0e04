"""Hostile and damaged files (issue 26): each is refused with a one-line ValueError naming the file,
within 1 GB of memory, before anything its header or index claims is allocated.

The readers' cases run in a child process whose address space is capped at 1 GiB
(``resource.setrlimit(RLIMIT_AS)``), so that a regression fails with a MemoryError here instead
of taking the machine's memory; the child prints the exception's type and message, which the
test checks.  Each test failed on the code before this change (see the commit message).
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from watched import run_watched

from svbop.io import load_scores
from svbop.linear import LinearModel
from svbop.trees import TreeModel

WORKFLOW = Path(__file__).resolve().parents[1] / "workflow"
#: The acceptance of issue 26: no hostile input takes more than this to be refused.
CAP = 1 << 30


def refused(code: str, *, cap: int = CAP, env: dict | None = None) -> str:
    """Run ``code`` (which must raise) in a child with its address space capped at ``cap``; return
    ``"<ExceptionType>: <message>"`` of what it raised."""
    body = textwrap.dedent(code)
    script = textwrap.dedent(
        """
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
        try:
        {body}
        except BaseException as exc:
            print(f"{{type(exc).__name__}}: {{exc}}", end="")
            sys.exit(0)
        print("no error", end="")
        """
    ).format(cap=cap, body=textwrap.indent(body, "    "))
    child_env = {**os.environ, "PYTHONPATH": f"{WORKFLOW}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                 "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    run = run_watched([sys.executable, "-c", script], env=child_env)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def assert_one_line(out: str, path: Path, *fragments: str) -> None:
    assert out.startswith("ValueError: "), out[:2000]
    assert "\n" not in out, out[:2000]
    assert str(path) in out, out
    for fragment in fragments:
        assert fragment in out, out


def gzip_bomb(path: Path, inflated: int = 2 << 30) -> Path:
    """A ~2 MB gzip file of ``inflated`` zero bytes: identical gzip members, concatenated (one
    stream to gzip's readers), so that making it costs 64 MiB of deflating, not 2 GiB."""
    piece = 64 << 20
    member = gzip.compress(bytes(piece), compresslevel=9, mtime=0)
    with open(path, "wb") as fh:
        for _ in range(inflated // piece):
            fh.write(member)
    return path


# --------------------------------------------------------------------------------------------
# libSVM
# --------------------------------------------------------------------------------------------


def test_libsvm_feature_index_near_2_31_is_refused_naming_file_and_line(tmp_path):
    """A 30-byte file with index 2147483646 asked for 16 GiB (column arrays of the largest index)."""
    path = tmp_path / "huge_index.txt"
    path.write_text("1 1:1\n2 2147483646:1\n")
    out = refused(f"""
        from svbop.datasets.libsvm import read_libsvm
        read_libsvm(None, {{"train": [{str(path)!r}]}})
    """)
    assert_one_line(out, path, f"{path}:2: feature index 2147483646 is beyond the 16777216 features", "n_features")
    # with the LSHTC layout (ignore_features=[0]) too, which built a boolean column mask of the width
    out = refused(f"""
        from svbop.datasets.libsvm import read_libsvm
        read_libsvm(None, {{"train": [{str(path)!r}]}}, ignore_features=[0])
    """)
    assert_one_line(out, path, f"{path}:2: feature index 2147483646")


def test_libsvm_wide_data_reads_with_n_features_and_without_arrays_of_its_width(tmp_path):
    """The bound is MAX_FEATURES only without n_features; an explicit width is the user's."""
    from svbop.datasets.libsvm import read_libsvm

    (tmp_path / "wide.txt").write_text("1 0:5 3:1 30000000:2\n2 0:7 2:1\n")
    ds = read_libsvm(tmp_path, {"train": ["wide.txt"]}, ignore_features=[0], n_features=30_000_001)
    assert ds.X.shape == (2, 30_000_000)
    assert ds.X[0, 29_999_999] == 2 and ds.X[0, 2] == 1 and ds.X[1, 1] == 1


@pytest.mark.parametrize("reader", ["libsvm", "csv"])
def test_gzip_bomb_is_refused_quickly_naming_the_file(tmp_path, reader):
    """2 MB of gzip inflating to 2 GiB of zeros ran to the memory cap (an empty MemoryError)."""
    path = gzip_bomb(tmp_path / ("bomb.txt.gz" if reader == "libsvm" else "bomb.csv.gz"))
    assert path.stat().st_size < 3 << 20
    call = ('read_libsvm(None, {"train": [%r]})' % str(path) if reader == "libsvm"
            else 'read_csv_text(None, {"train": [%r]}, text_column="text", label_column="l3")' % str(path))
    out = refused(f"""
        from svbop.datasets.libsvm import read_libsvm
        from svbop.datasets.text import read_csv_text
        {call}
    """)
    assert_one_line(out, path)


def test_decompression_bound_stops_valid_looking_data_too(tmp_path):
    """Not only zeros: a libSVM line repeated to 1000 times its compressed size is refused by the
    bound (here lowered by the environment variables, which are the configuration)."""
    path = tmp_path / "repeated.txt.gz"
    path.write_bytes(gzip.compress(b"1 1:1 2:1\n" * 2_000_000, mtime=0))
    env = {"SVBOP_INFLATE_RATIO": "50", "SVBOP_INFLATE_FLOOR_MB": "1"}
    out = refused(f"""
        from svbop.datasets.libsvm import read_libsvm
        read_libsvm(None, {{"train": [{str(path)!r}]}})
    """, env=env)
    assert_one_line(out, path, "decompression bomb", "SVBOP_INFLATE_RATIO")
    bad = refused(f"""
        from svbop.datasets.libsvm import read_libsvm
        read_libsvm(None, {{"train": [{str(path)!r}]}})
    """, env={"SVBOP_INFLATE_RATIO": "lots"})
    assert bad == "ValueError: environment variable SVBOP_INFLATE_RATIO: expected a positive number, got 'lots'"


def test_libsvm_labels_with_a_blank_after_the_comma_are_read(tmp_path):
    """``3, 7 1:2`` (PD-Sparse's reader normalises ", " to ",") was refused as malformed."""
    from svbop.datasets.libsvm import read_libsvm

    (tmp_path / "ml.txt").write_text("3, 7 1:2 4:1\n5 2:1\n7,\t3 1:1\n")
    first = read_libsvm(tmp_path, {"train": ["ml.txt"]}, multilabel="first")
    assert [first.class_names[i] for i in first.y] == ["3", "5", "7"]
    assert first.X.shape == (3, 4) and first.X[0, 3] == 1
    skip = read_libsvm(tmp_path, {"train": ["ml.txt"]}, multilabel="skip")
    assert skip.class_names == ["5"]
    with pytest.raises(ValueError, match=r"ml.txt:1: 2 labels, expected one .*'3, 7 1:2 4:1'"):
        read_libsvm(tmp_path, {"train": ["ml.txt"]})


# --------------------------------------------------------------------------------------------
# IDX
# --------------------------------------------------------------------------------------------


def idx_header(*dims: int, code: int = 0x08) -> bytes:
    return bytes([0, 0, code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims)


@pytest.mark.parametrize("compress", [False, True])
def test_idx_header_claiming_10_9_images_is_refused_before_allocating(tmp_path, compress):
    """10**9 x 28 x 28 gave an empty MemoryError (the report: 'prepare_dataset failed:  (MemoryError)')."""
    data = idx_header(10**9, 28, 28) + bytes(28 * 28 * 3)
    path = tmp_path / ("images.idx3-ubyte" + (".gz" if compress else ""))
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
    out = refused(f"""
        from svbop.datasets.idx import read_idx
        read_idx({str(path)!r})
    """)
    assert_one_line(out, path, "1000000000 x 28 x 28")


def test_idx_header_claiming_3_million_rows_without_data_says_truncated_at_once(tmp_path):
    """3,000,000 x 1000 and no data zero-filled 3 GB (8 s) before saying "truncated"."""
    path = tmp_path / "empty.idx2-ubyte"
    path.write_bytes(idx_header(3_000_000, 1000))
    out = refused(f"""
        from svbop.datasets.idx import read_idx
        read_idx({str(path)!r})
    """, cap=CAP // 2)
    assert_one_line(out, path, "3000000 x 1000", "found 0 bytes (truncated)")


# --------------------------------------------------------------------------------------------
# svbop predict: .npy and .npz inputs
# --------------------------------------------------------------------------------------------


def cli(args: list[str]) -> subprocess.CompletedProcess:
    """``svbop ...`` in a child capped at 1 GiB."""
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (%d, %d)); "
              "from svbop.cli import main; sys.exit(main(sys.argv[1:]))" % (CAP, CAP))
    env = {**os.environ, "PYTHONPATH": f"{WORKFLOW}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OPENBLAS_NUM_THREADS": "1"}
    return run_watched([sys.executable, "-c", script, *map(str, args)], env=env)


def npy_bytes(shape: tuple[int, ...], dtype=np.float64, data: bytes = b"") -> bytes:
    """An .npy file whose header announces ``shape`` and that holds ``data``."""
    from numpy.lib import format as npy_format
    import io

    buf = io.BytesIO()
    npy_format.write_array_header_1_0(buf, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape})
    return buf.getvalue() + data


def test_predict_on_an_npy_whose_header_claims_80_gb(tmp_path):
    """Was a traceback (numpy's _ArrayMemoryError)."""
    path = tmp_path / "probs.npy"
    path.write_bytes(npy_bytes((10**5, 10**5), data=np.full(4, 0.25).tobytes()))
    run = cli(["predict", path, "-u", "fbeta:beta=1", "-o", tmp_path / "sets.npz"])
    assert run.returncode == 2, run.stderr
    err = run.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith(f"svbop: error: {path}") and "shape (100000, 100000)" in err and "truncated" in err


def test_predict_on_an_npz_member_that_is_not_npy(tmp_path):
    """Was ``AttributeError: 'bytes' object has no attribute 'ndim'``."""
    path = tmp_path / "probs.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("P.npy", b"this is not an array")
    run = cli(["predict", path, "-u", "fbeta:beta=1", "-o", tmp_path / "sets.npz"])
    assert run.returncode == 2, run.stderr
    err = run.stderr.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith(f"svbop: error: {path}: key 'P'") and "not a readable .npy array" in err


def test_npz_member_whose_header_claims_more_than_the_member_holds(tmp_path):
    """A member's .npy header is checked against the member's size before numpy allocates it."""
    path = tmp_path / "probs.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("P.npy", npy_bytes((10**5, 10**5), data=np.full(4, 0.25).tobytes()))
    out = refused(f"""
        from svbop.io import load_scores
        load_scores({str(path)!r})
    """)
    assert_one_line(out, path, "key 'P'", "shape (100000, 100000)")


def test_npz_member_beyond_the_decompression_bound_is_refused(tmp_path):
    """A consistent member that inflates 1000-fold is refused before it is inflated (the bound is
    lowered here by its environment variables, so that the test writes 32 MiB, not gigabytes)."""
    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, P=np.zeros((1 << 12, 1 << 10)))
    env = {"SVBOP_INFLATE_FLOOR_MB": "1"}
    out = refused(f"""
        from svbop.io import load_scores
        load_scores({str(path)!r})
    """, env=env)
    assert_one_line(out, path, "key 'P'", "decompression bomb")
    assert load_scores(path).shape == (1 << 12, 1 << 10)  # within the default bound


def test_probability_file_with_nan_or_values_outside_0_1(tmp_path):
    np.save(tmp_path / "nan.npy", np.array([[0.5, 0.5], [np.nan, 1.0]]))
    with pytest.raises(ValueError, match=r"nan.npy: value nan at row 1, column 0 is not finite"):
        load_scores(tmp_path / "nan.npy")
    np.save(tmp_path / "big.npy", np.array([[0.5, 1.5]]))
    assert load_scores(tmp_path / "big.npy").shape == (1, 2)  # scores may be any finite number
    with pytest.raises(ValueError, match=r"big.npy: value 1.5 at row 0, column 1 is outside \[0, 1\]"):
        load_scores(tmp_path / "big.npy", probabilities=True)
    np.savez(tmp_path / "inf.npz", P=np.array([[np.inf, 0.0]]))
    with pytest.raises(ValueError, match=r"inf.npz: key 'P': value inf at row 0, column 0 is not finite"):
        load_scores(tmp_path / "inf.npz")


# --------------------------------------------------------------------------------------------
# models and the index
# --------------------------------------------------------------------------------------------


def small_tree_model() -> TreeModel:
    from svbop.datasets.base import Hierarchy

    tree = Hierarchy(np.array([4, 4, 5, 5, 6, 6, -1]), 4)  # leaves 0..3, internal 4, 5, root 6
    rng = np.random.default_rng(0)
    W = sp.random(7, 5, density=0.6, format="csr", random_state=1)
    W = sp.csr_matrix(W.toarray() * (np.arange(7) < 6)[:, None])  # the root's row is zero
    return TreeModel(tree, W, rng.normal(size=7), np.array([False] * 4 + [True] * 3))


def test_tree_model_with_negative_or_out_of_range_weight_indices(tmp_path):
    """Loaded, then predict_proba failed with an unnamed IndexError (or read other memory)."""
    model = small_tree_model()
    model.save(tmp_path / "ok.npz")
    X = np.ones((2, 5))
    assert np.allclose(TreeModel.load(tmp_path / "ok.npz").predict_proba(X).sum(axis=1), 1)
    for name, change in (("negative", -3), ("beyond", 5)):
        with np.load(tmp_path / "ok.npz") as data:
            arrays = dict(data)
        arrays["W_indices"] = arrays["W_indices"].copy()
        arrays["W_indices"][2] = change
        np.savez(tmp_path / f"{name}.npz", **arrays)
        with pytest.raises(ValueError) as info:
            TreeModel.load(tmp_path / f"{name}.npz")
        msg = str(info.value)
        assert msg.startswith(f"{tmp_path / f'{name}.npz'}: inconsistent sparse 'W'") and "\n" not in msg


def test_tree_and_flat_models_with_nan_or_inf_weights(tmp_path):
    """A flat model with NaN weights loaded and predicted all-NaN probabilities."""
    flat = LinearModel(np.arange(12, dtype=float).reshape(3, 4), np.zeros(3), np.arange(3))
    flat.save(tmp_path / "flat.npz")
    assert LinearModel.load(tmp_path / "flat.npz").W[2, 3] == 11
    for key, where in (("W", "W: value nan at row 1, column 2"), ("b", "b holds nan at position 1")):
        with np.load(tmp_path / "flat.npz") as data:
            arrays = dict(data)
        arrays[key] = arrays[key].copy()
        arrays[key][(1, 2) if key == "W" else 1] = np.nan
        np.savez(tmp_path / f"nan_{key}.npz", **arrays)
        with pytest.raises(ValueError, match=rf"nan_{key}.npz: {where}"):
            LinearModel.load(tmp_path / f"nan_{key}.npz")
    small_tree_model().save(tmp_path / "tree.npz")
    with np.load(tmp_path / "tree.npz") as data:
        arrays = dict(data)
    arrays["W_data"] = arrays["W_data"].copy()
    arrays["W_data"][0] = np.inf
    np.savez(tmp_path / "inf_tree.npz", **arrays)
    with pytest.raises(ValueError, match=r"inf_tree.npz: W holds inf at position 0"):
        TreeModel.load(tmp_path / "inf_tree.npz")


@pytest.mark.parametrize("target", ["graph", "data"])
def test_hnsw_index_with_flipped_bytes_is_refused_before_nmslib_reads_it(tmp_path, target):
    """4 flipped bytes loaded without complaint, then segfaulted on a query (4 of 40 tries).

    Loading runs in a child, so that a regression that crashes NMSLIB fails this test rather
    than killing the test session."""
    from svbop.index import HNSWIndex

    rng = np.random.default_rng(0)
    W, b = rng.normal(size=(60, 16)), rng.normal(size=60)
    path = tmp_path / "hnsw.bin"
    HNSWIndex.build(W, b, M=8, ef_construction=50).save(path)
    probe = f"""
        import numpy as np
        from svbop.index import HNSWIndex
        index = HNSWIndex.load({str(path)!r})
        index.query(np.random.default_rng(1).normal(size=(200, 16)), k=10)
        raise SystemExit("loaded and queried")
    """
    assert refused(probe) == "SystemExit: loaded and queried"  # untouched: loads
    target_file = path if target == "graph" else path.with_name(path.name + ".dat")
    raw = bytearray(target_file.read_bytes())
    for pos in rng.choice(len(raw), size=4, replace=False):
        raw[pos] ^= 0xFF
    target_file.write_bytes(bytes(raw))
    out = refused(probe)
    assert_one_line(out, target_file, "sha256 differs", "rebuild")
    assert json.loads(path.with_name("hnsw.bin.json").read_text())["files"]["graph"]["sha256"]


def test_hnsw_index_without_checksums_is_refused_with_rebuild_advice(tmp_path):
    """Indexes written before checksums were recorded cannot be verified: rebuild them."""
    from svbop.index import HNSWIndex

    rng = np.random.default_rng(0)
    path = tmp_path / "old.bin"
    HNSWIndex.build(rng.normal(size=(20, 4)), M=8).save(path)
    sidecar = path.with_name("old.bin.json")
    info = json.loads(sidecar.read_text())
    del info["files"]
    info["version"] = 2
    sidecar.write_text(json.dumps(info))
    with pytest.raises(ValueError, match=r"old.bin.json: format version 2 records no checksums .* rebuild the index"):
        HNSWIndex.load(path)


def test_score_files_are_checked_when_the_pipeline_reads_them(tmp_path):
    """The baselines, evaluate, summarise and illustrate jobs read results/<ds>/scores.npz."""
    from svbop.io import load_score_arrays

    P = np.full((3, 4), 0.25)
    y = np.array([0, 3, 1])
    good = tmp_path / "scores.npz"
    np.savez(good, P_test=P, y_test=y)
    P_read, y_read = load_score_arrays(good, "P_test", "y_test")
    assert np.array_equal(P_read, P) and np.array_equal(y_read, y)
    for name, arrays, message in [
        ("nan.npz", {"P_test": np.where(np.eye(3, 4) > 0, np.nan, P), "y_test": y}, r"row 0, column 0 is not finite"),
        ("neg.npz", {"P_test": P - 0.5, "y_test": y}, r"outside \[0, 1\]"),
        ("flat.npz", {"P_test": P.ravel(), "y_test": y}, r"expected a 2-D float matrix"),
        ("labels.npz", {"P_test": P, "y_test": np.array([0, -1, 2])}, r"non-negative integer labels"),
        ("missing.npz", {"P_test": P}, r"missing key 'y_test'"),
    ]:
        path = tmp_path / name
        np.savez(path, **arrays)
        with pytest.raises(ValueError, match=message) as info:
            load_score_arrays(path, "P_test", "y_test")
        assert str(path) in str(info.value) and "\n" not in str(info.value)
