"""Mondrian sets grouped by a column of the user's data (issue 38, item 3): ``format.group_column`` of
csv_text and model_outputs datasets (or a model's per-part ``groups`` files) gives every row a group,
which the Dataset saves, the split keeps aligned with the rows, and the scores file carries to the
Mondrian rule; refusals name the file and the line, row or column, or the config key."""

from __future__ import annotations

import numpy as np
import pytest
from svbop.config import (
    ConfigError,
    check_dataset,
    has_group_column,
    load_yaml,
    merge_configs,
    validate_config,
)
from svbop.datasets import Dataset, make_split
from svbop.datasets.outputs import read_model_outputs, split_model_outputs
from svbop.datasets.splits import split_groups
from svbop.datasets.text import read_csv_text
from svbop.io import load_score_groups, save_arrays
from test_workflow import ROOT

PARITY = np.array(["even", "odd"])


def _probs(n, K=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(K), size=n), rng.integers(0, K, n)


# ------------------------------------------------------------------ reading
def test_csv_text_group_column_gives_each_rows_group_with_and_without_a_header(tmp_path):
    (tmp_path / "h.csv").write_text('text,label,site\n"a b",x, north \nc d,y,south\ne,x,north\n')
    (tmp_path / "n.csv").write_text("a b,x,north\nc d,y,south\n")
    d = read_csv_text(tmp_path, {"train": ["h.csv"]}, text_column="text", label_column="label", group_column="site")
    assert d.groups.tolist() == ["north", "south", "north"]  # stripped, as labels are
    d = read_csv_text(tmp_path, {"train": ["n.csv"]}, text_column=0, label_column=1, group_column=2, header=False)
    assert d.groups.tolist() == ["north", "south"]
    assert read_csv_text(tmp_path, {"train": ["n.csv"]}, text_column=0, label_column=1, header=False).groups is None
    d.save(tmp_path / "d.npz")  # saved as names + codes, read back as the names
    assert Dataset.load(tmp_path / "d.npz").groups.tolist() == ["north", "south"]


@pytest.mark.parametrize("content, options, message", [
    ("text,label,site\na,x,n\n", {"group_column": "region"}, "h.csv: no column 'region' (columns: text, label, site)"),
    ("text,label,site\na,x,n\nb,y, \n", {"group_column": "site"}, "h.csv:3: empty group (group_column 'site') (data row 2)"),
    ("text,label,site\na,x,n\n", {"group_column": 2}, "group_column: 2: with a header line give the column's name"),
])
def test_csv_text_group_column_refusals(tmp_path, content, options, message):
    (tmp_path / "h.csv").write_text(content)
    with pytest.raises(ValueError) as info:
        read_csv_text(tmp_path, {"train": ["h.csv"]}, text_column="text", label_column="label", **options)
    if message.startswith("h.csv"):  # names the file (and the line)
        assert str(info.value) == str(tmp_path / message)
    else:
        assert str(info.value).startswith(message), str(info.value)


def test_model_outputs_groups_files_and_a_csv_group_column(tmp_path):
    P, y = _probs(6)
    np.save(tmp_path / "s.npy", P)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "g.npy", y % 2)
    (tmp_path / "g.txt").write_text("".join(f"{PARITY[c % 2]}\n" for c in y))
    lines = ["c0,c1,c2,c3,label,site"] + [",".join([*map(repr, P[i].tolist()), str(y[i]), PARITY[y[i] % 2]])
                                          for i in range(6)]
    (tmp_path / "s.csv").write_text("\n".join(lines) + "\n")
    npy = read_model_outputs(tmp_path, {"test": {"scores": "s.npy", "labels": "y.npy", "groups": "g.npy"}},
                             outputs="probabilities")
    assert npy.groups.tolist() == [str(c % 2) for c in y]
    txt = read_model_outputs(tmp_path, {"test": {"scores": "s.npy", "labels": "y.npy", "groups": "g.txt"}},
                             outputs="probabilities")
    csv = read_model_outputs(tmp_path, {"test": {"scores": "s.csv"}}, outputs="probabilities", label_column="label",
                             group_column="site")
    assert txt.groups.tolist() == csv.groups.tolist() == PARITY[y % 2].tolist()
    assert csv.class_names == ["c0", "c1", "c2", "c3"] and np.allclose(csv.X, P)  # the group column is no score
    assert read_model_outputs(tmp_path, {"test": {"scores": "s.npy", "labels": "y.npy"}},
                              outputs="probabilities").groups is None


def test_model_outputs_group_refusals_name_the_file_and_line(tmp_path):
    P, y = _probs(4)
    np.save(tmp_path / "s.npy", P)
    np.save(tmp_path / "y.npy", y)
    (tmp_path / "short.txt").write_text("a\nb\n")
    (tmp_path / "hole.txt").write_text("a\n\nb\nc\n")
    (tmp_path / "s.csv").write_text("c0,c1,c2,c3,label\n" + "".join(
        ",".join([*map(repr, P[i].tolist()), str(y[i])]) + "\n" for i in range(4)))

    def refused(parts, **options):
        with pytest.raises(ValueError) as info:
            read_model_outputs(tmp_path, parts, outputs="probabilities", **options)
        return str(info.value)

    part = {"scores": "s.npy", "labels": "y.npy"}
    assert refused({"test": {**part, "groups": "short.txt"}}) == f"{tmp_path / 'short.txt'}: 2 groups but {tmp_path / 's.npy'} has 4 rows"
    assert refused({"test": {**part, "groups": "hole.txt"}}) == f"{tmp_path / 'hole.txt'}: line 2: empty group"
    assert refused({"test": {"scores": "s.csv"}}, label_column="label", group_column="site") == (
        f"{tmp_path / 's.csv'}: no column 'site' (group_column); its columns: c0, c1, c2, c3, label")
    assert refused({"test": part}, group_column="site") == (
        f"{tmp_path / 's.npy'}: group_column needs a CSV/TSV scores file; give the part a groups file")
    (tmp_path / "g.txt").write_text("a\nb\na\nb\n")
    assert refused({"test": {**part, "groups": "g.txt"}, "validation": part}) == (
        "parts.validation.groups: missing (parts.test gives groups: give every part a groups file, or none)")


# ------------------------------------------------------------------ the split and the scores file
def test_groups_survive_the_split_into_the_scores_file_aligned_with_the_rows(tmp_path):
    """A group equal to the label's parity is still the label's parity after the split, in every part of the
    scores file, for a dataset of ours (make_split) and for a model's outputs (split_model_outputs)."""
    P, y = _probs(200, K=6, seed=3)
    d = Dataset(name="d", X=P, y=y, class_names=list("abcdef"), groups=PARITY[y % 2])
    d.save(tmp_path / "d.npz")
    d = Dataset.load(tmp_path / "d.npz")
    ours = make_split(d.n_samples, {"validation": 0.2, "calibration": 0.2, "test": 0.3}, seed=1, y=d.y)
    given = split_model_outputs(d.y, np.full(d.n_samples, "test"), {"validation": 30, "calibration": 40}, seed=1)
    for split in (ours, given):
        arrays = split_groups(d.groups, split)
        save_arrays(tmp_path / "flat.npz", **arrays, **{f"y_{p}": d.y[split[p]] for p in ("calibration", "test")})
        names, (g_cal, g_test) = load_score_groups(tmp_path / "flat.npz", "calibration", "test")
        assert names.tolist() == ["even", "odd"]
        for part, codes in (("calibration", g_cal), ("test", g_test)):
            assert len(codes) == len(split[part]) > 0
            assert np.array_equal(names[codes], PARITY[d.y[split[part]] % 2])


def test_a_scores_file_without_groups_is_refused_in_one_line(tmp_path):
    save_arrays(tmp_path / "flat.npz", y_test=np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match=r"flat.npz: no per-row groups \(key 'group_names'\); the dataset has no "
                                         r"format.group_column"):
        load_score_groups(tmp_path / "flat.npz", "test")


# ------------------------------------------------------------------ config
BASE = load_yaml(ROOT / "config.yaml")


def _validated(entry):
    return validate_config(merge_configs(BASE, {"run": ["mine"], "datasets": {"mine": entry}}))["datasets"]["mine"]


def _outputs(**extra):
    return {"files": {"s.csv": {"path": "/x/s.csv"}, "g.txt": {"path": "/x/g.txt"}},
            "format": {"kind": "model_outputs", "outputs": "probabilities", "label_column": "label",
                       "parts": {"test": {"scores": "s.csv"}}, **extra}}


def test_the_config_takes_group_column_on_csv_text_and_model_outputs_only():
    assert has_group_column(_validated(_outputs(group_column="site")))
    assert has_group_column(_validated(_outputs(parts={"test": {"scores": "s.csv", "groups": "g.txt"}})))
    assert not has_group_column(_validated(_outputs()))
    libsvm = {"files": {"a.txt": {"path": "/x/a.txt"}},
              "format": {"kind": "libsvm", "parts": {"train": "a.txt"}, "group_column": "site"}}
    with pytest.raises(ConfigError) as info:
        _validated(libsvm)
    assert str(info.value).startswith("config: datasets.mine.format.group_column: not an option of format kind 'libsvm'")
    with pytest.raises(ConfigError) as info:
        check_dataset("mine", libsvm)  # without the schema too
    assert str(info.value) == "config: datasets.mine.format.group_column: read by kinds csv_text and model_outputs, not 'libsvm'"


@pytest.mark.parametrize("extra, message", [
    ({"group_column": 4}, "config: datasets.mine.format.group_column: 4: a column number needs header: false"),
    ({"group_column": "site", "parts": {"test": {"scores": "s.csv", "groups": "g.txt"}}},
     "config: datasets.mine.format.parts.test.groups: and format.group_column both give the groups; give one"),
    ({"parts": {"test": {"scores": "s.csv", "groups": "h.txt"}}},
     "config: datasets.mine.format.parts.test.groups: 'h.txt' is not one of the dataset's files"),
])
def test_config_group_refusals_name_the_key(extra, message):
    with pytest.raises(ConfigError) as info:
        check_dataset("mine", _validated(_outputs(**extra)))
    assert str(info.value).startswith(message), str(info.value)


# ------------------------------------------------------------------ the table of the report
def test_every_groups_coverage_is_reported_by_name_with_the_worst(tmp_path):
    """evaluate_beyond writes each group's coverage under its name (JSON); the report's table reads it back:
    ICP and the Mondrian sets grouped by the column, one row per group, and the worst group's."""
    from svbop import SetPredictions
    from svbop.evaluation import evaluate_beyond
    from svbop.io import write_tsv
    from svbop.report.beyond import beyond_table, group_coverage_table, read_beyond

    y = np.array([0, 1, 0, 1, 0, 1])
    codes = np.array([0, 0, 0, 1, 1, 1])  # "north": rows 0-2, "south, ünï": rows 3-5
    names = np.array(["north", "south, ünï"])
    icp = SetPredictions.from_sets([[0], [1], [1], [0], [0], [0]], 2)  # north 2/3, south 1/3
    mondrian = SetPredictions.from_sets([[0], [1], [0, 1], [0, 1], [0], [1]], 2)  # both 3/3
    sets = {("icp", "0.1"): icp, ("mondrian_lac_group_column", "0.1"): mondrian}
    rows = evaluate_beyond(sets, y, ["fbeta:beta=1"], dataset="d", groups={"group_column": codes},
                           group_names={"group_column": names})
    assert rows[0]["worst_group_group_column_pct"] == pytest.approx(100 / 3)
    write_tsv(tmp_path / "beyond.tsv", rows)
    table = group_coverage_table(beyond_table(read_beyond(tmp_path / "beyond.tsv"), "d", ["fbeta:beta=1"]))
    assert [g["name"] for g in table["groups"]] == ["north", "south, ünï"] and [g["n"] for g in table["groups"]] == [3, 3]
    assert np.allclose([g["coverage"] for g in table["groups"]], [[200 / 3, 100], [100 / 3, 100]])
    assert np.allclose(table["worst"], [100 / 3, 100]) and table["keys"] == ["icp/0.1", "mondrian_lac_group_column/0.1"]
