"""Hostile and careless input to the readers and the library: each case is either read correctly or
refused with one ValueError naming the file and line (or the option), never a bare traceback of
another type, and never silently wrong data.  One test per case found by the issue's review."""

from __future__ import annotations

import gzip
import logging

import numpy as np
import pytest

from svbop.datasets import hierarchy_from_edges, make_split, read_dataset, read_hierarchy


def _error(func, *args, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        func(*args, **kwargs)
    return str(info.value)


def _libsvm(tmp_path, name, data: bytes):
    (tmp_path / name).write_bytes(data)
    return {"kind": "libsvm", "parts": {"train": [name]}}


def _random_libsvm_text(n=3000) -> bytes:
    rng = np.random.default_rng(0)
    return "".join(f"{rng.integers(1, 4)} {rng.integers(1, 50)}:{rng.random():.5f}\n" for _ in range(n)).encode()


# --------------------------------------------------------------------------- compressed files
def test_truncated_gzip_libsvm_file_is_named(tmp_path):
    data = gzip.compress(_random_libsvm_text())
    fmt = _libsvm(tmp_path, "train.svm.gz", data[: len(data) // 2])
    msg = _error(read_dataset, tmp_path, fmt)
    assert msg.startswith(f"{tmp_path / 'train.svm.gz'}: corrupt or truncated .gz file (EOFError")


def test_non_gzip_file_named_gz_is_named(tmp_path):
    fmt = _libsvm(tmp_path, "train.svm.gz", b"1 1:1\n2 2:1\n")
    msg = _error(read_dataset, tmp_path, fmt)
    assert msg.startswith(f"{tmp_path / 'train.svm.gz'}: corrupt or truncated .gz file (BadGzipFile")


def test_truncated_gzip_csv_file_is_named(tmp_path):
    text = b"text,label\n" + b"".join(f"doc {i} {np.sin(i):.9f},c{i % 3}\n".encode() for i in range(3000))
    data = gzip.compress(text)
    (tmp_path / "d.csv.gz").write_bytes(data[: len(data) // 2])
    fmt = {"kind": "csv_text", "parts": {"train": ["d.csv.gz"]}, "text_column": "text", "label_column": "label"}
    assert _error(read_dataset, tmp_path, fmt).startswith(f"{tmp_path / 'd.csv.gz'}: corrupt or truncated .gz file")


# -------------------------------------------------------------------------------------- libsvm
def test_libsvm_value_beyond_float32_is_an_error_not_inf(tmp_path):
    fmt = _libsvm(tmp_path, "x.svm", b"1 1:1\n2 1:2 2:1e39\n")
    msg = _error(read_dataset, tmp_path, fmt)
    assert msg.startswith(f"{tmp_path / 'x.svm'}:2: feature value 1e39 of index 2 is beyond float32's range")
    # the largest float32 itself is fine
    ds = read_dataset(tmp_path, _libsvm(tmp_path, "ok.svm", b"1 1:3.4e38\n"))
    assert np.isfinite(ds.X.data).all()


# ------------------------------------------------------------------------------------ csv_text
def _csv(tmp_path, text: str, **options):
    (tmp_path / "d.csv").write_text(text)
    return {"kind": "csv_text", "parts": {"train": ["d.csv"]}, "text_column": "text", "label_column": "label", **options}


def test_csv_text_without_label_column_names_the_key(tmp_path):
    fmt = _csv(tmp_path, "text,label\nhello,a\n")
    del fmt["label_column"]
    msg = _error(read_dataset, tmp_path, fmt, where="datasets.mine.format")
    assert msg == "datasets.mine.format.label_column: missing (kind 'csv_text' needs label_column)"


def test_csv_unterminated_quote_is_an_error_not_a_swallowed_row(tmp_path):
    # the quote opened on line 2 closes on line 4 before "x": it would swallow the rows between
    fmt = _csv(tmp_path, 'text,label\n"unterminated,b\nlast,c\n"x",d\n')
    msg = _error(read_dataset, tmp_path, fmt)
    assert msg.startswith(f"{tmp_path / 'd.csv'}:4: malformed CSV")
    fmt = _csv(tmp_path, 'text,label\nfine,a\n"never closed,b\nlast,c\n')
    assert _error(read_dataset, tmp_path, fmt).startswith(f"{tmp_path / 'd.csv'}:")
    # quoted line breaks and doubled quotes are CSV and stay fine
    ds = read_dataset(tmp_path, _csv(tmp_path, 'text,label\n"two\nlines, ""quoted""",a\nnext,b\n'))
    assert ds.X.tolist() == ['two\nlines, "quoted"', "next"]


def test_csv_duplicate_column_is_an_error(tmp_path):
    msg = _error(read_dataset, tmp_path, _csv(tmp_path, "text,label,label\nhello,a,b\n"))
    assert msg == f"{tmp_path / 'd.csv'}:1: the header names column 'label' twice (fields 2 and 3)"


def test_csv_multilabel_rows_error_first_or_skip(tmp_path, caplog):
    text = "text,label\nalcohol dehydrogenase,1.1.1.1;3.1.1.3\nlipase,3.1.1.3\nother,1.1.1.1\n"
    msg = _error(read_dataset, tmp_path, _csv(tmp_path, text, label_sep=";"))
    assert msg.startswith(f"{tmp_path / 'd.csv'}:2: 2 labels '1.1.1.1;3.1.1.3' (data row 1), expected one")
    first = read_dataset(tmp_path, _csv(tmp_path, text, label_sep=";", multilabel="first"))
    assert [first.class_names[i] for i in first.y] == ["1.1.1.1", "3.1.1.3", "1.1.1.1"]
    with caplog.at_level(logging.WARNING):
        skip = read_dataset(tmp_path, _csv(tmp_path, text, label_sep=";", multilabel="skip"))
    assert skip.X.tolist() == ["lipase", "other"] and "skipped 1 rows with several labels" in caplog.text
    # without label_sep the label is taken as written (one class "1.1.1.1;3.1.1.3")
    assert "1.1.1.1;3.1.1.3" in read_dataset(tmp_path, _csv(tmp_path, text)).class_names


# -------------------------------------------------------------------------------- hierarchies
def test_hierarchy_from_delimited_labels(tmp_path):
    text = "text,label\na,1.1.1.1\nb,1.1.1.2\nc,1.2.3.4\nd,3.1.1.3\ne,1.2\n"
    ds = read_dataset(tmp_path, _csv(tmp_path, text), hierarchy={"from_label": {"sep": "."}})
    h = ds.hierarchy
    path = {c: [h.node_names[n] for n in h.path(i)] for i, c in enumerate(ds.class_names)}
    assert path["1.2.3.4"] == ["<root>", "1", "1.2", "1.2.3", "1.2.3.4"]
    assert path["1.1.1.2"][:-1] == path["1.1.1.1"][:-1] == ["<root>", "1", "1.1", "1.1.1"]
    assert path["3.1.1.3"] == ["<root>", "3", "3.1", "3.1.1", "3.1.1.3"]
    # a class that is also a prefix of another class is a leaf below the node of its name
    assert path["1.2"] == ["<root>", "1", "1.2", "1.2"]
    msg = _error(read_hierarchy, tmp_path, {"from_label": {"sep": "."}}, ["1..2"])
    assert "class '1..2' has an empty level" in msg


def test_pruned_hierarchy_nodes_are_logged(tmp_path, caplog):
    edges = [("root", "A"), ("root", "B"), ("A", "a1"), ("A", "a2"), ("B", "b1"), ("B", "unused_leaf"), ("root", "Empty"),
             ("Empty", "e1")]
    with caplog.at_level(logging.INFO, logger="svbop.datasets.hierarchies"):
        tree = hierarchy_from_edges(edges, ["a1", "a2", "b1"], where="edges.txt")
    assert tree.n_classes == 3
    assert "edges.txt: pruned 3 nodes that lead to no class of the data, e.g. 'unused_leaf', 'Empty', 'e1'" in caplog.text


# ------------------------------------------------------------------------------- class names
def _idx(path, arr: np.ndarray):
    code = {np.dtype("u1"): 0x08}[arr.dtype]
    header = bytes([0, 0, code, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    path.write_bytes(header + arr.tobytes())


def test_mnist_idx_class_names(tmp_path):
    _idx(tmp_path / "img", np.zeros((4, 2, 2), dtype=np.uint8))
    _idx(tmp_path / "lab", np.array([0, 1, 2, 1], dtype=np.uint8))
    fmt = {"kind": "mnist_idx", "parts": {"train": ["img", "lab"]}, "class_names": ["T-shirt", "Trouser", "Pullover"]}
    ds = read_dataset(tmp_path, fmt)
    assert ds.class_names == ["T-shirt", "Trouser", "Pullover"] and ds.y.tolist() == [0, 1, 2, 1]
    fmt["class_names"] = ["T-shirt", "Trouser"]
    assert "label 2 of image 2" in _error(read_dataset, tmp_path, fmt)
    assert read_dataset(tmp_path, {"kind": "mnist_idx", "parts": fmt["parts"]}).class_names == [str(d) for d in range(10)]


def test_npz_class_names_from_the_config(tmp_path):
    np.savez(tmp_path / "f.npz", X=np.eye(3), y=np.array([2, 0, 1]))
    ds = read_dataset(tmp_path, {"kind": "npz", "parts": {"all": ["f.npz"]}, "class_names": ["cat", "dog", "eel"]})
    assert ds.class_names == ["cat", "dog", "eel"] and [ds.class_names[i] for i in ds.y] == ["eel", "cat", "dog"]
    np.savez(tmp_path / "g.npz", X=np.eye(2), y=np.array([0, 1]), class_names=np.array(["a", "b"]))
    msg = _error(read_dataset, tmp_path, {"kind": "npz", "parts": {"all": ["g.npz"]}, "class_names": ["x", "y"]})
    assert msg == f"{tmp_path / 'g.npz'}: 'class_names' differs from the configured class_names"


# -------------------------------------------------------------------------------------- splits
def test_classes_too_small_for_every_part_warn_or_stop(caplog):
    y = np.array([0] * 20 + [1] * 20 + [2])
    with caplog.at_level(logging.WARNING):
        split = make_split(41, {"test": 0.2, "validation": 0.1}, y=y, class_names=["a", "b", "lonely"])
    assert 40 not in split["test"]  # the single row of 'lonely' can only be in train
    assert "1 classes have fewer rows than the split's 3 parts" in caplog.text and "'lonely' (1 rows)" in caplog.text
    assert "missing from validation: 1, test: 1" in caplog.text
    msg = _error(make_split, 41, {"test": 0.2}, y=y, small_classes="error")
    assert msg.startswith("split: 1 classes have fewer rows") and "small_classes: error" in msg
