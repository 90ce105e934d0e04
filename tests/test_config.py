"""The workflow's configuration is checked before any job: YAML syntax, the schema (per reader
kind) and the cross-field rules, each failing with one line that names the key."""

from __future__ import annotations

import inspect
import re

import pytest

from svbop.cli import main
from svbop.config import (
    DATASET_KEY_PATTERN,
    SCHEMA,
    ConfigError,
    _PLAIN_NAME,
    check_config,
    check_dataset,
    load_yaml,
    merge_configs,
    validate_config,
)
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
        ({"datasets": {"digits": {"flat": {"C": "high"}}}}, "config: datasets.digits.flat.C: expected one of: number, 'auto'; got 'high'"),
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


# ------------------------------------------------------ names that become paths (issue 26)
def _with_files(*names, unpack=(), parts=("a.svm",), name="mine") -> dict:
    entry = {"files": {n: {"url": "http://127.0.0.1/x"} for n in names}, "unpack": list(unpack),
             "format": {"kind": "libsvm", "parts": {"train": list(parts)}}}
    return {"run": [name], "datasets": {name: entry}}


_DIGITS = {"source": {"builtin": "digits"}}
_KEY_RULE = "is not a usable dataset key (it names the folders data/<key> and results/<key>"
_NAME_RULE = "is not a plain file name"


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({"datasets": {"a/b": _DIGITS}}, f"config: datasets: key 'a/b' {_KEY_RULE}"),
        ({"datasets": {"..": _DIGITS}}, f"config: datasets: key '..' {_KEY_RULE}"),
        ({"datasets": {"my data": _DIGITS}}, f"config: datasets: key 'my data' {_KEY_RULE}"),
        ({"datasets": {"_weights": _DIGITS}}, f"config: datasets: key '_weights' {_KEY_RULE}"),  # status.WEIGHTS_OWNER
        ({"datasets": {".hidden": _DIGITS}}, f"config: datasets: key '.hidden' {_KEY_RULE}"),
        ({"run": ["../x"]}, f"config: run[0]: '../x' {_KEY_RULE}"),
        (_with_files("."), f"config: datasets.mine.files: key '.' {_NAME_RULE}"),
        (_with_files(".."), f"config: datasets.mine.files: key '..' {_NAME_RULE}"),
        (_with_files("sub/a.svm"), f"config: datasets.mine.files: key 'sub/a.svm' {_NAME_RULE}"),
        (_with_files("sub\\a.svm"), f"config: datasets.mine.files: key 'sub\\\\a.svm' {_NAME_RULE}"),
        (_with_files(".a.svm.sha256.1.tmp"), f"config: datasets.mine.files: key '.a.svm.sha256.1.tmp' {_NAME_RULE}"),
        ({"weights": {"../../evil": {"url": "http://127.0.0.1/w"}}}, "config: weights: key '../../evil' is not a usable weights name"),
        (_with_files("a.tar", unpack=["a.tar", "a.tar"]), "config: datasets.mine.unpack: ['a.tar', 'a.tar'] has non-unique"),
    ],
)
def test_keys_and_file_names_that_are_not_safe_path_segments_are_refused(extra, expected):
    """Dataset keys with '/', '..', spaces and file names '.', '..' passed the schema, then failed
    in jobs (MissingInputException, IsADirectoryError) without naming the key."""
    message = _error(extra)
    assert message.startswith(expected), message


@pytest.mark.parametrize(
    "extra, expected",
    [
        # x.sha256 beside x: the recorded digest of x and the download x.sha256 are one file
        (_with_files("a.svm", "a.svm.sha256"), "config: datasets.mine.files.a.svm.sha256: the pipeline writes 'a.svm.sha256' beside 'a.svm' (its recorded sha256)"),
        (_with_files("a.svm.part", "a.svm"), "config: datasets.mine.files.a.svm.part: the pipeline writes 'a.svm.part' beside 'a.svm' (its partial download)"),
        (_with_files("a.svm", "a.svm.corrupt"), "config: datasets.mine.files.a.svm.corrupt: the pipeline writes"),
        # unpack: entries outside the raw folder (the run unpacked /abs/victim.tar beside itself and deleted it)
        (_with_files("a.tar", unpack=["a.tar", "/abs/victim.tar"], parts=["x/a.svm"]),
         "config: datasets.mine.unpack[1]: '/abs/victim.tar' is an absolute path; an entry is one of the dataset's files (a.tar)"),
        (_with_files("a.tar", unpack=["a.tar", "../victim.tar"], parts=["x/a.svm"]),
         "config: datasets.mine.unpack[1]: '../victim.tar' contains a '..' segment"),
        (_with_files("a.tar", unpack=["a.tar", "x/../../../victim.tar"], parts=["x/a.svm"]),
         "config: datasets.mine.unpack[1]: 'x/../../../victim.tar' contains a '..' segment"),
        (_with_files("a.tar", unpack=["a.tar", "./x/b.tar"], parts=["x/a.svm"]),
         "config: datasets.mine.unpack[1]: './x/b.tar' has an empty or '.' segment"),
        (_with_files("a.tar", unpack=["a.tar", "x//b.tar"], parts=["x/a.svm"]),
         "config: datasets.mine.unpack[1]: 'x//b.tar' has an empty or '.' segment"),
        (_with_files("a.tar", unpack=["a.tar", "x\\b.tar"], parts=["x/a.svm"]),
         "config: datasets.mine.unpack[1]: 'x\\\\b.tar' contains '\\' (separate folders with '/')"),
        (_with_files("a.tar", unpack=["/abs/victim.tar", "a.tar"], parts=["x/a.svm"]),
         "config: datasets.mine.unpack[0]: '/abs/victim.tar' is an absolute path"),
        # the files a reader opens stay inside the raw folder
        (_with_files("a.tar", unpack=["a.tar"], parts=["/etc/passwd"]),
         "config: datasets.mine.format.parts.train[0]: '/etc/passwd' is an absolute path"),
        (_with_files("a.tar", unpack=["a.tar"], parts=["../../other/raw/a.svm"]),
         "config: datasets.mine.format.parts.train[0]: '../../other/raw/a.svm' contains a '..' segment"),
        # a key that is one of the pipeline's own folders (results/logs, data/pretrained, ...)
        (_with_files("a.svm", name="logs"), "config: datasets: key 'logs' is reserved"),
        (_with_files("a.svm", name="Pretrained"), "config: datasets: key 'Pretrained' is reserved"),
    ],
)
def test_unpack_entries_sidecars_and_reserved_keys_are_refused_naming_the_key(extra, expected):
    message = _error(extra, cross=True)
    assert message.startswith(expected), message


def test_check_dataset_refuses_unsafe_keys_without_the_schema():
    """The cross-field checks stand on their own (a caller that skipped validate_config)."""
    for key in ("a/b", "..", "my data"):
        with pytest.raises(ConfigError, match=rf"^config: datasets: key {re.escape(repr(key))} is not a usable"):
            check_dataset(key, {"source": {"builtin": "digits"}})
    with pytest.raises(ConfigError, match=r"^config: datasets.mine.files: key '\.\.' is not a plain file name"):
        check_dataset("mine", {"files": {"..": {"url": "x"}}})


def test_name_rules_agree_with_the_schema_and_the_wildcards():
    schema = load_yaml(SCHEMA)
    assert schema["$defs"]["dataset_key"]["pattern"] == DATASET_KEY_PATTERN
    assert schema["properties"]["weights"]["propertyNames"]["pattern"] == DATASET_KEY_PATTERN
    assert schema["properties"]["datasets"]["propertyNames"] == {"$ref": "#/$defs/dataset_key"}
    files = schema["$defs"]["dataset"]["properties"]["files"]["propertyNames"]["pattern"]
    assert files == f"^{_PLAIN_NAME.pattern}$"
    common = (ROOT / "workflow/rules/common.smk").read_text()
    assert f'dataset="{DATASET_KEY_PATTERN[1:-1]}"' in common and f'weights="{DATASET_KEY_PATTERN[1:-1]}"' in common


def test_check_config_command_refuses_unpack_outside_the_raw_folder(tmp_path, capsys):
    """`svbop check-config` said ok to `unpack: [a.tar, /abs/victim.tar]`."""
    bad = tmp_path / "mine.yaml"
    bad.write_text(
        "run: [mine]\ndatasets:\n  mine:\n    files: {a.tar: {url: 'http://127.0.0.1:9/a.tar'}}\n"
        "    unpack: [a.tar, /abs/victim.tar]\n    format: {kind: libsvm, parts: {train: [x/a.svm]}}\n"
    )
    assert main(["check-config", str(ROOT / "config.yaml"), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("svbop: error: config: datasets.mine.unpack[1]: '/abs/victim.tar' is an absolute path"), err
    assert err.count("\n") == 1


def test_domain_files_read_from_csv_must_be_the_datasets_own():
    cfg = {"files": {"a.csv": {"url": "http://127.0.0.1:9/a.csv"}, "fams.txt": {"url": "http://127.0.0.1:9/f"}},
           "format": {"kind": "csv_text", "parts": {"all": ["a.csv"]}},
           "features": {"kind": "tfidf", "domains": {"families": "fams.txt",
                                                     "from_csv": {"files": ["a.csv", "../b.csv"], "column": "fund"}}}}
    with pytest.raises(ConfigError, match=r"datasets\.mine\.features\.domains\.from_csv\.files\[1\]"):
        check_dataset("mine", cfg)


def test_large_parameters_print_as_size_and_digest():
    """Snakemake prints a changed parameter's repr in its `reason:` line: the whole config, twice,
    for the report rules. Summarised keeps the dict and shortens what is printed."""
    import pickle

    from svbop.config import Summarised

    config = {"datasets": {f"d{i}": {"files": {"x.csv": {"url": "http://127.0.0.1/" + "x" * 200}}} for i in range(50)}}
    short = Summarised(config)
    assert short == config and isinstance(short, dict)
    assert re.fullmatch(r"\{1 keys, sha256 [0-9a-f]{12}\}", repr(short)) and len(repr(config)) > 10_000
    changed = Summarised({"datasets": {**config["datasets"], "d0": {}}})
    assert repr(changed) != repr(short)  # a change of content is still a change of the parameter
    assert repr(Summarised(dict(reversed(list(config.items()))))) == repr(short)  # key order does not matter
    assert pickle.loads(pickle.dumps(short)) == config and repr(pickle.loads(pickle.dumps(short))) == repr(short)


def test_a_later_config_files_list_replaces_the_built_in_one():
    from svbop.config import merge_configs, replace_file_lists

    base = {"datasets": {"caltech101": {"files": {"caltech-101.zip": {"url": "https://x"}}, "flat": {"C": 100}},
                         "other": {"files": {"a": {"url": "https://a"}}}}}
    user = {"datasets": {"caltech101": {"files": {"101_ObjectCategories.tar.gz": {"path": "/d/101.tar.gz"}}}}}
    merged = merge_configs(base, user)
    assert set(merged["datasets"]["caltech101"]["files"]) == {"caltech-101.zip", "101_ObjectCategories.tar.gz"}
    assert replace_file_lists(merged, [user]) == ["caltech101"]
    assert merged["datasets"]["caltech101"]["files"] == {"101_ObjectCategories.tar.gz": {"path": "/d/101.tar.gz"}}
    assert merged["datasets"]["caltech101"]["flat"] == {"C": 100}  # the rest still merges
    assert merged["datasets"]["other"]["files"] == {"a": {"url": "https://a"}}
    # two overriding files: theirs merge with each other, not with the built-in list
    more = {"datasets": {"caltech101": {"files": {"extra.txt": {"path": "/d/extra.txt"}}}}}
    merged = merge_configs(merge_configs(base, user), more)
    replace_file_lists(merged, [user, more])
    assert set(merged["datasets"]["caltech101"]["files"]) == {"101_ObjectCategories.tar.gz", "extra.txt"}


def _model_outputs_entry(split):
    return {"run": ["mine"], "datasets": {"mine": {
        "files": {"s.npy": {"path": "/s.npy"}, "y.npy": {"path": "/y.npy"}},
        "format": {"kind": "model_outputs", "outputs": "logits", "parts": {"all": {"scores": "s.npy", "labels": "y.npy"}}},
        "split": split}}}


def test_model_outputs_split_may_take_every_row_no_training_rows_are_kept():
    """Issue 42: validation 0.2 + calibration 0.2 + test 0.6 = 1 is a model's outputs split (nothing is
    trained on them); validation + calibration must still leave test rows, and the parts at most 1."""
    config = validate_config(merge_configs(BASE, _model_outputs_entry({"validation": 0.2, "calibration": 0.2, "test": 0.6})))
    check_config(config)
    for split, shown in (({"validation": 0.5, "calibration": 0.5, "test": 0.2}, "validation 0.5 + calibration 0.5 + test 0.2 = 1.2"),
                         ({"validation": 0.3, "calibration": 0.3, "test": 0.6}, "validation 0.3 + calibration 0.3 + test 0.6 = 1.2")):
        message = _error(_model_outputs_entry(split), cross=True)
        assert message == (f"config: datasets.mine.split: {shown} of the rows; a model's outputs need validation + "
                           "calibration < 1 and the parts together at most 1 (no training rows are kept)"), message
