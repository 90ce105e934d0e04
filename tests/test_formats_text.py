"""Format readers for the paper's non-image datasets: libSVM (LSHTC1, DMOZ), IDX (MNIST), CSV text
(DBpedia), FASTA (16S rRNA bacteria) and precomputed .npz features.

Small hand-written fixtures in the real formats live in ``tests/fixtures/formats``; malformed
inputs are written per test.  The real-data tests at the end use ``../shared/data`` and skip with
a reason when it is absent.
"""

from __future__ import annotations

import gzip
import struct
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import need_shared_data
from svbop.datasets.base import Dataset
from svbop.datasets.fasta import read_fasta
from svbop.datasets.idx import read_idx, read_mnist_idx
from svbop.datasets.libsvm import read_libsvm
from svbop.datasets.npz import read_npz
from svbop.datasets.text import read_csv_text
from svbop.io import matrix_arrays

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "formats"


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return name


def error_of(func, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        func(*args, **kwargs)
    return str(info.value)


def names_of(ds: Dataset) -> list[str]:
    return [ds.class_names[i] for i in ds.y]


def test_errors_name_the_file_and_line_for_every_reader(tmp_path):
    """The common contract: a missing file, and a blamed line, are named as '<path>:<line>: '."""
    for reader, kwargs in [
        (read_libsvm, {}),
        (read_csv_text, {"text_column": "text", "label_column": "l3"}),
        (read_fasta, {}),
        (read_npz, {}),
    ]:
        msg = error_of(reader, tmp_path, {"train": ["absent.file"]}, **kwargs)
        assert msg == f"{tmp_path / 'absent.file'}: no such file"
    msg = error_of(read_mnist_idx, tmp_path, {"train": ["absent-images", "absent-labels"]})
    assert msg == f"{tmp_path / 'absent-images'}: no such file"


# ------------------------------------------------------------------------------------ libSVM
def test_libsvm_lshtc_layout_ignores_feature_0_and_keeps_file_indices(tmp_path):
    ds = read_libsvm(FIXTURES, {"train": ["lshtc_train.txt"], "test": ["lshtc_test.txt"]}, ignore_features=[0])
    assert ds.x_kind == "sparse" and ds.name == "" and isinstance(ds.X, sp.csr_matrix)
    assert ds.X.dtype == np.float32 and ds.X.has_sorted_indices
    assert ds.part.tolist() == ["train"] * 4 + ["test"] * 2
    assert ds.class_names == ["29", "33", "156", "1021"]  # numeric order, not "1021" < "156"
    assert names_of(ds) == ["29", "33", "29", "156", "33", "1021"]
    # file index j is column j - 1 (feature 0 removed); the largest index is 719094
    assert ds.X.shape == (6, 719094)
    expected = {
        0: {127002: 1, 4: 2, 719093: 1},
        1: {2: 2, 0: 1, 10: 4},
        2: {6: 1},
        3: {1: 5, 0: 1},
        4: {3: 1, 127002: 3},
        5: {5: 2},
    }
    for row, entries in expected.items():
        got = ds.X.getrow(row)
        assert dict(zip(got.indices.tolist(), got.data.tolist())) == entries
    assert "lshtc_train.txt" in ds.description and "ignored feature indices [0]" in ds.description


def test_libsvm_zero_based_auto_and_one_based(tmp_path):
    write(tmp_path, "one.txt", "1 1:1 3:2\n2 2:4\n")
    ds = read_libsvm(tmp_path, {"train": ["one.txt"]})  # no index 0 -> one-based
    assert ds.X.toarray().tolist() == [[1, 0, 2], [0, 4, 0]]
    ds = read_libsvm(tmp_path, {"train": ["one.txt"]}, zero_based=True)
    assert ds.X.toarray().tolist() == [[0, 1, 0, 2], [0, 0, 4, 0]]
    ds = read_libsvm(tmp_path, {"train": ["one.txt"]}, n_features=5)
    assert ds.X.shape == (2, 5)
    msg = error_of(read_libsvm, tmp_path, {"train": ["one.txt"]}, n_features=2)
    assert msg.startswith(f"{tmp_path / 'one.txt'}:1: feature index 3 is beyond n_features")
    write(tmp_path, "zero.txt", "1 1:1\n2 0:1 2:1\n")
    msg = error_of(read_libsvm, tmp_path, {"train": ["zero.txt"]}, zero_based=False)
    assert msg.startswith(f"{tmp_path / 'zero.txt'}:2: feature index 0 in a one-based file")


def test_libsvm_gzip_and_comments(tmp_path):
    text = b"# a comment line\n3 1:1 # trailing comment\n\n5 2:2.5e-1\n"
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(text))
    ds = read_libsvm(tmp_path, {"train": ["a.txt.gz"]})
    assert ds.class_names == ["3", "5"] and ds.X.toarray().tolist() == [[1, 0], [0, 0.25]]


def test_libsvm_multilabel_modes():
    parts = {"train": ["multilabel.txt"]}
    msg = error_of(read_libsvm, FIXTURES, parts)
    assert msg.startswith(f"{FIXTURES / 'multilabel.txt'}:2: 2 labels, expected one")
    assert msg.endswith("'2,5 2:1'")
    first = read_libsvm(FIXTURES, parts, multilabel="first")
    assert names_of(first) == ["1", "2", "3", "4", "2"]  # "4,1" keeps the first label written
    assert first.X.shape[0] == 5
    skip = read_libsvm(FIXTURES, parts, multilabel="skip")
    assert names_of(skip) == ["1", "3", "2"] and skip.class_names == ["1", "2", "3"]
    assert skip.X.toarray().tolist() == [[0.5, 0, 1], [2, 0, 0], [0, 1, 0]]


@pytest.mark.parametrize(
    "bad, line, what",
    [
        ("3 1:x", 3, "unexpected character 'x'"),
        ("3 a:1", 3, "unexpected character 'a'"),
        ("3 -1:1", 3, "feature index '-1' is negative"),
        ("2.5 1:1", 3, "label '2.5' is not an integer"),
        ("3 2:1 1:1 2:4", 3, "feature index 2 appears twice"),
        ("3 1:1.2.3", 3, "feature value '1.2.3' of index 1 is not a number"),
        ("3 1: 2", 3, "feature value '' of index 1 is not a number"),
        ("3 1.5:2", 3, "feature index '1.5' is not an integer"),
        ("1:2 3:4", 3, "no label"),
        ("3 qid:1 1:2", 3, "qid: tokens are not supported"),
    ],
)
def test_libsvm_malformed_line_is_named(tmp_path, bad, line, what):
    write(tmp_path, "ok.txt", "1 1:1\n")
    write(tmp_path, "bad.txt", f"1 1:2 2:3\n\n{bad}\n4 1:1\n")
    msg = error_of(read_libsvm, tmp_path, {"train": ["ok.txt"], "test": ["bad.txt"]})
    assert msg.startswith(f"{tmp_path / 'bad.txt'}:{line}: {what}")
    assert msg.endswith(repr(bad))


def test_libsvm_reports_the_first_bad_line_and_truncates_it(tmp_path):
    long_line = "2 " + " ".join(f"{i}:1" for i in range(1, 60)) + " 7:x"
    write(tmp_path, "bad.txt", "1 1:1\n" + long_line + "\n3 2.5:1\n")
    msg = error_of(read_libsvm, tmp_path, {"train": ["bad.txt"]})
    assert msg.startswith(f"{tmp_path / 'bad.txt'}:2: unexpected character 'x': ")
    assert msg.endswith("...'") and len(msg.split(": ", 2)[-1]) <= 84


def test_libsvm_unsorted_indices_match_a_naive_parse(tmp_path):
    rng = np.random.default_rng(0)
    lines, dense = [], np.zeros((200, 50))
    for r in range(200):
        cols = rng.choice(50, size=rng.integers(0, 8), replace=False)  # unsorted, as in LSHTC
        vals = rng.integers(1, 9, size=cols.size) / 4
        dense[r, cols] = vals
        lines.append(" ".join([str(r % 7)] + [f"{c}:{v}" for c, v in zip(cols, vals)]))
    write(tmp_path, "r.txt", "\n".join(lines) + "\n")
    ds = read_libsvm(tmp_path, {"train": ["r.txt"]}, zero_based=True, n_features=50)
    assert np.array_equal(ds.X.toarray(), dense.astype(np.float32))
    assert np.array_equal(ds.y, np.arange(200) % 7)


def test_libsvm_blocks_keep_rows_and_line_numbers(tmp_path, monkeypatch):
    import svbop.datasets.libsvm as libsvm

    lines = [f"{r % 3} {r + 1}:{r} 1:2" if r else "0 1:2" for r in range(40)]
    write(tmp_path, "a.txt", "\n".join(lines))  # no final newline
    whole = read_libsvm(tmp_path, {"train": ["a.txt"]})
    monkeypatch.setattr(libsvm, "_BLOCK", 16)  # many blocks, lines cut at block ends
    blocks = read_libsvm(tmp_path, {"train": ["a.txt"]})
    assert (whole.X != blocks.X).nnz == 0 and np.array_equal(whole.y, blocks.y) and whole.X.shape[0] == 40
    lines[33] = "1 5:1 5:2"
    write(tmp_path, "a.txt", "\n".join(lines))
    msg = error_of(read_libsvm, tmp_path, {"train": ["a.txt"]})
    assert msg.startswith(f"{tmp_path / 'a.txt'}:34: feature index 5 appears twice")


# --------------------------------------------------------------------------------------- IDX
def idx_bytes(arr: np.ndarray, code: int) -> bytes:
    header = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


@pytest.mark.parametrize("dtype, code", [(np.uint8, 0x08), (np.int8, 0x09), (np.int16, 0x0B), (np.int32, 0x0C), (np.float32, 0x0D), (np.float64, 0x0E)])
def test_idx_round_trip_plain_and_gzip(tmp_path, dtype, code):
    arr = (np.arange(2 * 3 * 4) - 5).reshape(2, 3, 4).astype(dtype) if dtype != np.uint8 else np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a.idx").write_bytes(idx_bytes(arr, code))
    (tmp_path / "a.idx.gz").write_bytes(gzip.compress(idx_bytes(arr, code)))
    for name in ("a.idx", "a.idx.gz"):
        got = read_idx(tmp_path / name)
        assert got.dtype == np.dtype(dtype) and got.dtype.isnative and np.array_equal(got, arr)


def test_idx_bad_magic_type_and_size(tmp_path):
    arr = np.arange(12, dtype=np.uint8).reshape(3, 4)
    good = idx_bytes(arr, 0x08)
    (tmp_path / "magic").write_bytes(b"\x01" + good[1:])
    assert error_of(read_idx, tmp_path / "magic").startswith(f"{tmp_path / 'magic'}: not an IDX file (magic number starts with 0x01 0x00")
    (tmp_path / "code").write_bytes(good[:2] + b"\x07" + good[3:])
    assert "unknown IDX type code 0x07" in error_of(read_idx, tmp_path / "code")
    (tmp_path / "short").write_bytes(good[:-2])
    msg = error_of(read_idx, tmp_path / "short")
    assert msg == f"{tmp_path / 'short'}: the IDX header announces 3 x 4 values of uint8 = 12 bytes of data, found 10 bytes (truncated)"
    (tmp_path / "long.gz").write_bytes(gzip.compress(good + b"\0"))
    assert "found 13 bytes (extra bytes at the end)" in error_of(read_idx, tmp_path / "long.gz")
    (tmp_path / "head").write_bytes(good[:6])
    assert "truncated IDX header" in error_of(read_idx, tmp_path / "head")


def test_mnist_idx_parts_and_errors(tmp_path):
    rng = np.random.default_rng(1)
    imgs = {p: rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8) for p, n in [("train", 5), ("test", 3)]}
    labs = {"train": np.array([5, 0, 4, 1, 9], dtype=np.uint8), "test": np.array([7, 2, 1], dtype=np.uint8)}
    for p in imgs:
        (tmp_path / f"{p}-images.gz").write_bytes(gzip.compress(idx_bytes(imgs[p], 0x08)))
        (tmp_path / f"{p}-labels").write_bytes(idx_bytes(labs[p], 0x08))
    parts = {p: [f"{p}-images.gz", f"{p}-labels"] for p in ("train", "test")}
    ds = read_mnist_idx(tmp_path, parts)
    assert ds.x_kind == "images" and ds.X.dtype == np.uint8 and ds.X.shape == (8, 28, 28)
    assert np.array_equal(ds.X, np.concatenate([imgs["train"], imgs["test"]]))
    assert ds.class_names == [str(d) for d in range(10)]  # all ten, 3, 6 and 8 absent
    assert ds.y.tolist() == [5, 0, 4, 1, 9, 7, 2, 1]
    assert ds.part.tolist() == ["train"] * 5 + ["test"] * 3

    (tmp_path / "few-labels").write_bytes(idx_bytes(labs["train"][:4], 0x08))
    msg = error_of(read_mnist_idx, tmp_path, {"train": ["train-images.gz", "few-labels"]})
    assert msg == f"{tmp_path / 'train-images.gz'}: holds 5 images but {tmp_path / 'few-labels'} holds 4 labels"
    (tmp_path / "big-labels").write_bytes(idx_bytes(np.array([5, 0, 12, 1, 9], dtype=np.uint8), 0x08))
    msg = error_of(read_mnist_idx, tmp_path, {"train": ["train-images.gz", "big-labels"]})
    assert msg.startswith(f"{tmp_path / 'big-labels'}: label 12 of image 2 (of {tmp_path / 'train-images.gz'})")
    assert "expected [images_file, labels_file]" in error_of(read_mnist_idx, tmp_path, {"train": ["train-labels"]})


# ----------------------------------------------------------------------------------- CSV text
DBPEDIA = {"train": ["dbpedia_small.csv"], "test": ["dbpedia_small_test.csv"]}


def test_csv_text_dbpedia_layout_with_hierarchy():
    ds = read_csv_text(FIXTURES, DBPEDIA, text_column="text", label_column="l3", hierarchy_columns=["l1", "l2", "l3"])
    assert ds.x_kind == "text" and ds.X.dtype == object
    assert ds.X[0] == 'Aeromicrobium is a genus of bacteria, named "air microbe".'
    assert ds.X[3] == "A text over\ntwo lines, with a comma"
    assert ds.class_names == ["Bacteria", "HockeyTeam", "Mountain", "RugbyClub"]
    assert names_of(ds) == ["Bacteria", "RugbyClub", "HockeyTeam", "Mountain", "RugbyClub", "Mountain", "Bacteria"]
    assert ds.part.tolist() == ["train"] * 5 + ["test"] * 2
    h = ds.hierarchy
    assert h.n_classes == 4
    path = {c: [h.node_names[n] for n in h.path(i)] for i, c in enumerate(ds.class_names)}
    # "Bacteria" is both an l2 node and an l3 class: by path prefix they are different nodes
    assert path["Bacteria"][1:] == ["Species", "Bacteria", "Bacteria"]
    assert path["RugbyClub"][1:] == ["Agent", "SportsTeam", "RugbyClub"]
    assert h.parent[ds.class_names.index("RugbyClub")] == h.parent[ds.class_names.index("HockeyTeam")]


def test_csv_text_errors(tmp_path):
    msg = error_of(read_csv_text, FIXTURES, DBPEDIA, text_column="body", label_column="l3")
    assert msg == f"{FIXTURES / 'dbpedia_small.csv'}: no column 'body' (columns: text, l1, l2, l3)"
    write(tmp_path, "e.csv", 'text,l1,l2,l3\n"a, b",A,B,C\n"multi\nline",A,B,\n')
    msg = error_of(read_csv_text, tmp_path, {"train": ["e.csv"]}, text_column="text", label_column="l3")
    assert msg == f"{tmp_path / 'e.csv'}:3: empty label (data row 2)"
    write(tmp_path, "t.csv", 'text,l3\n"x\ny",A\n\n,B\n')
    msg = error_of(read_csv_text, tmp_path, {"train": ["t.csv"]}, text_column="text", label_column="l3")
    assert msg == f"{tmp_path / 't.csv'}:5: empty text (data row 2)"
    write(tmp_path, "f.csv", "text,l3\na,B\nb,unquoted, comma\n")
    msg = error_of(read_csv_text, tmp_path, {"train": ["f.csv"]}, text_column="text", label_column="l3")
    assert msg.startswith(f"{tmp_path / 'f.csv'}:3: 3 fields, expected 2 as in the header")
    write(tmp_path, "h.csv", 'text,l1,l2,l3\n"a, b",A,B,C\n\n"two\nlines",A,X,C\n')
    msg = error_of(read_csv_text, tmp_path, {"train": ["h.csv"]}, text_column="text", label_column="l3",
                   hierarchy_columns=["l1", "l2", "l3"])
    assert msg.startswith(f"{tmp_path / 'h.csv'}:4: class 'C' has the path A > X > C here but A > B > C at {tmp_path / 'h.csv'}:2")
    assert "hierarchy_columns: the last column" in error_of(
        read_csv_text, FIXTURES, DBPEDIA, text_column="text", label_column="l3", hierarchy_columns=["l1", "l2"]
    )


def test_csv_text_tab_separated_gzip(tmp_path):
    (tmp_path / "a.tsv.gz").write_bytes(gzip.compress(b"label\ttext\n2\tfirst, doc\n10\tsecond\n"))
    ds = read_csv_text(tmp_path, {"all": ["a.tsv.gz"]}, text_column="text", label_column="label", sep="\t")
    assert ds.X.tolist() == ["first, doc", "second"] and ds.class_names == ["10", "2"]  # strings sort as strings


# -------------------------------------------------------------------------------------- FASTA
def test_fasta_taxonomy_labels_and_hierarchy():
    ds = read_fasta(FIXTURES, {"train": ["taxonomy.fasta"]})
    assert ds.x_kind == "sequences"
    assert ds.class_names == ["Acidothermus", "Aeromicrobium", "Methanobacterium", "Nitrospira"]
    assert names_of(ds) == ["Acidothermus", "Aeromicrobium", "Nitrospira", "Acidothermus", "Methanobacterium"]
    assert ds.X[0] == "AGAGTTTGATCCTGGCTCAGGACGAACGCTGGCGGCGTGCTTAACACATG"  # joined, upper-cased
    assert ds.X[3] == "ACGTACGT"  # whitespace removed
    h = ds.hierarchy
    assert h.node_names[h.root] == "<root>"  # two domains: Bacteria and Archaea
    assert (h.depth()[: h.n_classes] == 6).all()
    path = {c: [h.node_names[n] for n in h.path(i)][1:] for i, c in enumerate(ds.class_names)}
    assert path["Acidothermus"] == ["Bacteria", "Actinobacteria", "Actinobacteria", "Actinomycetales", "Acidothermaceae", "Acidothermus"]
    assert path["Nitrospira"] == ["Bacteria", "Nitrospira", "Nitrospira", "Nitrospirales", "Nitrospiraceae", "Nitrospira"]
    # repeated names across levels are distinct nodes: phylum and class Actinobacteria
    acido = h.path(ds.class_names.index("Acidothermus"))
    assert acido[2] != acido[3] and h.parent[acido[3]] == acido[2]
    # Acidothermus and Aeromicrobium share the order Actinomycetales
    assert h.path(ds.class_names.index("Aeromicrobium"))[4] == acido[4]


def test_fasta_taxonomy_level_and_no_hierarchy():
    ds = read_fasta(FIXTURES, {"train": ["taxonomy.fasta"]}, level=1, hierarchy=False)
    assert ds.hierarchy is None
    assert ds.class_names == ["Actinobacteria", "Euryarchaeota", "Nitrospira"]
    ds = read_fasta(FIXTURES, {"train": ["taxonomy.fasta"]}, level=2)
    assert ds.hierarchy is not None and (ds.hierarchy.depth()[:3] == 3).all()


def test_fasta_regex_labels_and_parts():
    parts = {"train": ["regex.fasta"], "test": ["taxonomy.fasta"]}
    ds = read_fasta(FIXTURES, {"train": ["regex.fasta"]}, label="regex", label_regex=r"EC=(?P<label>[\d.]+)")
    assert names_of(ds) == ["2.6.1.1", "3.1.1.1", "2.6.1.1"] and ds.hierarchy is None
    assert ds.X[1] == "MKV*" and ds.X[2] == "MA-KV."
    ds = read_fasta(FIXTURES, parts, label="regex", label_regex=r"^(\S+)")
    assert ds.part.tolist() == ["train"] * 3 + ["test"] * 5 and ds.n_classes == 8
    msg = error_of(read_fasta, FIXTURES, parts, label="regex", label_regex=r"EC=([\d.]+)")
    assert msg.startswith(f"{FIXTURES / 'taxonomy.fasta'}:1: header does not match label_regex")


@pytest.mark.parametrize(
    "text, line, what",
    [
        ("ACGT\n>a\tX; Y\nACGT\n", 1, "sequence line before the first header"),
        (">a\tX; Y\nACGT\nAC3T\n", 3, "character '3' is not a sequence letter"),
        (">a\tX; Y\nACGT\n>b\tX; Z\n\n>c\tX; Y\nAC\n", 3, "record '>b\\tX; Z' has an empty sequence"),
        (">a\tX; Y\nACGT\n>b\tX; Z\n", 3, "record '>b\\tX; Z' has an empty sequence"),
        (">a\tX; Y\nACGT\n>b\tX;; Z\nAC\n", 3, "empty taxonomy level in 'X;; Z'"),
        (">a\tX; Y\nACGT\n>b\tW; Y\nAC\n", 3, "class 'Y' has the taxonomy W; Y here but X; Y at "),
    ],
)
def test_fasta_malformed(tmp_path, text, line, what):
    write(tmp_path, "bad.fasta", text)
    msg = error_of(read_fasta, tmp_path, {"train": ["bad.fasta"]})
    assert msg.startswith(f"{tmp_path / 'bad.fasta'}:{line}: {what}")
    if "taxonomy W; Y" in what:
        assert msg.endswith(f"{tmp_path / 'bad.fasta'}:1; every class needs exactly one place in the hierarchy")


def test_fasta_inconsistent_taxonomy_across_files_and_short_taxonomy(tmp_path):
    write(tmp_path, "a.fasta", ">a\tX; Y\nACGT\n")
    write(tmp_path, "b.fasta", ">b\tX; Y\nAC\n>c\tZ; Y\nAC\n")
    msg = error_of(read_fasta, tmp_path, {"train": ["a.fasta"], "test": ["b.fasta"]})
    assert msg.startswith(f"{tmp_path / 'b.fasta'}:3: class 'Y' has the taxonomy Z; Y here but X; Y at {tmp_path / 'a.fasta'}:1")
    msg = error_of(read_fasta, tmp_path, {"train": ["a.fasta"]}, level=2)
    assert msg.startswith(f"{tmp_path / 'a.fasta'}:1: taxonomy has 2 levels, no level 2")


# ---------------------------------------------------------------------------------------- npz
def test_npz_dense_and_csr(tmp_path):
    X1, X2 = np.arange(6, dtype=np.float32).reshape(3, 2), np.ones((2, 2), dtype=np.float32)
    np.savez(tmp_path / "a.npz", X=X1, y=np.array([10, 2, 10]))
    np.savez(tmp_path / "b.npz", X=X2, y=np.array([3, 2]))
    ds = read_npz(tmp_path, {"train": ["a.npz"], "test": ["b.npz"]})
    assert ds.x_kind == "dense" and np.array_equal(ds.X, np.vstack([X1, X2]))
    assert ds.class_names == ["2", "3", "10"] and names_of(ds) == ["10", "2", "10", "3", "2"]
    assert ds.part.tolist() == ["train"] * 3 + ["test"] * 2

    S = sp.random(4, 5, density=0.4, format="csr", random_state=0, dtype=np.float32)
    np.savez(tmp_path / "s.npz", **matrix_arrays(S, "feat"), labels=np.array(["b", "a", "b", "c"]),
             names=np.array(["c", "b", "a"]))
    ds = read_npz(tmp_path, {"all": ["s.npz"]}, x_key="feat", y_key="labels", class_names_key="names")
    assert ds.x_kind == "sparse" and (ds.X != S).nnz == 0
    assert ds.class_names == ["c", "b", "a"] and names_of(ds) == ["b", "a", "b", "c"]  # stored order kept
    np.savez(tmp_path / "i.npz", X=X2, y=np.array([2, 0]), class_names=np.array(["x", "y", "z"]))
    ds = read_npz(tmp_path, {"all": ["i.npz"]})
    assert ds.class_names == ["x", "y", "z"] and names_of(ds) == ["z", "x"]


def test_npz_errors(tmp_path):
    np.savez(tmp_path / "a.npz", X=np.zeros((2, 3)), y=np.array([0, 1]))
    np.savez(tmp_path / "b.npz", X=np.zeros((2, 4)), y=np.array([0, 1]))
    msg = error_of(read_npz, tmp_path, {"train": ["a.npz"], "test": ["b.npz"]})
    assert msg == f"{tmp_path / 'b.npz'}: 'X' has 4 columns but {tmp_path / 'a.npz'} has 3"
    np.savez(tmp_path / "c.npz", X=np.zeros((2, 3)))
    assert error_of(read_npz, tmp_path, {"train": ["c.npz"]}).startswith(f"{tmp_path / 'c.npz'}: missing key 'y'")
    np.savez(tmp_path / "d.npz", X=np.zeros((2, 3)), y=np.array([0, 1, 1]))
    assert "'y' has shape (3,); expected one label per row" in error_of(read_npz, tmp_path, {"train": ["d.npz"]})
    np.savez(tmp_path / "e.npz", X=np.zeros((2, 3)), y=np.array([0, 5]), class_names=np.array(["a", "b"]))
    assert "holds 5 (row 1), not an index into its 2 class names" in error_of(read_npz, tmp_path, {"train": ["e.npz"]})
    np.savez(tmp_path / "f.npz", X=np.zeros((2, 3)), y=np.array([0.5, 1.0]))
    assert "non-integer" in error_of(read_npz, tmp_path, {"train": ["f.npz"]})


# ---------------------------------------------------------------------------------- real data
@pytest.mark.realdata
def test_real_mnist_idx():
    root = need_shared_data("mnist", "real MNIST idx files")
    parts = {
        "train": ["train-images.idx3-ubyte.gz", "train-labels.idx1-ubyte.gz"],
        "test": ["t10k-images.idx3-ubyte.gz", "t10k-labels.idx1-ubyte.gz"],
    }
    ds = read_mnist_idx(root, parts)
    assert ds.X.shape == (70000, 28, 28) and ds.X.dtype == np.uint8
    assert (ds.part == "train").sum() == 60000 and (ds.part == "test").sum() == 10000
    assert ds.n_classes == 10 and ds.y[:5].tolist() == [5, 0, 4, 1, 9]
    assert np.bincount(ds.y).min() > 800  # every digit present in quantity


@pytest.mark.realdata
def test_real_lshtc1_dryrun():
    root = need_shared_data("lshtc1-dryrun", "the LSHTC1 dry-run libSVM files")
    stem = "Task2_Train_RDFData_Test_CrawlData__"
    parts = {p: [f"{stem}{p}.txt"] for p in ("train", "validation", "test")}
    t0 = time.perf_counter()
    ds = read_libsvm(root, parts, ignore_features=[0])
    seconds = time.perf_counter() - t0
    counts = {p: int((ds.part == p).sum()) for p in parts}
    assert counts == {"train": 4463, "validation": 1860, "test": 1858}
    # 1139 distinct labels, each present in every part; equal to the hierarchy's 1139 leaves
    assert ds.n_classes == 1139
    assert all(np.unique(ds.y[ds.part == p]).size == 1139 for p in parts)
    assert ds.X.shape == (8181, 1199831) and ds.X.nnz == 348087
    assert seconds < 10, f"parsing 3.3 MB took {seconds:.1f} s"


@pytest.mark.realdata
def test_real_rrna16s_fasta():
    root = need_shared_data("rrna16s-gold", "the 16S rRNA gold FASTA file")
    ds = read_fasta(root, {"all": ["rRNA16S.gold.fasta.gz"]})
    assert ds.n_samples == 5181 and ds.n_classes == 1196
    h = ds.hierarchy
    assert h.n_classes == 1196
    # domain; phylum; class; order; family; genus below an artificial root (Bacteria and Archaea)
    assert sorted(h.node_names[c] for c in h.children()[h.root]) == ["Archaea", "Bacteria"]
    assert (h.depth()[: h.n_classes] == 6).all()
    # Nitrospira is a phylum, a class and a genus: three distinct nodes on one path
    nitro = [h.node_names[n] for n in h.path(ds.class_names.index("Nitrospira"))]
    assert nitro == ["<root>", "Bacteria", "Nitrospira", "Nitrospira", "Nitrospirales", "Nitrospiraceae", "Nitrospira"]
    assert set("".join(ds.X)) <= set("ACGTUNRYKMSWBDHV")


# ------------------------------------------------------------------ CSV text: the authors' Proteins split
# TRAINVAL.csv / TEST.csv of tfmortie/svbop: `enzyme` (the sequence), `fund` (its Pfam domains as
# pandas writes a list) and `label` (1..3485); written here with synthetic rows.
def test_csv_text_row_ids_name_file_and_data_row(tmp_path):
    from svbop.datasets.text import csv_row_id, read_csv_columns

    write(tmp_path, "TRAINVAL.csv", "enzyme,fund,label\nMKVL,\"['Pkinase', 'SH2']\",10\n\nMAAG,[],2\n")
    write(tmp_path, "TEST.csv", "enzyme,fund,label\nMCCW,\"['Globin']\",2\n")
    parts = {"train": ["TRAINVAL.csv"], "test": ["TEST.csv"]}
    ds = read_csv_text(tmp_path, parts, text_column="enzyme", label_column="label", row_ids=True)
    assert ds.ids.tolist() == ["TRAINVAL.csv:1", "TRAINVAL.csv:2", "TEST.csv:1"]
    assert ds.ids.tolist() == [csv_row_id("TRAINVAL.csv", 1), csv_row_id("TRAINVAL.csv", 2), csv_row_id("TEST.csv", 1)]
    assert ds.X.tolist() == ["MKVL", "MAAG", "MCCW"] and [ds.class_names[i] for i in ds.y] == ["10", "2", "2"]
    assert "row ids" in ds.description
    # without row_ids no ids are stored (DBpedia's rows need none)
    assert read_csv_text(tmp_path, parts, text_column="enzyme", label_column="label").ids is None
    values, lines = read_csv_columns(tmp_path / "TRAINVAL.csv", ["fund"])
    assert values == {"fund": ["['Pkinase', 'SH2']", "[]"]} and lines == [2, 4]
    # the ids survive a saved dataset
    assert Dataset.load(ds.save(tmp_path / "p.npz")).ids.tolist() == ds.ids.tolist()


def test_csv_text_row_ids_keep_their_numbers_when_rows_are_skipped(tmp_path):
    write(tmp_path, "m.csv", "enzyme,label\nAAA,1\nCCC,1;2\nGGG,3\n")
    ds = read_csv_text(tmp_path, {"all": ["m.csv"]}, text_column="enzyme", label_column="label", label_sep=";",
                       multilabel="skip", row_ids=True)
    assert ds.ids.tolist() == ["m.csv:1", "m.csv:3"] and ds.X.tolist() == ["AAA", "GGG"]


# ---------------------------------------------------------------- silent label changes are logged
def test_libsvm_multilabel_first_warns_with_the_count_and_the_file(tmp_path, caplog):
    write(tmp_path, "ml.svm", "1 1:1\n2,3 1:1\n4 2:1\n5, 6 2:1\n7 1:2\n")
    with caplog.at_level("WARNING"):
        first = read_libsvm(tmp_path, {"train": ["ml.svm"]}, multilabel="first")
    assert first.class_names == ["1", "2", "4", "5", "7"]
    assert (f"libsvm: 2 of 5 rows (40.0 %) had more than one label; kept the first (multilabel: first), "
            f"in {tmp_path / 'ml.svm'}, e.g. {tmp_path / 'ml.svm'}:2") in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        read_libsvm(tmp_path, {"train": [write(tmp_path, "one.svm", "1 1:1\n2 1:1\n")]}, multilabel="first")
    assert "more than one label" not in caplog.text


def test_csv_text_multilabel_first_warns_with_the_count_and_an_example(tmp_path, caplog):
    write(tmp_path, "ec.csv", "seq,ec\nMKV,1.1.1.1; 3.1.1.3\nMAA,2.7.1.1\nMGG,1.1.1.1\n")
    with caplog.at_level("WARNING"):
        ds = read_csv_text(tmp_path, {"all": ["ec.csv"]}, text_column="seq", label_column="ec", label_sep=";",
                           multilabel="first")
    assert ds.class_names == ["1.1.1.1", "2.7.1.1"]
    assert (f"csv_text: 1 of 3 rows (33.3 %) had more than one label; kept the first (multilabel: first), "
            f"e.g. {tmp_path / 'ec.csv'}:2 '1.1.1.1; 3.1.1.3' -> '1.1.1.1'") in caplog.text


def test_csv_text_labels_holding_a_separator_without_label_sep_warn(tmp_path, caplog):
    write(tmp_path, "ec.tsv", "seq\tec\nMKV\t1.1.1.1; 3.1.1.3\nMAA\t2.7.1.1\nMGG\t1.1.1.1;2.7.1.1\nMCC\t1.1.1.1|4.2.1.1\n")
    with caplog.at_level("WARNING"):
        ds = read_csv_text(tmp_path, {"all": ["ec.tsv"]}, text_column="seq", label_column="ec", sep="\t")
    assert ds.n_classes == 4  # each combined field is a class of its own
    assert (f"csv_text: 2 of 4 rows (50.0 %) have a label containing ';', e.g. '1.1.1.1; 3.1.1.3' at "
            f"{tmp_path / 'ec.tsv'}:2, and are read as 2 classes of their own (label_sep is unset); "
            "if ';' separates several labels, set `label_sep: \";\"` in the format") in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):  # label_sep given: nothing silent left to warn about
        read_csv_text(tmp_path, {"all": ["ec.tsv"]}, text_column="seq", label_column="ec", sep="\t",
                      label_sep=";", multilabel="skip")
    assert "label_sep is unset" not in caplog.text
    with caplog.at_level("WARNING"):  # clean labels: no warning
        read_csv_text(FIXTURES, {"train": ["dbpedia_small.csv"]}, text_column="text", label_column="l3")
    assert "label_sep is unset" not in caplog.text


@pytest.mark.parametrize("header, sep, named, shown", [
    ("Entry\tEC number\tSequence", ",", "tab", '"\\t"'),
    ("Entry;EC number;Sequence", ",", "semicolon", '";"'),
    ("Entry|EC number|Sequence", ",", "pipe", '"|"'),
    ("Entry,EC number,Sequence", "\t", "comma", '","'),
])
def test_csv_header_read_as_one_column_names_the_sep_to_set(tmp_path, header, sep, named, shown):
    from svbop.datasets import read_dataset

    field = {"tab": "\t", "semicolon": ";", "pipe": "|", "comma": ","}[named]
    write(tmp_path, "u.tsv", f"{header}\nP1{field}1.1.1.1{field}MKV\n")
    fmt = {"kind": "csv_text", "parts": {"all": ["u.tsv"]}, "text_column": "Sequence", "label_column": "EC number",
           "sep": sep}
    with pytest.raises(ValueError) as exc:
        read_dataset(tmp_path, fmt, name="enzymes", where="datasets.enzymes.format")
    assert str(exc.value) == (
        f"{tmp_path / 'u.tsv'}: no column 'Sequence'; the header {header!r} is one column and looks "
        f"{named}-separated: set `sep: {shown}` under datasets.enzymes.format"
    )
    with pytest.raises(ValueError, match=r"looks .*-separated: set `sep: .*`$"):  # read directly: no config key
        read_csv_text(tmp_path, {"all": ["u.tsv"]}, text_column="Sequence", label_column="EC number", sep=sep)


def test_csv_header_of_several_columns_lists_them_without_a_sep_hint(tmp_path):
    write(tmp_path, "u.csv", "Entry,Sequence\nP1,MKV\n")
    msg = error_of(read_csv_text, tmp_path, {"all": ["u.csv"]}, text_column="Sequence", label_column="EC")
    assert msg == f"{tmp_path / 'u.csv'}: no column 'EC' (columns: Entry, Sequence)"


def _headerless_copy(tmp_path, name):
    """The fixture without its header line (its quoted multi-line texts kept as written)."""
    text = (FIXTURES / name).read_text()
    (tmp_path / name).write_text(text.split("\n", 1)[1])


def test_csv_text_without_a_header_reads_the_same_dataset_by_column_numbers(tmp_path, caplog):
    for name in ("dbpedia_small.csv", "dbpedia_small_test.csv"):
        _headerless_copy(tmp_path, name)
    with caplog.at_level("INFO", logger="svbop.datasets.text"):
        named = read_csv_text(FIXTURES, DBPEDIA, text_column="text", label_column="l3",
                              hierarchy_columns=["l1", "l2", "l3"])
        numbered = read_csv_text(tmp_path, DBPEDIA, text_column=0, label_column=3, hierarchy_columns=[1, 2, 3],
                                 header=False)
    assert numbered.X.tolist() == named.X.tolist()
    assert numbered.y.tolist() == named.y.tolist() and numbered.class_names == named.class_names
    assert numbered.part.tolist() == named.part.tolist()
    assert numbered.hierarchy.parent.tolist() == named.hierarchy.parent.tolist()
    assert numbered.hierarchy.node_names == named.hierarchy.node_names
    # a hierarchy built from columns is logged as the other readers log theirs
    logged = [r.getMessage() for r in caplog.records if "hierarchy from columns" in r.getMessage()]
    assert logged[0] == "hierarchy from columns l1 > l2 > l3: 11 nodes over 4 classes, depth 3"
    assert logged[1].startswith("hierarchy from columns 1 > 2 > 3: 11 nodes")
    # the numbered file's errors say so; names and numbers do not mix
    assert "no column 7 (header: false" in error_of(read_csv_text, tmp_path, DBPEDIA, text_column=0,
                                                    label_column=7, header=False)
    assert "with header: false give a 0-based column number" in error_of(
        read_csv_text, tmp_path, DBPEDIA, text_column="text", label_column=3, header=False)
    assert "a number needs header: false" in error_of(read_csv_text, FIXTURES, DBPEDIA, text_column=0, label_column=3)


def test_csv_text_header_false_through_the_config(tmp_path):
    from svbop.config import ConfigError, check_dataset, validate_config
    from svbop.datasets import read_dataset

    _headerless_copy(tmp_path, "dbpedia_small.csv")
    fmt = {"kind": "csv_text", "parts": {"all": ["dbpedia_small.csv"]}, "header": False, "text_column": 0,
           "label_column": 3, "hierarchy_columns": [1, 2, 3]}
    entry = {"files": {"dbpedia_small.csv": {"path": str(tmp_path / "dbpedia_small.csv")}}, "format": fmt}
    cfg = validate_config({"run": ["mine"], "datasets": {"mine": entry}})
    check_dataset("mine", cfg["datasets"]["mine"])  # column numbers accepted with header: false
    ds = read_dataset(tmp_path, fmt)
    assert ds.n_classes == 4 and ds.X.size == 5
    with_header = validate_config({"run": ["mine"], "datasets": {"mine": {**entry, "format": {**fmt, "header": True}}}})
    with pytest.raises(ConfigError, match=r"format\.text_column: 0: a column number needs header: false"):
        check_dataset("mine", with_header["datasets"]["mine"])
    named = validate_config({"run": ["mine"], "datasets": {"mine": {**entry, "format": {**fmt, "label_column": "l3"}}}})
    with pytest.raises(ConfigError, match=r"format\.label_column: 'l3': with header: false give 0-based column numbers"):
        check_dataset("mine", named["datasets"]["mine"])
