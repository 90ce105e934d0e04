"""workflow/README.md's worked example of adding a dataset runs as it says.

The example ("A worked example" under "Adding a dataset") is a ```yaml config snippet (a TSV file
of enzymes, gzip-compressed, several EC numbers per row, a hierarchy from the dotted labels,
small classes dropped) followed by ```text blocks of what the run logs.  These tests take that
snippet as the page writes it, check it against the schema and the cross-field rules, write a
small raw file in its place, read it with the library as rule prepare_dataset does
(:func:`svbop.datasets.read_dataset`, then :func:`svbop.datasets.drop_small_classes`) and compare
the log with the page, line by line; the two variants the page quotes (no ``sep``, no
``label_sep``) are run too.  So the page cannot go stale: a changed message, count or key fails here.
"""

from __future__ import annotations

import gzip
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from svbop.config import check_config, load_yaml, merge_configs, validate_config
from svbop.datasets import drop_small_classes, make_split, read_dataset

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "workflow" / "README.md"
HEADING = "### A worked example: a TSV of enzymes"
_FENCE = re.compile(r"```(yaml|text)\n(.*?)```", re.S)

#: EC numbers of the fixture's rows, in order ("a; b": two labels, the first kept).
LABELS = (
    ["1.1.1.1"] * 3 + ["1.1.1.1; 1.1.1.284"] + ["1.1.1.1"] * 8
    + ["1.1.1.2"] * 8
    + ["2.7.11.1"] * 5 + ["2.7.11.1; 2.7.10.2"] * 2 + ["2.7.11.1"] * 3
    + ["3.1.1.3"] * 5 + ["3.1.1.3; 3.1.1.1"]
    + ["3.4.21.5"] * 2
    + ["4.2.1.1"]
)


def _example() -> tuple[dict, dict[str, str]]:
    """The page's config snippet, and its text blocks by the paragraph that introduces them."""
    text = PAGE.read_text()
    start = text.index(HEADING)
    end = text.find("\n## ", start)
    section = text[start : end if end >= 0 else len(text)]
    fences = list(_FENCE.finditer(section))
    config = yaml.safe_load(next(m.group(2) for m in fences if m.group(1) == "yaml"))
    outputs = {}
    for m in fences:
        if m.group(1) == "text":
            intro = section[: m.start()].rstrip().rsplit("\n\n", 1)[-1]
            outputs[intro] = m.group(2)
    return config, outputs


def _output(outputs: dict[str, str], intro: str) -> list[str]:
    """The lines of the text block whose introducing paragraph holds ``intro``."""
    (block,) = [v for k, v in outputs.items() if intro in k]
    return [line for line in block.splitlines() if line.strip()]


def _write_raw(folder: Path, name: str) -> None:
    """The fixture: UniProt's TSV columns, one protein per row, gzip-compressed."""
    rng = np.random.default_rng(0)
    rows = ["Entry\tEC number\tSequence"]
    for i, ec in enumerate(LABELS):
        seq = "M" + "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), size=40))
        rows.append(f"P{10000 + i}\t{ec}\t{seq}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))


def _records(caplog) -> list[str]:
    """The svbop.datasets log lines as the page shows them: level, logger, message; timings as <t>."""
    return [
        re.sub(r"in \d+\.\d s$", "in <t> s", f"{r.levelname} {r.name}: {r.getMessage()}")
        for r in caplog.records
        if r.name.startswith("svbop.datasets")
    ]


@pytest.fixture
def example(tmp_path, monkeypatch):
    """The snippet's dataset, its name, and a raw folder with its file at the path the pipeline reads."""
    config, outputs = _example()
    (name,) = config["run"]
    entry = config["datasets"][name]
    (file,) = entry["files"]
    monkeypatch.chdir(tmp_path)  # messages name data/<name>/raw/... as in the pipeline
    _write_raw(tmp_path / "data" / name / "raw", file)
    return config, outputs, name, entry


def test_the_worked_example_is_a_valid_config():
    config, _ = _example()
    merged = validate_config(merge_configs(load_yaml(ROOT / "config.yaml"), config))
    check_config(merged)
    entry = merged["datasets"][config["run"][0]]
    assert entry["format"]["sep"] == "\t" and entry["format"]["label_sep"] == ";"
    assert entry["hierarchy"] == {"from_label": {"sep": "."}} and entry["split"]["small_classes"] == "drop"
    assert next(iter(entry["files"])).endswith(".gz")


def test_the_worked_example_logs_what_the_page_shows(example, caplog):
    config, outputs, name, entry = example
    merged = validate_config(merge_configs(load_yaml(ROOT / "config.yaml"), config))
    split = merged["datasets"][name]["split"]
    with caplog.at_level(logging.INFO, logger="svbop"):
        dataset = read_dataset(f"data/{name}/raw", entry["format"], hierarchy=entry["hierarchy"], name=name,
                               where=f"datasets.{name}.format")
        dataset = drop_small_classes(dataset, split, where=f"datasets.{name}.split.small_classes")
    assert _records(caplog) == _output(outputs, "The log of `prepare_dataset`")
    assert dataset.class_names == ["1.1.1.1", "1.1.1.2", "2.7.11.1", "3.1.1.3"]
    assert [dataset.hierarchy.node_names[n] for n in dataset.hierarchy.path(2)] == ["<root>", "2", "2.7", "2.7.11",
                                                                                  "2.7.11.1"]
    parts = make_split(dataset.n_samples, {k: v for k, v in split.items() if k not in ("seed", "small_classes")},
                       y=dataset.y, small_classes="drop")
    assert set(dataset.y[parts["test"]].tolist()) == {0, 1, 2, 3}  # every class left is tested


def test_the_worked_example_without_sep_stops_as_the_page_says(example):
    _, outputs, name, entry = example
    fmt = {k: v for k, v in entry["format"].items() if k != "sep"}
    with pytest.raises(ValueError) as exc:
        read_dataset(f"data/{name}/raw", fmt, hierarchy=entry["hierarchy"], name=name, where=f"datasets.{name}.format")
    assert [str(exc.value)] == _output(outputs, "Without `sep:`")


def test_the_worked_example_without_label_sep_warns_as_the_page_says(example, caplog):
    _, outputs, name, entry = example
    fmt = {k: v for k, v in entry["format"].items() if k not in ("label_sep", "multilabel")}
    with caplog.at_level(logging.INFO, logger="svbop"):
        read_dataset(f"data/{name}/raw", fmt, hierarchy=entry["hierarchy"], name=name, where=f"datasets.{name}.format")
    assert _records(caplog) == _output(outputs, "Without `label_sep:`")


def test_the_worked_example_runs_through_the_pipelines_prepare_and_split(tmp_path):
    """The snippet as a --configfile: rule prepare_dataset drops the small classes (the split's sizes
    reach it as a parameter), its log holds the page's lines, and split_dataset splits the rest."""
    from test_workflow import _copy_workflow, _snakemake
    from svbop.datasets import Dataset, load_split

    config, outputs = _example()
    (name,) = config["run"]
    (file,) = config["datasets"][name]["files"]
    _write_raw(tmp_path / "mine", file)
    config["datasets"][name]["files"][file] = {"path": str(tmp_path / "mine" / file)}
    workdir = tmp_path / "work"
    workdir.mkdir()
    _copy_workflow(workdir)
    (workdir / "mine.yaml").write_text(yaml.safe_dump(config))
    result = _snakemake(f"data/{name}/split.npz", "--cores", "1", "--configfile", "mine.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    log = (workdir / f"results/logs/prepare_dataset/{name}.log").read_text()
    shown = [line for line in _output(outputs, "The log of `prepare_dataset`") if "svbop.datasets.read" not in line]
    for line in shown:  # each line of the page, after its timestamp
        assert f" {line}\n" in log, f"the page shows\n{line}\nbut the log is\n{log}"
    dataset = Dataset.load(workdir / f"data/{name}/dataset.npz")
    assert dataset.class_names == ["1.1.1.1", "1.1.1.2", "2.7.11.1", "3.1.1.3"] and dataset.n_samples == 36
    assert dataset.hierarchy.n_nodes == 14
    split = load_split(workdir / f"data/{name}/split.npz")
    assert sum(len(rows) for rows in split.values()) == 36
    assert set(dataset.y[split["test"]].tolist()) == {0, 1, 2, 3}
