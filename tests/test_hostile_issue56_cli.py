"""Issue 56, the command line's and the report's side: locks that blamed another process, model names
pandas reads as missing, valid files refused, check-config passing what the workflow rejects.

Every refusal is one line naming the file, the option or the process, and comes before any work.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from svbop import cli
from svbop.report.folder import hold_folder, lock_holders
from test_hostile_faults import _earlier_run, _inputs, _report  # the other hostile report tests' inputs and call

CHECKOUT = Path(__file__).resolve().parents[1]


# --- locks ---------------------------------------------------------------------------------------------------

def _holder(work: Path, out: Path, record: str | None) -> subprocess.Popen:
    """A process holding the folder's lock, whose file then records ``record`` (a reused process id)."""
    code = (f"import os, sys, time; sys.path.insert(0, {str(CHECKOUT / 'workflow')!r}); "
            f"from svbop.report.folder import hold_folder; from pathlib import Path; "
            f"fd = hold_folder(Path({str(work)!r}), Path({str(out)!r})); "
            + (f"os.ftruncate(fd, 0); os.pwrite(fd, {record!r}.encode(), 0); " if record is not None else "")
            + "print('held', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="needs Linux /proc to see who holds a lock")
@pytest.mark.parametrize("record", ["{pid}\n", "{pid} 1\n"])
def test_a_lock_whose_recorded_process_id_is_another_process_now_names_the_real_holder(tmp_path, capsys, record):
    out = tmp_path / "out"
    work = _earlier_run(out)
    unrelated = subprocess.Popen(["sleep", "120"])  # the id the lock records, given to a process that holds nothing
    try:
        holder = _holder(work, out, record.format(pid=unrelated.pid))
        try:
            assert lock_holders(work / "report.lock") == [holder.pid]
            code, line = _report(capsys, _inputs(tmp_path), out)
            assert code == 2
            assert str(holder.pid) in line and str(unrelated.pid) not in line, line
            assert line == (f"svbop: error: -o {out}: the workflow of a stopped svbop report still runs in {work} "
                            f"(process {holder.pid}); wait for it to end or stop it (kill {holder.pid}), then rerun")
        finally:
            holder.kill()
            holder.wait()
    finally:
        unrelated.kill()
        unrelated.wait()
    assert (out / "svbop_report.yaml").read_text() == "# the first run's config\n"


def test_a_running_report_is_named_by_its_own_id(tmp_path, capsys):
    out = tmp_path / "out"
    work = _earlier_run(out)
    holder = _holder(work, out, None)
    try:
        code, line = _report(capsys, _inputs(tmp_path), out)
    finally:
        holder.kill()
        holder.wait()
    assert code == 2
    assert line == (f"svbop: error: -o {out}: another svbop report is running in this folder (process {holder.pid}); "
                    "wait for it to end, or give another -o folder")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
@pytest.mark.parametrize("kind", ["fifo", "folder", "bare fifo"])
def test_a_lock_that_is_not_a_regular_file_is_refused_naming_it_without_blocking(tmp_path, capsys, kind):
    out = tmp_path / "out"
    if kind == "bare fifo":  # nothing else in the folder
        work = out / ".svbop"
        work.mkdir(parents=True)
    else:
        work = _earlier_run(out)
    lock = work / "report.lock"
    if kind.endswith("fifo"):
        os.mkfifo(lock)
    else:
        lock.mkdir()
    start = time.monotonic()
    code, line = _report(capsys, _inputs(tmp_path), out)
    assert time.monotonic() - start < 30  # never waits for a writer
    what = "a folder" if kind == "folder" else "a FIFO"
    assert code == 2
    assert line == (f"svbop: error: -o {out}: the lock {lock} is {what}, not a regular file; svbop report never "
                    "opens it: remove it, or give another -o folder")
    assert sorted(p.name for p in out.rglob("*")) == sorted(
        [".svbop", "report.lock"] + ([] if kind == "bare fifo" else ["workflow", "Snakefile", "svbop_report.yaml"]))
    with pytest.raises(ValueError, match="report.lock is " + what):
        hold_folder(work, out)


# --- model names pandas would read as missing -----------------------------------------------------------------

#: Model names svbop report takes (--name) that pandas' defaults read as missing values or numbers.
HOSTILE_MODEL_NAMES = ["null", "NA", "nan", "None", "NaN", "N.A", "1e3", "0.10", "007", "True", "inf", "1_000"]


def _guide_code() -> str:
    import re

    text = (CHECKOUT / "workflow" / "docs" / "your_model.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "choose_sets.csv" in b]
    assert len(blocks) == 1, "your_model.md shows one way to read the tables"
    return blocks[0]


def _beyond_rows(dataset: str, seed: int):
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for method, param in [("icp", "0.10"), ("conformal_aps", "0.10"), ("svbop_full", "fbeta_1"), ("top_s", "1"),
                          ("coverage_fbeta", "0.10")]:
        eps = method == "icp" or method.startswith(("conformal_", "coverage_"))
        rows.append({"dataset": dataset, "method": method, "param": param, "n_test": 300,
                     "target_coverage_pct": 90.0 if eps else np.nan, "coverage_pct": rng.uniform(85, 99),
                     "class_coverage_worst_pct": rng.uniform(40, 80), "ssc_worst_pct": rng.uniform(30, 90),
                     "singleton_pct": rng.uniform(0, 100), "empty_pct": 0.0, "mean_size": rng.uniform(1, 4),
                     "fbeta_1_pct": rng.uniform(40, 90), "calibrated": ""})
    return pd.DataFrame(rows)


def test_the_guides_reading_of_the_tables_gives_back_every_model_name_as_typed(tmp_path, monkeypatch):
    """The tables of a run whose models are named NA, null, 1e3, ... read back, as your_model.md reads them,
    with those names; the guide's join finds every chosen method."""
    from svbop.report.beyond import beyond_table, read_beyond
    from svbop.report.model import choose_sets, write_choose_sets, write_every_set
    from svbop.report.run import check_options

    names = HOSTILE_MODEL_NAMES
    for name in names:
        check_options(epsilons=[0.1], cores=1, name=name)  # each one a name svbop report takes
    paths = []
    for i, name in enumerate(names):
        path = tmp_path / "results" / name / "beyond.tsv"
        path.parent.mkdir(parents=True)
        _beyond_rows(name, i).to_csv(path, sep="\t", index=False)
        paths.append(path)
    tables = tmp_path / "my_report" / "tables"
    tables.mkdir(parents=True)
    frame = read_beyond(paths, ["fbeta:beta=1"])
    assert list(dict.fromkeys(frame["dataset"])) == names  # the report's own reading
    write_every_set(tables / "beyond_every_set.csv", frame)
    write_choose_sets(tables / "choose_sets.csv", {
        d: choose_sets(beyond_table(frame, d, ["fbeta:beta=1"]), [0.1], ["fbeta:beta=1"]) for d in names})
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(_guide_code(), "your_model.md", "exec"), scope)
    every, chosen = scope["every"], scope["chosen"]
    assert list(dict.fromkeys(every["dataset"])) == names
    assert list(dict.fromkeys(chosen["model"])) == names and list(dict.fromkeys(chosen["dataset"])) == names
    assert set(every["param"]) == {"0.10", "fbeta_1", "1"}
    assert every["coverage_pct"].dtype.kind == "f" and every["target_coverage_pct"].isna().sum() == 2 * len(names)
    joined = chosen[chosen["method"] != "none"].merge(every, on=["dataset", "method", "param"], suffixes=("", "_all"))
    assert len(joined) == (chosen["method"] != "none").sum()  # every chosen method found in the table of all
    assert list(dict.fromkeys(joined["dataset"])) == names


# --- valid files refused ---------------------------------------------------------------------------------------

GROUP_NAMES = ["site, north", 'site "b"', "plain", "tab\tbed", "line\nbreak"]


@pytest.mark.parametrize("dialect", ["pandas csv", "pandas tsv", "excel csv", "excel semicolon", "quote all",
                                     "utf-8 bom", "crlf"])
def test_group_columns_whose_header_quotes_names_are_read_as_every_csv_writer_writes_them(tmp_path, dialect):
    import csv

    import pandas as pd

    from svbop.report.run import check_inputs

    files = _inputs(tmp_path)
    rng = np.random.default_rng(1)
    A = (rng.random((300, len(GROUP_NAMES))) < 0.5).astype(int)
    A[:40] = 1  # every group has calibration rows
    frame = pd.DataFrame(A, columns=GROUP_NAMES)
    path = tmp_path / ("groups.tsv" if dialect == "pandas tsv" else "groups.csv")
    if dialect.startswith("pandas"):
        frame.to_csv(path, index=False, sep="\t" if dialect == "pandas tsv" else ",")
    else:
        quoting = csv.QUOTE_ALL if dialect == "quote all" else csv.QUOTE_MINIMAL
        with open(path, "w", newline="", encoding="utf-8-sig" if dialect == "utf-8 bom" else "utf-8") as fh:
            writer = csv.writer(fh, delimiter=";" if dialect == "excel semicolon" else ",", quoting=quoting,
                                lineterminator="\n" if dialect == "quote all" else "\r\n")
            writer.writerow(GROUP_NAMES)
            writer.writerows(A.tolist())
    assert check_inputs(test=files, group_columns={"test": str(path)}) == ("logits", 5, 300)

    from svbop.datasets.outputs import check_model_outputs

    found = check_model_outputs({"test": {"scores": files[0], "labels": files[1], "group_columns": str(path)}})
    assert found["group_columns"] == GROUP_NAMES
    assert found["group_counts"]["test"] == A.sum(axis=0).tolist()


def test_a_group_columns_record_with_too_few_values_is_named_by_its_line(tmp_path):
    from svbop.datasets.outputs import check_model_outputs

    files = _inputs(tmp_path, n=3)
    path = tmp_path / "g.csv"
    path.write_text('"site, north","b"\n1,0\n"0",1\n1\n')
    with pytest.raises(ValueError) as info:
        check_model_outputs({"test": {"scores": files[0], "labels": files[1], "group_columns": str(path)}})
    assert str(info.value) == f"{path}: line 4: 1 values but the header names 2 groups (','-separated)"
    path.write_text('a,b\n1,0\n"1,0\n0,1\n')  # a quote never closed
    with pytest.raises(ValueError, match=r"g.csv: line \d+: not a ','-separated group columns file"):
        check_model_outputs({"test": {"scores": files[0], "labels": files[1], "group_columns": str(path)}})


@pytest.mark.parametrize("saved", ["float64", "float32", "text", "text, one differs"])
def test_a_second_models_labels_saved_as_whole_floats_are_the_same_labels(tmp_path, saved):
    from svbop.report.run import check_same_rows

    y = np.random.default_rng(2).integers(0, 5, 300)
    np.save(tmp_path / "y_int.npy", y)
    if saved.startswith("float"):
        other = tmp_path / "y_float.npy"
        np.save(other, y.astype(saved))
    else:
        other = tmp_path / "y.txt"
        other.write_text("".join(f"{v}\n" for v in y))
    models = [{"name": "a", "test": (str(tmp_path / "s.npy"), str(tmp_path / "y_int.npy")), "validation": None,
               "calibration": None},
              {"name": "b", "test": (str(tmp_path / "s.npy"), str(other)), "validation": None, "calibration": None}]
    if saved == "text, one differs":
        other.write_text("".join(f"{v}.5\n" if i == 7 else f"{v}\n" for i, v in enumerate(y)))
        with pytest.raises(ValueError, match=rf"--test: {other}: row 7: label '{y[7]}.5', but .*y_int.npy \(model 'a'\) has {y[7]};"):
            check_same_rows(models)
        return
    check_same_rows(models)  # no error: the same classes
    y2 = y.astype(np.float64)
    y2[11] = 1.5
    np.save(tmp_path / "y_half.npy", y2)
    models[1]["test"] = (str(tmp_path / "s.npy"), str(tmp_path / "y_half.npy"))
    with pytest.raises(ValueError) as info:
        check_same_rows(models)
    assert str(info.value) == (f"--test: {tmp_path / 'y_half.npy'}: row 11: label 1.5 is not a whole number (labels of "
                               "dtype float64 must be integral class indices)")
    y2[11] = (y[11] + 1) % 5
    np.save(tmp_path / "y_half.npy", y2)
    with pytest.raises(ValueError, match=r"row 11: label .*, but .* has .*the models must be scored on the same rows"):
        check_same_rows(models)


# --- check-config: what the data files tell up front ------------------------------------------------------------

def _model_config(tmp_path: Path, scores: str, *, extra_format: dict | None = None, cost=(1.0, 1.0, 1.0),
                  class_names_file: str | None = None) -> Path:
    import yaml

    files = {Path(scores).name: {"path": scores}, "y.npy": {"path": str(tmp_path / "y.npy")}}
    fmt = {"kind": "model_outputs", "outputs": "logits",
           "parts": {"test": {"scores": Path(scores).name, "labels": "y.npy"}}, **(extra_format or {})}
    if class_names_file is not None:
        files["names.txt"] = {"path": class_names_file}
        fmt["class_names_file"] = "names.txt"
    config = {"run": ["mine"], "datasets": {"mine": {"files": files, "format": fmt}},
              "methods": {"risk_control": {"losses": ["class_cost"], "cost": list(cost)}} if cost else {}}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _check_config(capsys, path: Path) -> tuple[int, str]:
    code = cli.main(["check-config", str(CHECKOUT / "config.yaml"), str(path)])
    captured = capsys.readouterr()
    return code, (captured.err or captured.out).strip()


@pytest.mark.parametrize("kind", ["npy", "npz", "csv", "csv label_column", "tsv"])
def test_check_config_refuses_one_cost_per_class_for_the_wrong_number_of_classes(tmp_path, capsys, kind):
    import yaml

    rng = np.random.default_rng(0)
    L = rng.normal(size=(50, 4)).astype(np.float32)
    y = rng.integers(0, 4, 50)
    np.save(tmp_path / "y.npy", y)
    extra = None
    if kind == "npy":
        scores = tmp_path / "s.npy"
        np.save(scores, L)
    elif kind == "npz":
        scores = tmp_path / "s.npz"
        np.savez_compressed(scores, logits=L)
    else:
        import pandas as pd

        frame = pd.DataFrame(L, columns=["cat, wild", "dog", '"x"', "y"])
        scores = tmp_path / ("s.tsv" if kind == "tsv" else "s.csv")
        if kind == "csv label_column":
            frame.insert(2, "label", y)
            extra = {"label_column": "label"}
        frame.to_csv(scores, index=False, sep="\t" if kind == "tsv" else ",")
    path = _model_config(tmp_path, str(scores), extra_format=extra)
    if extra:  # the labels come from the column
        config = yaml.safe_load(path.read_text())
        del config["datasets"]["mine"]["format"]["parts"]["test"]["labels"]
        path.write_text(yaml.safe_dump(config))
    code, line = _check_config(capsys, path)
    assert code == 2
    assert line == (f"svbop: error: config: methods.risk_control.cost: 3 costs, but datasets.mine has 4 classes (the 4 "
                    f"columns of {scores}); give one cost per class, in the class order")
    path = _model_config(tmp_path, str(scores), extra_format=extra, cost=(1.0, 1.0, 1.0, 2.0))
    if extra:
        config = yaml.safe_load(path.read_text())
        del config["datasets"]["mine"]["format"]["parts"]["test"]["labels"]
        path.write_text(yaml.safe_dump(config))
    code, line = _check_config(capsys, path)
    assert code == 0 and line.startswith("config ok"), line


def test_check_config_refuses_class_names_of_the_wrong_count(tmp_path, capsys):
    np.save(tmp_path / "s.npy", np.zeros((10, 4), np.float32))
    np.save(tmp_path / "y.npy", np.zeros(10, np.int64))
    names = tmp_path / "names_src.txt"
    names.write_text("a\nb\nc\n")
    path = _model_config(tmp_path, str(tmp_path / "s.npy"), cost=None, class_names_file=str(names))
    code, line = _check_config(capsys, path)
    assert code == 2
    assert line == (f"svbop: error: config: datasets.mine.format.class_names_file: {names} names 3 classes, but the "
                    f"scores have 4 (the 4 columns of {tmp_path / 's.npy'}); one name per line, in the scores' column "
                    "order")


def test_check_config_cannot_count_classes_of_a_file_not_there_yet_and_says_ok(tmp_path, capsys):
    import yaml

    config = {"run": ["mine"], "datasets": {"mine": {
        "files": {"s.npy": {"url": "http://127.0.0.1:9/s.npy"}, "y.npy": {"url": "http://127.0.0.1:9/y.npy"}},
        "format": {"kind": "model_outputs", "outputs": "logits", "parts": {"test": {"scores": "s.npy", "labels": "y.npy"}}}}},
        "methods": {"risk_control": {"losses": ["class_cost"], "cost": [1.0, 1.0, 1.0]}}}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(config))
    code, line = _check_config(capsys, path)
    assert code == 0 and line.startswith("config ok")


def test_the_workflow_refuses_one_cost_per_class_for_the_wrong_number_of_classes_before_any_job(tmp_path):
    pytest.importorskip("snakemake", reason="snakemake is not installed (pip install -e '.[pipeline]')")
    from test_workflow import _copy_workflow, _snakemake

    rng = np.random.default_rng(0)
    np.save(tmp_path / "s.npy", rng.normal(size=(50, 4)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 4, 50))
    config = _model_config(tmp_path, str(tmp_path / "s.npy"))
    workdir = tmp_path / "work"
    workdir.mkdir()
    _copy_workflow(workdir)
    result = _snakemake("-n", "--configfile", str(config), cwd=workdir)
    text = result.stdout + result.stderr
    assert result.returncode != 0 and "Building DAG" not in text
    assert (f"config: methods.risk_control.cost: 3 costs, but datasets.mine has 4 classes (the 4 columns of "
            f"{tmp_path / 's.npy'}); give one cost per class, in the class order") in text


# --- test subprocesses bounded by a hang, not by this machine's speed --------------------------------------------

def test_a_working_subprocess_is_never_stopped_and_a_hung_one_is():
    from watched import run_watched

    busy = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 6: pass\n"  # CPU, no output
            "print('done', flush=True)")
    run = run_watched([sys.executable, "-c", busy], quiet_s=3)
    assert run.returncode == 0 and run.stdout == "done\n"
    talker = "import time\nfor i in range(4):\n    print(i, flush=True)\n    time.sleep(1.5)"  # output, no CPU
    assert run_watched([sys.executable, "-c", talker], quiet_s=3).stdout.split() == ["0", "1", "2", "3"]
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as info:
        run_watched(["sleep", "600"], quiet_s=3)  # neither: hung
    assert time.monotonic() - start < 60 and "no CPU time and no output for 3 s (hung)" in info.value.stderr


def _fixed_bounds(path: Path) -> list[str]:
    """Calls in a test file that run the pipeline (snakemake) or svbop report under a wall-clock timeout."""
    import ast

    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        if name not in ("subprocess.run", "run", "subprocess.check_output", "subprocess.check_call"):
            continue
        if not any(k.arg == "timeout" for k in node.keywords):
            continue
        text = ast.unparse(node)
        if "snakemake" in text or "'report'" in text or "bash" in text:
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_test_runs_the_pipeline_or_svbop_report_under_a_deadline_sized_for_this_machine():
    """A pipeline run stops when it hangs (tests/watched.py), never at a fixed number of seconds: a loaded machine,
    ten times slower, errored in the module fixture `added_datasets` (issue 56)."""
    found = [hit for path in sorted((CHECKOUT / "tests").glob("*.py")) for hit in _fixed_bounds(path)]
    assert found == []


def test_an_edges_csv_with_quoted_names_and_a_labels_file_with_a_byte_order_mark_are_read(tmp_path):
    from svbop.datasets.hierarchies import read_edges
    from svbop.datasets.outputs import check_model_outputs

    path = tmp_path / "edges.csv"
    with open(path, "w", newline="", encoding="utf-8-sig") as fh:  # Excel's "CSV UTF-8"
        import csv

        csv.writer(fh).writerows([["root", "cats, big"], ["cats, big", "lion"], ["cats, big", 'the "king"']])
    assert read_edges(path, sep=",") == ([("root", "cats, big"), ("cats, big", "lion"), ("cats, big", 'the "king"')],
                                         [1, 2, 3])
    files = _inputs(tmp_path, n=20)
    labels = tmp_path / "y.txt"
    labels.write_text("".join(f"{v}\n" for v in np.load(files[1])), encoding="utf-8-sig")
    assert check_model_outputs({"test": {"scores": files[0], "labels": str(labels)}})["rows"] == {"test": 20}


# --- memory of the calibration rows split off the test rows ------------------------------------------------------

def _probabilities(n: int, K: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, K)).astype(np.float32)
    y = rng.integers(0, K, n)
    Z[np.arange(n), y] += 3
    P = np.exp(Z - Z.max(axis=1, keepdims=True))
    return (P / P.sum(axis=1, keepdims=True)).astype(np.float32), y


def test_the_family_calibration_keeps_float32_rows_as_float32_and_never_copies_the_matrix(tmp_path):
    """Bayes-optimal sets with coverage (F-beta, credal) sort every calibration row once: 10^5 rows x 1,000
    classes held 800 MB as float64, and rows whose label has probability 0 were first gathered into a copy of
    the matrix.  Now float32 rows stay float32 (widened chunk by chunk, exactly) and are read where they are."""
    import tracemalloc

    from svbop.conformal.family import _RankedCalibration

    n, K = 20000, 300
    P, y = _probabilities(n, K)
    P[:25, :] = 0  # rows whose label has probability 0 (and no other mass where it is): left out, not copied
    P[np.arange(25), (y[:25] + 1) % K] = 1
    np.save(tmp_path / "P.npy", P)
    mapped = np.load(tmp_path / "P.npy", mmap_mode="r")
    labelled = np.flatnonzero(P[np.arange(n), y] != 0)
    tracemalloc.start()
    try:
        rc = _RankedCalibration(mapped, y, 1 << 20, labelled)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc.V.dtype == np.float32 and rc.V.shape == (labelled.size, K)
    assert peak < 1.15 * labelled.size * K * 4  # the sorted rows, float32, and one chunk
    order = np.argsort(-P[labelled], axis=1, kind="stable")
    assert np.array_equal(rc.V, np.take_along_axis(P[labelled], order, axis=1))
    assert np.array_equal(rc.pos, np.argmax(order == y[labelled, None], axis=1))


@pytest.mark.parametrize("score, options, epsilon", [("fbeta", {}, 0.1), ("credal", {"gamma": 0.6}, 0.3)])
def test_family_sets_calibrated_on_mapped_float32_rows_equal_those_on_float64_copies(tmp_path, score, options,
                                                                                      epsilon):
    from svbop.conformal import ConformalSetPredictor

    n, K = 4000, 60
    P, y = _probabilities(n, K, seed=3)
    P[:7, :] = 0
    P[np.arange(7), (y[:7] + 1) % K] = 1
    np.save(tmp_path / "P.npy", P)
    mapped = np.load(tmp_path / "P.npy", mmap_mode="r")
    fitted = ConformalSetPredictor(epsilon, score=score, **options).fit(mapped, y, chunk_bytes=1 << 16)
    wide = ConformalSetPredictor(epsilon, score=score, **options).fit(P.astype(np.float64), y)
    assert fitted.parameter_ == wide.parameter_ and fitted.quantile_ == wide.quantile_
    a, b = fitted.predict(mapped), wide.predict(P.astype(np.float64))
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.indptr, b.indptr)
