"""A model's outputs as a dataset (format.kind: model_outputs, issue 37): every file kind reads the same
dataset, the parts that are missing are split off, and every bad input gets one line naming the file
(and the row or column)."""

from __future__ import annotations

import numpy as np
import pytest

from svbop.config import ConfigError, calibrate_method, check_dataset, load_yaml, merge_configs, validate_config
from svbop.datasets import read_dataset
from svbop.datasets.outputs import read_model_outputs, split_model_outputs, split_origin
from svbop.io import save_arrays

from test_workflow import ROOT

K = 4
NAMES = ["cat", "dog", "eel", "fox"]


def _logits(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, K)) * 2.0, rng.integers(0, K, n)


def _probs(z):
    P = np.exp(z - z.max(axis=1, keepdims=True))
    return P / P.sum(axis=1, keepdims=True)


def _write_csv(path, S, y=None, header=True, names=NAMES, label_first=False):
    lines = []
    if header:
        cols = list(names) + (["label"] if y is not None else [])
        if label_first and y is not None:
            cols = ["label", *names]
        lines.append(",".join(cols))
    for i, row in enumerate(S):
        cells = [repr(float(v)) for v in row]
        if y is not None:
            cells = [str(y[i]), *cells] if label_first else [*cells, str(y[i])]
        lines.append(",".join(cells))
    path.write_text("\n".join(lines) + "\n")


def _read(tmp_path, parts, **options):
    return read_model_outputs(tmp_path, parts, **options)


def test_npy_npz_and_csv_read_the_same_dataset(tmp_path):
    z, y = _logits(30)
    np.save(tmp_path / "s.npy", z)
    np.save(tmp_path / "y.npy", y)
    save_arrays(tmp_path / "s.npz", logits=z, other=np.zeros(3))
    (tmp_path / "y.txt").write_text("\n".join(NAMES[c] for c in y) + "\n")
    _write_csv(tmp_path / "s.csv", z, y=[NAMES[c] for c in y])
    _write_csv(tmp_path / "h.csv", z, y=y, header=False, label_first=True)
    (tmp_path / "names.txt").write_text("\n".join(NAMES) + "\n")
    a = _read(tmp_path, {"test": {"scores": "s.npy", "labels": "y.npy"}}, outputs="logits")
    b = _read(tmp_path, {"test": {"scores": "s.npz", "labels": "y.txt"}}, outputs="logits", scores_key="logits",
              class_names_file="names.txt")
    c = _read(tmp_path, {"test": {"scores": "s.csv"}}, outputs="logits", label_column="label")
    d = _read(tmp_path, {"test": {"scores": "h.csv"}}, outputs="logits", label_column=0, header=False,
              class_names=NAMES)
    for ds in (a, b, c, d):
        np.testing.assert_array_equal(ds.X, z)
        np.testing.assert_array_equal(ds.y, y)
        assert list(ds.part) == ["test"] * 30
    assert c.class_names == NAMES  # the CSV header names the classes
    assert b.class_names == d.class_names == NAMES and a.class_names == ["0", "1", "2", "3"]


def test_read_dataset_takes_the_configured_parts_and_a_hierarchy(tmp_path):
    z, y = _logits(40)
    np.save(tmp_path / "v.npy", _probs(z[:20]))
    np.save(tmp_path / "t.npy", _probs(z[20:]))
    np.save(tmp_path / "yv.npy", y[:20])
    np.save(tmp_path / "yt.npy", y[20:])
    (tmp_path / "tree.txt").write_text("root A\nroot B\nA 0\nA 1\nB 2\nB 3\n")
    ds = read_dataset(tmp_path, {"kind": "model_outputs", "outputs": "probabilities", "parts": {
        "validation": {"scores": "v.npy", "labels": "yv.npy"}, "test": {"scores": "t.npy", "labels": "yt.npy"}}},
        hierarchy={"format": "edges", "file": "tree.txt"}, name="mine")
    assert ds.name == "mine" and ds.X.shape == (40, K)
    h = ds.hierarchy  # classes 0..3 are the leaves, in column order; A holds 0 and 1, B holds 2 and 3
    assert h.n_classes == K and h.node_names == ["0", "1", "2", "3", "root", "A", "B"]
    assert h.parent.tolist() == [5, 5, 6, 6, -1, 4, 4]
    assert list(ds.part[:20]) == ["validation"] * 20 and list(ds.part[20:]) == ["test"] * 20


def test_only_test_given_splits_validation_and_calibration_off_it():
    y = np.repeat(np.arange(5), 40)
    part = np.array(["test"] * 200)
    split = split_model_outputs(y, part, {"validation": 0.1, "calibration": 0.2, "test": 0.2}, seed=3)
    assert split["train"].size == 0
    assert (split["validation"].size, split["calibration"].size, split["test"].size) == (20, 40, 140)
    rows = np.concatenate([split[k] for k in ("validation", "calibration", "test")])
    assert np.unique(rows).size == 200  # disjoint, and every row is used
    assert np.bincount(y[split["calibration"]], minlength=5).tolist() == [8] * 5  # stratified
    again = split_model_outputs(y, part, {"validation": 0.1, "calibration": 0.2}, seed=3)
    np.testing.assert_array_equal(again["validation"], split["validation"])
    origin = split_origin(part, split)
    assert origin["calibration"] == "40 rows split off test (seeded, stratified)"
    assert origin["test"] == "140 rows from its own file"


def test_given_parts_are_kept_and_all_deals_the_rest_to_test():
    y = np.arange(100) % 4
    part = np.array(["validation"] * 30 + ["all"] * 70)
    split = split_model_outputs(y, part, {"calibration": 10}, seed=0)
    np.testing.assert_array_equal(split["validation"], np.arange(30))
    assert split["calibration"].size == 10 and split["test"].size == 60
    assert split_origin(part, split)["validation"] == "30 rows from its own file"


def _bad(tmp_path, scores, labels=None, **options):
    """The one-line error of reading one test part."""
    np.save(tmp_path / "s.npy", scores)
    np.save(tmp_path / "y.npy", np.zeros(len(scores), dtype=np.int64) if labels is None else labels)
    options.setdefault("outputs", "probabilities")
    with pytest.raises(ValueError) as info:
        _read(tmp_path, {"test": {"scores": "s.npy", "labels": "y.npy"}}, **options)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_bad_inputs_are_refused_naming_the_file_and_where(tmp_path):
    P = np.full((5, K), 0.25)
    s = str(tmp_path / "s.npy")
    bad = P.copy()
    bad[3, 2] = np.nan
    assert _bad(tmp_path, bad) == f"{s}: row 3, column 2: nan (scores must be finite)"
    bad = P.copy()
    bad[1, 0] = np.inf
    assert _bad(tmp_path, bad, outputs="logits") == f"{s}: row 1, column 0: inf (scores must be finite)"
    bad = P.copy()
    bad[2] = [0.5, 0.6, -0.1, 0.0]
    assert _bad(tmp_path, bad).startswith(f"{s}: row 2, column 2: negative probability -0.1")
    bad = P.copy()
    bad[4] = [0.3, 0.3, 0.3, 0.3]
    assert _bad(tmp_path, bad).startswith(f"{s}: row 4 sums to 1.2, not 1 (within 1e-06)")
    logits = np.random.default_rng(0).normal(size=(5, K)) * 3
    message = _bad(tmp_path, logits)
    assert "these look like logits" in message and message.endswith("set outputs: logits")
    assert _bad(tmp_path, P, labels=np.array([0, 1, 2, 3, 4])) == f"{tmp_path / 'y.npy'}: row 4: label 4 is outside 0..3"
    assert _bad(tmp_path, P, labels=np.array([0, 1, 2])) == f"{tmp_path / 'y.npy'}: 3 labels but {s} has 5 rows"
    assert _bad(tmp_path, np.zeros((0, K))) == f"{s}: no rows (part 'test' is empty)"
    assert _bad(tmp_path, np.zeros(5)).startswith(f"{s}: scores have shape (5,)")
    assert _bad(tmp_path, P, labels=np.array([0.5, 1, 2, 3, 0])) == f"{tmp_path / 'y.npy'}: row 0: label 0.5 is not an integer class index"


def test_parts_that_disagree_and_unknown_names_are_refused(tmp_path):
    np.save(tmp_path / "a.npy", np.full((3, K), 0.25))
    np.save(tmp_path / "b.npy", np.full((3, K + 1), 0.2))
    np.save(tmp_path / "y.npy", np.zeros(3, dtype=np.int64))
    (tmp_path / "names.txt").write_text("cat\ndog\nemu\n")
    with pytest.raises(ValueError, match=r"b\.npy: 5 classes \(columns\) but .*a\.npy has 4$"):
        _read(tmp_path, {"validation": {"scores": "a.npy", "labels": "y.npy"}, "test": {"scores": "b.npy", "labels": "y.npy"}},
              outputs="probabilities")
    with pytest.raises(ValueError, match=r"names\.txt: row 2: label 'emu' is not one of the 4 class names$"):
        _read(tmp_path, {"test": {"scores": "a.npy", "labels": "names.txt"}}, outputs="probabilities", class_names=NAMES)
    with pytest.raises(ValueError, match=r"label 'cat' is a name but the classes have none; give class_names"):
        _read(tmp_path, {"test": {"scores": "a.npy", "labels": "names.txt"}}, outputs="probabilities")
    save_arrays(tmp_path / "two.npz", a=np.zeros((3, K)), b=np.zeros((3, K)))
    with pytest.raises(ValueError, match=r"two\.npz: holds 2 arrays \(a, b\); set scores_key"):
        _read(tmp_path, {"test": {"scores": "two.npz", "labels": "y.npy"}}, outputs="logits")
    with pytest.raises(ValueError, match="parts: give test"):
        _read(tmp_path, {"validation": {"scores": "a.npy", "labels": "y.npy"}}, outputs="logits")
    (tmp_path / "t.csv").write_text("cat,dog,eel,fox\n0.1,0.2,oops,0.3\n")
    with pytest.raises(ValueError, match=r"t\.csv: line 2, column eel: 'oops' is not a number"):
        _read(tmp_path, {"test": {"scores": "t.csv", "labels": "y.npy"}}, outputs="logits")


BASE = load_yaml(ROOT / "config.yaml")


def _entry(**format_extra):
    return {"files": {"s.npy": {"path": "/x/s.npy"}, "y.npy": {"path": "/x/y.npy"}},
            "format": {"kind": "model_outputs", "outputs": "logits",
                       "parts": {"test": {"scores": "s.npy", "labels": "y.npy"}}, **format_extra}}


def test_the_config_accepts_a_model_outputs_entry_and_defaults_to_temperature():
    config = validate_config(merge_configs(BASE, {"run": ["mine"], "datasets": {"mine": _entry()}}))
    check_dataset("mine", config["datasets"]["mine"])
    assert calibrate_method(config["datasets"]["mine"]) == "temperature"
    assert calibrate_method(config["datasets"]["mnist"]) == "none"  # the paper's datasets: as the paper made them


@pytest.mark.parametrize("entry, message", [
    ({**_entry(), "hsg": {"enabled": True}}, "config: datasets.mine.hsg.enabled: SVBOP-HSG needs features"),
    (_entry(label_column=3), "config: datasets.mine.format.label_column: 3: a column number needs header: false"),
    ({**_entry(), "format": {**_entry()["format"], "parts": {"validation": {"scores": "s.npy", "labels": "y.npy"}}}},
     "config: datasets.mine.format.parts: give test"),
    ({**_entry(), "format": {**_entry()["format"], "parts": {"test": {"scores": "s.npy"}}}},
     "config: datasets.mine.format.parts.test.labels: missing"),
    ({**_entry(), "format": {**_entry()["format"], "parts": {"test": {"scores": "t.npy", "labels": "y.npy"}}}},
     "config: datasets.mine.format.parts.test.scores: 't.npy' is not one of the dataset's files"),
])
def test_config_refusals_name_the_key(entry, message):
    config = validate_config(merge_configs(BASE, {"run": ["mine"], "datasets": {"mine": entry}}))
    with pytest.raises(ConfigError) as info:
        check_dataset("mine", config["datasets"]["mine"])
    assert str(info.value).startswith(message), str(info.value)


def test_the_schema_refuses_an_unknown_part_and_a_missing_outputs():
    for entry, key in (({**_entry(), "format": {**_entry()["format"], "parts": {"training": {"scores": "s.npy"}}}}, "parts"),
                       ({**_entry(), "format": {k: v for k, v in _entry()["format"].items() if k != "outputs"}}, "outputs")):
        with pytest.raises(ConfigError) as info:
            validate_config(merge_configs(BASE, {"run": ["mine"], "datasets": {"mine": entry}}))
        assert str(info.value).startswith("config: datasets.mine.format") and key in str(info.value), str(info.value)


# ------------------------------------------------------------------------------------------------
# Issue 44: hostile files to the readers (text encodings, label values, CSV headers, special files)
# ------------------------------------------------------------------------------------------------


def _one_line_error(call):
    with pytest.raises(ValueError) as info:
        call()
    assert "\n" not in str(info.value)
    return str(info.value)


def _scores_and_labels(tmp_path, n=4):
    np.save(tmp_path / "s.npy", np.full((n, 3), 1 / 3))
    (tmp_path / "y.txt").write_text("\n".join(str(i % 3) for i in range(n)) + "\n")
    return {"test": {"scores": "s.npy", "labels": "y.txt"}}


@pytest.mark.parametrize("key, name, what, data, line, byte", [
    ("labels", "y1.txt", "labels", b"0\n1\n\xe9\n0\n", 3, "0xe9"),
    ("groups", "g.txt", "groups", b"a\nb\nc\n\xff\n", 4, "0xff"),
    ("class_names_file", "names.txt", "class names", b"cat\n\xffdog\neel\n", 2, "0xff"),
])
def test_a_text_file_that_is_not_utf8_is_named_with_its_line(tmp_path, key, name, what, data, line, byte):
    parts = _scores_and_labels(tmp_path)
    (tmp_path / name).write_bytes(data)
    options = {"outputs": "probabilities"}
    if key == "class_names_file":
        options["class_names_file"] = name
    else:
        parts["test"][key] = name
    message = _one_line_error(lambda: _read(tmp_path, parts, **options))
    offset = data.index(bytes.fromhex(byte[2:]))
    assert message == (f"{tmp_path / name}: line {line}: not UTF-8 text (byte {byte} at offset {offset}); "
                       f"the {what} file must be UTF-8")


def test_a_csv_that_is_not_utf8_is_named_with_its_line(tmp_path):
    (tmp_path / "s.csv").write_bytes(b"a,b,c\n0.2,0.3,0.5\n0.2,\xe90.3,0.5\n")
    (tmp_path / "y.txt").write_text("0\n1\n")
    message = _one_line_error(lambda: _read(tmp_path, {"test": {"scores": "s.csv", "labels": "y.txt"}},
                                            outputs="probabilities"))
    assert message == f"{tmp_path / 's.csv'}: line 3: not UTF-8 text (byte 0xe9); the scores file must be UTF-8"


@pytest.mark.parametrize("labels, shown", [
    (np.array([0, 1, 1e20, 0]), "1e+20"),
    (np.array([0, 1, -1e300, 0]), "-1e+300"),
    (np.array([0, 1, 2**64 - 1, 0], dtype=np.uint64), "18446744073709551615"),
    (np.array([0, 1, 2**63 - 1, 0], dtype=np.int64), "9223372036854775807"),
    (np.array([0, 1, 3, 0], dtype=np.uint8), "3"),
    (np.array([0, 1, -2, 0], dtype=np.int8), "-2"),
])
def test_labels_out_of_range_are_shown_as_the_file_gives_them(tmp_path, labels, shown):
    """A float label of 1e20 was cast first (shown as -9223372036854775808, with a RuntimeWarning) and a
    uint64 of 2**64 - 1 shown as -1: the range is now checked in the labels' own type."""
    import warnings

    np.save(tmp_path / "s.npy", np.full((4, 3), 1 / 3))
    np.save(tmp_path / "y.npy", labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        message = _one_line_error(lambda: _read(tmp_path, {"test": {"scores": "s.npy", "labels": "y.npy"}},
                                                outputs="probabilities"))
    assert message == f"{tmp_path / 'y.npy'}: row 2: label {shown} is outside 0..2"


@pytest.mark.parametrize("value, message", [
    ("²", "label '²' is a name but the classes have none; give class_names (or class_names_file) in the scores' "
          "column order"),
    ("٣", "label '٣' is a name but the classes have none; give class_names (or class_names_file) in the scores' "
          "column order"),
    ("99999999999999999999999", "label 99999999999999999999999 is outside 0..2"),
    ("-7", "label -7 is outside 0..2"),
])
def test_text_labels_are_ascii_integers_or_names_and_named_with_their_row(tmp_path, value, message):
    np.save(tmp_path / "s.npy", np.full((4, 3), 1 / 3))
    (tmp_path / "y.txt").write_text(f"0\n1\n{value}\n0\n")
    got = _one_line_error(lambda: _read(tmp_path, {"test": {"scores": "s.npy", "labels": "y.txt"}},
                                        outputs="probabilities"))
    assert got == f"{tmp_path / 'y.txt'}: row 2: {message}"


def test_a_superscript_label_among_class_names_is_an_unknown_name(tmp_path):
    np.save(tmp_path / "s.npy", np.full((4, 3), 1 / 3))
    (tmp_path / "y.txt").write_text("a\nb\n²\nc\n")
    got = _one_line_error(lambda: _read(tmp_path, {"test": {"scores": "s.npy", "labels": "y.txt"}},
                                        outputs="probabilities", class_names=["a", "b", "c"]))
    assert got == f"{tmp_path / 'y.txt'}: row 2: label '²' is not one of the 3 class names"


@pytest.mark.parametrize("head, options, message", [
    ("a,a,b", {}, "the header names 'a' twice (columns 1 and 2); every column needs a name of its own"),
    ("label,a,b,label", {"label_column": "label"},
     "the header names 'label' twice (columns 1 and 4); every column needs a name of its own"),
])
def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path, head, options, message):
    """pandas renamed the second one (a.1, label.1): a class that does not exist, or labels read as scores."""
    cells = {"a,a,b": "0.2,0.3,0.5", "label,a,b,label": "0,0.5,0.5,1"}[head]
    (tmp_path / "s.csv").write_text(f"{head}\n{cells}\n{cells}\n")
    parts = {"test": {"scores": "s.csv"}}
    if "label_column" not in options:
        (tmp_path / "y.txt").write_text("0\n1\n")
        parts["test"]["labels"] = "y.txt"
    got = _one_line_error(lambda: _read(tmp_path, parts, outputs="probabilities", **options))
    assert got == f"{tmp_path / 's.csv'}: {message}"


def test_a_csv_header_with_an_unnamed_column_is_refused(tmp_path):
    """pandas called it 'Unnamed: 0' and read a DataFrame's index column as the scores of a class."""
    (tmp_path / "s.csv").write_text(",a,b\n0,0.5,0.5\n1,0.5,0.5\n")
    (tmp_path / "y.txt").write_text("0\n1\n")
    got = _one_line_error(lambda: _read(tmp_path, {"test": {"scores": "s.csv", "labels": "y.txt"}}, outputs="logits"))
    assert got == (f"{tmp_path / 's.csv'}: column 1 has no name in the header (an index column? write the file without "
                   "it, e.g. DataFrame.to_csv(index=False))")


def test_byte_string_labels_and_groups_that_are_not_utf8_are_named_with_their_row(tmp_path):
    parts = _scores_and_labels(tmp_path)
    np.save(tmp_path / "yb.npy", np.array([b"a", b"b", b"\xe9", b"a"]))
    parts["test"]["labels"] = "yb.npy"
    got = _one_line_error(lambda: _read(tmp_path, parts, outputs="probabilities", class_names=["a", "b", "c"]))
    assert got == f"{tmp_path / 'yb.npy'}: row 2: label b'\\xe9' is not UTF-8 text"
    parts["test"]["labels"] = "y.txt"
    parts["test"]["groups"] = "yb.npy"
    got = _one_line_error(lambda: _read(tmp_path, parts, outputs="probabilities"))
    assert got == f"{tmp_path / 'yb.npy'}: row 2: group b'\\xe9' is not UTF-8 text"


@pytest.mark.parametrize("role", ["scores", "labels", "groups", "class_names_file"])
@pytest.mark.parametrize("special", ["fifo", "device", "folder"])
def test_special_files_are_refused_before_they_are_read(tmp_path, role, special):
    """A FIFO hung the reader and /dev/zero (behind a .csv link) was read until memory ran out."""
    import os

    parts = _scores_and_labels(tmp_path)
    suffix = {"scores": ".csv", "labels": ".txt", "groups": ".txt", "class_names_file": ".txt"}[role]
    path = tmp_path / f"special{suffix}"
    if special == "fifo":
        os.mkfifo(path)
        kind = "a FIFO (named pipe)"
    elif special == "device":
        path.symlink_to("/dev/zero")
        kind = "a character device"
    else:
        path.mkdir()
        kind = "a folder"
    options = {"outputs": "probabilities"}
    if role == "class_names_file":
        options["class_names_file"] = path.name
    else:
        parts["test"][role] = path.name
    what = {"scores": "scores file", "labels": "labels file", "groups": "groups file",
            "class_names_file": "class names file"}[role]
    got = _one_line_error(lambda: _read(tmp_path, parts, **options))
    assert got == f"{path}: is {kind}, not a regular file (the {what} must be a file)"


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_a_fifo_npy_is_refused_by_the_array_loaders_too(tmp_path, suffix):
    import os

    from svbop.io import NpzReader, load_npy

    path = tmp_path / f"f{suffix}"
    os.mkfifo(path)
    loader = (lambda: load_npy(path)) if suffix == ".npy" else (lambda: NpzReader(path))
    assert _one_line_error(loader) == f"{path}: is a FIFO (named pipe), not a regular file"


def test_a_text_line_longer_than_the_bound_is_refused_after_a_bounded_read(tmp_path, monkeypatch):
    """A file of no line breaks is refused once MAX_LINE_BYTES pass without one (here lowered to 1 MiB)."""
    from svbop.datasets import _files

    monkeypatch.setattr(_files, "MAX_LINE_BYTES", 1 << 20)
    parts = _scores_and_labels(tmp_path)
    (tmp_path / "y.txt").write_bytes(b"0\n1\n" + b"0" * (3 << 20))
    got = _one_line_error(lambda: _read(tmp_path, parts, outputs="probabilities"))
    assert got.startswith(f"{tmp_path / 'y.txt'}: line 3 is longer than 1 MiB (no line break in ")
    assert got.endswith(" bytes): not a text file of lines")
    (tmp_path / "s.csv").write_bytes(b"a,b,c\n" + b"0" * (3 << 20))
    got = _one_line_error(lambda: _read(tmp_path, {"test": {"scores": "s.csv", "labels": "y.txt"}}, outputs="logits"))
    assert got.startswith(f"{tmp_path / 's.csv'}: line 2 is longer than 1 MiB")


@pytest.mark.parametrize("role", ["scores", "labels", "groups"])
def test_object_arrays_are_refused_naming_the_file_and_never_unpickled(tmp_path, role):
    parts = _scores_and_labels(tmp_path)
    evil = np.array([0, 1, {"x": 1}, 0], dtype=object) if role != "scores" else np.empty((4, 3), dtype=object)
    np.save(tmp_path / "evil.npy", evil, allow_pickle=True)
    parts["test"][role] = "evil.npy"
    got = _one_line_error(lambda: _read(tmp_path, parts, outputs="probabilities"))
    assert got == (f"{tmp_path / 'evil.npy'} ({role} file): holds Python objects (dtype object); only plain arrays are "
                   "read, never pickles")


# ------------------------------------------------------------------------------------------------
# check_model_outputs: every file checked before any work starts (what svbop report calls)
# ------------------------------------------------------------------------------------------------


def _files(tmp_path, P, y, groups=None, names=None):
    np.save(tmp_path / "t.npy", P)
    np.save(tmp_path / "yt.npy", y)
    parts = {"test": {"scores": tmp_path / "t.npy", "labels": tmp_path / "yt.npy"}}
    if groups is not None:
        (tmp_path / "g.txt").write_text("\n".join(groups) + "\n")
        parts["test"]["groups"] = tmp_path / "g.txt"
    if names is not None:
        (tmp_path / "names.txt").write_text("\n".join(names) + "\n")
    return parts


def test_check_model_outputs_reports_what_it_read_and_resolves_auto(tmp_path):
    from svbop.datasets.outputs import check_model_outputs

    z, y = _logits(30)
    parts = _files(tmp_path, _probs(z).astype(np.float32), y, groups=[f"g{i % 3}" for i in range(30)], names=NAMES)
    got = check_model_outputs(parts, class_names_file=tmp_path / "names.txt")
    assert got == {"outputs": "probabilities", "n_classes": K, "class_names": NAMES, "rows": {"test": 30},
                   "groups": True, "weights": False, "group_columns": None, "group_counts": {}}
    np.save(tmp_path / "t.npy", z)
    assert check_model_outputs(parts)["outputs"] == "logits"
    assert check_model_outputs(parts, outputs="logits")["class_names"] is None


@pytest.mark.parametrize("case, message", [
    ("nan", "{t}: row 3, column 1: nan (scores must be finite)"),
    ("names", "{names}: 3 class names but the scores have 4 columns (one name per class, in the scores' column order)"),
    ("label", "{yt}: row 5: label 4 is outside 0..3"),
    ("groups", "{g}: 29 groups but {t} has 30 rows"),
    ("validation", "{v}: row 0 sums to 2, not 1 (within 1e-06); these look like logits (unnormalised scores): "
                   "set outputs: logits"),
])
def test_check_model_outputs_refuses_each_file_in_one_line_naming_it(tmp_path, case, message):
    from svbop.datasets.outputs import check_model_outputs

    z, y = _logits(30)
    P = _probs(z)
    groups = [f"g{i % 3}" for i in range(30)]
    names = NAMES
    if case == "nan":
        P[3, 1] = np.nan
    elif case == "names":
        names = NAMES[:3]
    elif case == "label":
        y[5] = 4
    elif case == "groups":
        groups = groups[:29]
    parts = _files(tmp_path, P, y, groups=groups, names=names)
    options = {"class_names_file": tmp_path / "names.txt"}
    if case == "validation":  # auto decides probabilities on the test part; validation must then be too
        np.save(tmp_path / "v.npy", 2 * P)
        parts["validation"] = {"scores": tmp_path / "v.npy", "labels": tmp_path / "yt.npy", "groups": tmp_path / "g.txt"}
    got = _one_line_error(lambda: check_model_outputs(parts, **options))
    assert got == message.format(t=tmp_path / "t.npy", names=tmp_path / "names.txt", yt=tmp_path / "yt.npy",
                                 g=tmp_path / "g.txt", v=tmp_path / "v.npy")


@pytest.mark.parametrize("suffix", [".csv", ".npy", ".txt"])
def test_load_matrix_refuses_a_fifo_and_a_device_naming_them(tmp_path, suffix):
    """svbop predict's reader (svbop.io.load_matrix): a FIFO or /dev/zero said "no such file"."""
    import os

    from svbop.io import load_matrix

    fifo, device = tmp_path / f"f{suffix}", tmp_path / f"z{suffix}"
    os.mkfifo(fifo)
    device.symlink_to("/dev/zero")
    assert _one_line_error(lambda: load_matrix(fifo)) == f"{fifo}: is a FIFO (named pipe), not a regular file"
    assert _one_line_error(lambda: load_matrix(device)) == f"{device}: is a character device, not a regular file"
