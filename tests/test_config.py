"""The workflow's configuration is checked before any job: YAML syntax, the schema (per reader
kind) and the cross-field rules, each failing with one line that names the key."""

from __future__ import annotations

import inspect

import pytest

from svbop.cli import main
from svbop.config import ConfigError, SCHEMA, check_config, load_yaml, merge_configs, validate_config
from svbop.datasets import FORMATS, get_reader
from test_workflow import ROOT, _copy_workflow, _snakemake

BASE = load_yaml(ROOT / "config.yaml")


def _error(extra: dict, cross: bool = False) -> str:
    config = merge_configs(BASE, extra)
    with pytest.raises(ConfigError) as info:
        validate_config(config)
        if cross:
            check_config(config)
    message = str(info.value)
    assert "\n" not in message and message.startswith("config: ")
    return message


def _csv_entry(**format_options) -> dict:
    fmt = {"kind": "csv_text", "parts": {"train": ["a.csv"]}, **format_options}
    return {"datasets": {"mine": {"files": {"a.csv": {"url": "http://127.0.0.1/a.csv"}}, "format": fmt}}}


def test_each_kind_accepts_exactly_its_readers_options():
    """The schema's per-kind option lists (if kind ... then propertyNames) are the readers' signatures."""
    rules = load_yaml(SCHEMA)["$defs"]["dataset"]["properties"]["format"]["allOf"]
    allowed = {}
    for rule in rules:
        names = rule["then"].get("propertyNames", {}).get("enum")
        if names is not None:
            allowed[rule["if"]["properties"]["kind"]["const"]] = set(names)
    for kind in FORMATS:
        params = inspect.signature(get_reader(kind)).parameters
        assert allowed[kind] == {"kind", "parts"} | (set(params) - {"root", "parts"}), kind


@pytest.mark.parametrize(
    "extra, expected",
    [
        # reader options unknown for the chosen kind (the schema accepted every reader's options under any kind)
        (_csv_entry(text_column="t", label_column="l", ignore_features=[0]),
         "config: datasets.mine.format.ignore_features: not an option of format kind 'csv_text'"),
        # csv_text without label_column (was a TypeError at job time)
        (_csv_entry(text_column="t"), "config: datasets.mine.format.label_column: missing (required for format kind 'csv_text')"),
        ({"datasets": {"digits": {"flat": {"C": "high"}}}}, "config: datasets.digits.flat.C: expected number, got 'high'"),
        ({"utilitys": ["fbeta"]}, "config: utilitys: unknown key"),
        ({"datasets": {"mine": {"files": {"a": {"url": "http://x", "path": "/a"}}, "format": {"kind": "libsvm", "parts": {"t": ["a"]}}}}},
         "config: datasets.mine.files.a: give exactly one of url, path, manual, not several"),
    ],
)
def test_schema_errors_are_one_line_naming_the_key(extra, expected):
    message = _error(extra)
    assert message.startswith(expected), message
    assert "Failed validating" not in message and "schema[" not in message  # no schema dump


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({"run": ["digits"], "datasets": {"digits": {"split": {"test": 0.5, "validation": 0.3, "calibration": 0.25}}}},
         "config: datasets.digits.split: validation 0.3 + calibration 0.25 + test 0.5 = 1.05 of the rows, leaving none"),
        ({"run": ["mnist"], "datasets": {"mnist": {"hf": {"enabled": True, "trees": ["predefined"]}}}},
         "config: datasets.mnist.hf.trees: 'predefined' needs a class hierarchy and this dataset has none"),
        ({"run": ["mine"], "datasets": {"mine": {"files": {"a.csv": {"url": "http://x"}},
                                                 "format": {"kind": "libsvm", "parts": {"train": ["b.svm"]}}}}},
         "config: datasets.mine.format.parts.train[0]: 'b.svm' is not one of the dataset's files (files: a.csv)"),
        ({"run": ["mine"], "datasets": {"mine": {"files": {"a.tar": {"url": "http://x"}}, "unpack": ["b.tar"],
                                                 "format": {"kind": "libsvm", "parts": {"train": ["x/b.svm"]}}}}},
         "config: datasets.mine.unpack[0]: 'b.tar' is not one of the dataset's files"),
        ({"run": ["mine"], "datasets": {"mine": {"files": {"a.svm": {"url": "http://x"}}, "format": {"kind": "libsvm", "parts": {"train": ["a.svm"]}},
                                                 "hierarchy": {"format": "edges", "file": "tree.txt"}}}},
         "config: datasets.mine.hierarchy.file: 'tree.txt' is not one of the dataset's files"),
    ],
)
def test_cross_field_errors_name_the_key(extra, expected):
    message = _error(extra, cross=True)
    assert message.startswith(expected), message


def test_the_shipped_configs_pass_every_check():
    for extra in ({}, load_yaml(ROOT / "workflow/configs/quickstart.yaml"), load_yaml(ROOT / "workflow/configs/shared_data.yaml")):
        config = validate_config(merge_configs(BASE, extra))
        check_config(config, config["datasets"])  # every entry, not only those of run


def test_yaml_syntax_error_names_file_line_and_column(tmp_path, capsys):
    bad = tmp_path / "mine.yaml"
    bad.write_text("run: [digits\ndatasets: {}\n")
    with pytest.raises(ConfigError, match=rf"^{bad}:2:9: YAML syntax error: expected ',' or ']'"):
        load_yaml(bad)
    assert main(["check-config", str(ROOT / "config.yaml"), str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"svbop: error: {bad}:2:9: YAML syntax error")
    good = tmp_path / "good.yaml"
    good.write_text("run: [digits]\n")
    assert main(["check-config", str(ROOT / "config.yaml"), str(good)]) == 0


def test_config_errors_stop_the_workflow_before_the_first_job(tmp_path):
    workdir = _copy_workflow(tmp_path)
    (workdir / "bad.yaml").write_text(
        "run: [mine]\ndatasets:\n  mine:\n    files: {a.csv: {url: 'http://127.0.0.1:9/a.csv'}}\n"
        "    format: {kind: csv_text, parts: {train: [a.csv]}, text_column: t, label_column: l, zero_based: true}\n"
    )
    result = _snakemake("-n", "--configfile", "bad.yaml", cwd=workdir)
    text = result.stdout + result.stderr
    assert result.returncode != 0 and "Building DAG" not in text
    assert "config: datasets.mine.format.zero_based: not an option of format kind 'csv_text'" in text
    assert "Failed validating" not in text
    # a YAML syntax error in config.yaml itself is named with its line
    (workdir / "config.yaml").write_text((workdir / "config.yaml").read_text() + "oops: [\n")
    result = _snakemake("-n", cwd=workdir)
    assert result.returncode != 0 and "config.yaml:" in result.stdout + result.stderr
    assert "YAML syntax error" in result.stdout + result.stderr
