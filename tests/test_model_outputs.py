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
    assert ds.name == "mine" and ds.X.shape == (40, K) and ds.hierarchy is not None
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
