"""Issue 47: faults of an ``svbop report`` run and options that would fail after work started.

Links anywhere under the output folder, a second run into the same folder, a killed run's stale
Snakemake lock, Ctrl-C, a full disk, tiny or repeated ``--epsilon``, too few rows, and configs that
``check-config`` passed but the workflow could not run.  Every refusal is one line naming what the
user typed, and nothing is written before it.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from svbop import cli
from svbop.report.folder import check_links, clear_leftovers, clear_stale_locks, hold_folder

CHECKOUT = Path(__file__).resolve().parents[1]


def _inputs(tmp_path: Path, n: int = 300, K: int = 5) -> list[str]:
    rng = np.random.default_rng(0)
    L = rng.normal(size=(n, K)).astype(np.float32)
    y = rng.integers(0, K, n)
    L[np.arange(n), y] += 2
    np.save(tmp_path / "s.npy", L)
    np.save(tmp_path / "y.npy", y)
    return [str(tmp_path / "s.npy"), str(tmp_path / "y.npy")]


def _report(capsys, files, out, *more) -> tuple[int, str]:
    code = cli.main(["report", "--test", *files, "-o", str(out), *more])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""


def _earlier_run(out: Path) -> Path:
    """A folder an earlier svbop report left (its working folder, the config it ran)."""
    work = out / ".svbop"
    (work / "workflow").mkdir(parents=True)
    (work / "Snakefile").write_text("# an earlier run's copy\n")
    (out / "svbop_report.yaml").write_text("# the first run's config\n")
    return work


def _tree(folder: Path) -> dict[str, float]:
    return {str(p.relative_to(folder)): p.lstat().st_mtime for p in folder.rglob("*")}


# --- links ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", [".svbop/workflow", ".svbop/results", ".svbop/data", ".svbop/.snakemake",
                                   ".svbop/results/tables", ".svbop/workflow/rules", "tables", "figures"])
def test_a_link_anywhere_in_what_svbop_report_writes_is_refused_before_any_work(tmp_path, capsys, where):
    files = _inputs(tmp_path)
    out = tmp_path / "out"
    _earlier_run(out)
    outside = tmp_path / "outside"
    outside.mkdir()
    link = out / where
    if link.is_dir():
        link.rmdir()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    before = _tree(out)
    code, line = _report(capsys, files, out)
    assert code == 2
    assert f"{where} is a link (to {outside})" in line and "remove the link" in line or "remove it" in line
    assert list(outside.iterdir()) == []  # nothing written there
    assert _tree(out) == before  # nor here: not even svbop_report.yaml


def test_a_link_to_a_file_deep_in_the_results_is_refused(tmp_path, capsys):
    files = _inputs(tmp_path)
    out = tmp_path / "out"
    work = _earlier_run(out)
    (work / "results" / "model").mkdir(parents=True)
    victim = tmp_path / "victim.tsv"
    victim.write_text("keep\n")
    (work / "results" / "model" / "metrics.tsv").symlink_to(victim)
    code, line = _report(capsys, files, out)
    assert code == 2 and ".svbop/results/model/metrics.tsv is a link" in line
    assert victim.read_text() == "keep\n"


def test_the_links_the_workflow_makes_to_the_users_files_are_allowed(tmp_path):
    files = _inputs(tmp_path)
    out = tmp_path / "out"
    work = _earlier_run(out)
    for part in ("downloads", "raw"):
        (work / "data" / "model" / part).mkdir(parents=True)
    (work / "data" / "model" / "downloads" / "test_scores.npy").symlink_to(files[0])
    (work / "data" / "model" / "raw" / "test_scores.npy").symlink_to("../downloads/test_scores.npy")
    check_links(out, ("tables", "figures", ".svbop"), ".svbop")  # no error
    (work / "data" / "model" / "downloads" / "more").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(ValueError, match="downloads/more is a link"):  # a folder: refused
        check_links(out, (".svbop",), ".svbop")


# --- a second run, a killed run, Ctrl-C, a full disk -------------------------------------------------

def test_a_second_run_into_the_same_folder_is_refused_before_it_writes_anything(tmp_path, capsys):
    files = _inputs(tmp_path)
    out = tmp_path / "out"
    work = _earlier_run(out)
    fd = hold_folder(work, out)  # the first run, still running
    try:
        before = _tree(out)
        code, line = _report(capsys, files, out)
    finally:
        os.close(fd)
    assert code == 2
    assert line == (f"svbop: error: -o {out}: another svbop report is running in this folder (process {os.getpid()}); "
                    "wait for it to end, or give another -o folder")
    assert (out / "svbop_report.yaml").read_text() == "# the first run's config\n"
    assert _tree(out) == before


def test_a_killed_runs_snakemake_lock_is_cleared_when_no_process_works_in_the_folder(tmp_path):
    out = tmp_path / "out"
    work = _earlier_run(out)
    locks = work / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text(f"{work}/data/model/dataset.npz\n")
    (locks / "0.output.lock").write_text(f"{work}/results/report.html\n")
    busy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=work)
    try:
        time.sleep(0.2)
        with pytest.raises(ValueError) as info:  # its workflow still runs: named, with the fix
            clear_stale_locks(work, out)
        assert str(info.value) == (f"-o {out}: process {busy.pid} is still working in {work} (the workflow of an "
                                   f"earlier run that was stopped); wait for it to end or stop it (kill {busy.pid}), "
                                   "then rerun")
        assert (locks / "0.input.lock").exists()
    finally:
        busy.kill()
        busy.wait()
    assert clear_stale_locks(work, out) is True  # as snakemake --unlock does
    assert not locks.exists()
    assert clear_stale_locks(work, out) is False


def test_the_lock_is_dropped_when_its_holder_dies(tmp_path):
    out = tmp_path / "out"
    work = _earlier_run(out)
    code = (f"import os, sys; sys.path.insert(0, {str(CHECKOUT / 'workflow')!r}); "
            f"from svbop.report.folder import hold_folder; from pathlib import Path; "
            f"hold_folder(Path({str(work)!r}), Path({str(out)!r})); print('held', flush=True); os.kill(os.getpid(), 9)")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert child.stdout.strip() == "held" and child.returncode == -9
    os.close(hold_folder(work, out))  # kill -9 left no lock behind


def test_leftovers_of_an_interrupted_run_are_removed_and_nothing_else(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for name in (".svbop_report.log.ab3_x9zq", ".report.html.k2j4h5g6", ".notes.txt.abcdefgh", "svbop_report.log"):
        (out / name).write_text("x")
    assert clear_leftovers(out, {"report.html", "svbop_report.log", "svbop_report.yaml"}) == 2
    assert sorted(p.name for p in out.iterdir()) == [".notes.txt.abcdefgh", "svbop_report.log"]


def test_a_full_disk_is_one_line_and_leaves_no_temporary_file(tmp_path, capsys, monkeypatch):
    import svbop.report.run as run

    files = _inputs(tmp_path)
    out = tmp_path / "out"

    def full(src, dst):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))

    monkeypatch.setattr(run, "_sync", full)
    code, line = _report(capsys, files, out)
    assert code == 2
    assert line.startswith("svbop: error: ") and "No space left on device; free some space and rerun" in line
    assert [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".svbop"] == []


def test_ctrl_c_is_one_line_exit_130_and_leaves_no_temporary_file(tmp_path):
    files = _inputs(tmp_path)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT / "workflow")}
    proc = subprocess.Popen([sys.executable, "-m", "svbop", "report", "--test", *files, "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    deadline = time.monotonic() + 1200  # ten times what it takes here, under load
    while time.monotonic() < deadline and proc.poll() is None and not list(out.glob(".svbop_report.log.*")):
        time.sleep(0.2)
    time.sleep(2)  # Snakemake is starting its jobs
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
    _, err = proc.communicate(timeout=1200)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "svbop: interrupted; rerun the same command to go on"
    assert [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".svbop"] == []
    assert (out / "svbop_report.log").is_file()  # what Snakemake said is kept


# --- options and rows ---------------------------------------------------------------------------------

@pytest.mark.parametrize("eps, says", [
    (["1e-300"], "--epsilon: 1e-300 is below 1e-09: a finite conformal threshold at this level needs at least "
                 "1/epsilon - 1 = 1e+300 calibration rows"),
    (["5e-324"], "--epsilon: 5e-324 is below 1e-09"),
    (["0.1", "0.1"], "--epsilon: 0.1 is given twice"),
    (["0.001"], "--epsilon 0.001: a finite conformal threshold at this level needs at least 999 calibration rows "
                "(1/epsilon - 1), and the 300 test rows give at most 150 (half of them); give --epsilon >= 0.00662"),
])
def test_epsilon_is_checked_up_front_naming_the_option(tmp_path, capsys, eps, says):
    files = _inputs(tmp_path)
    out = tmp_path / "out"
    code, line = _report(capsys, files, out, *[a for e in eps for a in ("--epsilon", e)])
    assert code == 2 and says in line, line
    assert "methods.epsilon" not in line and "icp_epsilon" not in line
    assert not out.exists()


def test_too_few_rows_are_refused_up_front_with_the_rows_each_part_needs(tmp_path, capsys):
    files = _inputs(tmp_path, n=3)
    out = tmp_path / "out"
    code, line = _report(capsys, files, out)
    assert code == 2
    assert line == ("svbop: error: --test: 3 rows are too few to split off validation and calibration rows: the parts "
                    "need at least validation 1 (the temperature and the threshold baseline are fitted on it), "
                    "calibration 9 (one finite conformal threshold at epsilon 0.1, the default), test 1, so at least "
                    "18 test rows; give more rows, or --validation and --calibration")
    assert ".svbop" not in line and not out.exists()
    (tmp_path / "cal").mkdir()
    cal = _inputs(tmp_path / "cal", n=5)
    code, line = _report(capsys, _inputs(tmp_path, n=300), out, "--calibration", *cal)
    assert code == 2 and "--calibration: 5 rows, but a finite conformal threshold at epsilon 0.1" in line


def test_the_auto_share_takes_at_least_the_rows_one_finite_threshold_needs():
    from svbop.datasets.calibration_share import auto_calibration_rows

    y = np.arange(40) % 20  # 20 classes of 2 rows: no class reaches 9 rows at any share
    share = auto_calibration_rows(y, np.full(40, "test"), {"validation": 0.1}, rows_per_class=9)
    assert share["rows"] == 9  # was 4 (10 %): an infinite marginal threshold


@pytest.mark.parametrize("yaml_text, key", [
    ("seed: 2.0\n", "config: seed: expected integer, got 2.0"),
    ("datasets: {digits: {split: {seed: 3.0}}}\n", "config: datasets.digits.split.seed: expected integer"),
    ("datasets: {digits: {split: {calibration: 5.0}}}\n", "config: datasets.digits.split.calibration: expected a "
                                                         "value < 1, got 5.0 (an integer is written without a "
                                                         "decimal point: 5, not 5.0)"),
    ("timing: {repeats: 2.0}\n", "config: timing.repeats: expected integer"),
    ("methods: {epsilon: [1.0e-300]}\n", "config: methods.epsilon[0]: 1e-300 is below 1e-09"),
    ("baselines: {icp_epsilon: [0.1, 1.0e-12]}\n", "config: baselines.icp_epsilon[1]: 1e-12 is below 1e-09"),
])
def test_check_config_refuses_what_the_workflow_cannot_run(tmp_path, capsys, yaml_text, key):
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    code = cli.main(["check-config", str(CHECKOUT / "config.yaml"), str(path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and key in err, err


# --- float16 probabilities ----------------------------------------------------------------------------

def _float16_probabilities(n=400, K=10):
    rng = np.random.default_rng(3)
    P32 = rng.dirichlet(np.full(K, 0.3), size=n).astype(np.float32)  # a float32 softmax, stored as float16
    P16 = P32.astype(np.float16)
    assert np.abs(P16.astype(np.float64).sum(axis=1) - 1).max() > 1e-6  # float16 cannot hold 1e-6
    return P16, rng.integers(0, K, n)


def test_float16_probabilities_are_detected_and_accepted(tmp_path):
    from svbop.datasets.outputs import check_model_outputs, detect_outputs, read_model_outputs, sum_tolerance

    P16, y = _float16_probabilities()
    assert detect_outputs(P16) == "probabilities"  # was "logits": the page built from softmax(probabilities)
    np.save(tmp_path / "p.npy", P16)
    np.save(tmp_path / "y.npy", y)
    parts = {"test": {"scores": str(tmp_path / "p.npy"), "labels": str(tmp_path / "y.npy")}}
    assert check_model_outputs(parts, outputs="auto")["outputs"] == "probabilities"
    check_model_outputs(parts, outputs="probabilities")  # no "renormalise to 1e-6"
    ds = read_model_outputs(None, parts, outputs="probabilities")
    np.testing.assert_allclose(ds.X.sum(axis=1), 1.0, atol=1e-12)  # rows renormalised when read
    assert sum_tolerance(np.float32, 10) == sum_tolerance(np.float64, 10) == 1e-6
    # logits in float16 stay logits, and rows far from 1 are still refused, naming the dtype's tolerance
    assert detect_outputs((P16 * 3).astype(np.float16)) == "logits"
    bad = P16.copy()
    bad[5] *= np.float16(1.01)
    np.save(tmp_path / "p.npy", bad)
    with pytest.raises(ValueError, match=r"row 5 sums to .*not 1 \(within 0\.00195, for float16 values\)"):
        check_model_outputs(parts, outputs="probabilities")


# --- tables a spreadsheet opens -----------------------------------------------------------------------

HOSTILE_NAMES = ["=SUM(1+2)", "+cmd", "-1+2", "@A1", "\tx", "\rx", "'quoted", "plain", "-0.5", "a=b"]


def test_every_table_writer_escapes_cells_a_spreadsheet_would_run(tmp_path):
    import csv

    import pandas as pd

    from svbop.io import escape_cell, unescape_cell, write_tsv
    from svbop.report.model import write_choose_sets
    from svbop.report.tables import write_table

    escaped = ["'=SUM(1+2)", "'+cmd", "'-1+2", "'@A1", "'\tx", "'\rx", "''quoted", "plain", "-0.5", "a=b"]
    assert [escape_cell(n) for n in HOSTILE_NAMES] == escaped
    assert [unescape_cell(escape_cell(n)) for n in HOSTILE_NAMES] == HOSTILE_NAMES
    names = [n for n in HOSTILE_NAMES if "\r" not in n]  # a CR inside a cell is a line break to pandas' reader
    escaped = [escape_cell(n) for n in names]
    frame = pd.DataFrame({"name": names, "coverage": np.linspace(0, 1, len(names))})
    for suffix, sep in ((".csv", ","), (".tsv", "\t")):
        write_table(frame.set_index("name"), tmp_path / f"t{suffix}")
        with open(tmp_path / f"t{suffix}", newline="") as fh:
            cells = [row[0] for row in csv.reader(fh, delimiter=sep)][1:]
        assert cells == escaped
    write_tsv(tmp_path / "m.tsv", [{"class": n, "n": 1} for n in names])
    with open(tmp_path / "m.tsv", newline="") as fh:
        assert [row[0] for row in csv.reader(fh, delimiter="\t")][1:] == escaped
    from svbop.report.model import CHOOSE_COLUMNS

    numbers = {"rank", "n_test", "coverage_pct", "coverage_low_pct", "coverage_high_pct", "mean_set_size",
               "utility_pct", "guaranteed_pct"}
    goal = pd.DataFrame({c: [1] if c in numbers else ["=HYPERLINK(\"x\")"] for c in CHOOSE_COLUMNS})
    write_choose_sets(tmp_path / "c.csv", {"=m": goal})
    text = (tmp_path / "c.csv").read_text()
    assert "\n=" not in text and ",=" not in text


def test_the_class_coverage_table_reads_back_the_names_as_written(tmp_path):
    import pandas as pd

    from svbop.io import escape_frame, unescape_frame

    names = [n for n in HOSTILE_NAMES if "\r" not in n]
    classes = pd.DataFrame({"class": range(len(names)), "name": names})
    escape_frame(classes).to_csv(tmp_path / "c.tsv", sep="\t", index=False)
    back = unescape_frame(pd.read_csv(tmp_path / "c.tsv", sep="\t", dtype={"name": str}, keep_default_na=False),
                          ["name"])
    assert back["name"].tolist() == names


@pytest.mark.slow
def test_a_run_killed_with_its_workflow_leaves_a_folder_the_next_run_uses(tmp_path):
    """kill -9 of svbop report and its workflow mid-run (a stale Snakemake lock and a temporary log
    left), then a rerun: it clears them and finishes; a class named =SUM(1+2) is escaped in the table;
    no cache is written to ~/.cache."""
    files = _inputs(tmp_path, n=400)
    names = tmp_path / "names.txt"
    names.write_text("=SUM(1+2)\n+b\nc\nd\ne\n")
    out = tmp_path / "out"
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT / "workflow"), "HOME": str(home)}
    env.pop("XDG_CACHE_HOME", None)
    env.pop("MPLCONFIGDIR", None)
    argv = [sys.executable, "-m", "svbop", "report", "--test", *files, "--class-names", str(names), "-o", str(out)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / ".svbop" / ".snakemake" / "locks").is_dir():
        time.sleep(0.1)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (out / ".svbop" / ".snakemake" / "locks").is_dir()  # what a killed run leaves
    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "cleared the Snakemake lock that a stopped run left" in again.stderr
    assert [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".svbop"] == []
    table = (out / "tables" / "class_coverage_model.tsv").read_text().splitlines()
    assert any("\t'=SUM(1+2)\t" in f"\t{line}\t" for line in table) and "\t=SUM" not in "\n".join(table)
    assert not (home / ".cache").exists() and (out / ".svbop" / ".cache").is_dir()


def test_a_workflow_failure_names_the_working_folders_paths_whole_and_a_full_disks_fix(tmp_path):
    from svbop.report.run import _failure_reason

    work = tmp_path / "out" / ".svbop"
    (work / "results" / "logs").mkdir(parents=True)
    (work / "results" / "logs" / "score.log").write_text(
        "Traceback ...\nOSError: [Errno 28] No space left on device: 'results/model/scores/flat.npz'\n")
    log = tmp_path / "out" / "svbop_report.log"
    log.write_text("Error in rule score_flat:\n    jobid: 3\n    log: results/logs/score.log (check log file(s) for "
                   "error details)\nthe run failed; results/report.partial.html shows it\n")
    reason = _failure_reason(log, work)
    assert reason == (f": OSError: [Errno 28] No space left on device: '{work}/results/model/scores/flat.npz'; "
                      "free some space and rerun (finished steps are kept)")


def test_a_hard_link_in_the_results_is_refused(tmp_path, capsys):
    files = _inputs(tmp_path)
    out = tmp_path / "out"
    work = _earlier_run(out)
    (work / "results").mkdir()
    victim = tmp_path / "victim.tsv"
    victim.write_text("keep\n")
    os.link(victim, work / "results" / "metrics.tsv")
    code, line = _report(capsys, files, out)
    assert code == 2 and ".svbop/results/metrics.tsv is a hard link (2 names for one file)" in line
    assert victim.read_text() == "keep\n"


def test_a_killed_runs_workflow_that_still_holds_the_folder_is_named(tmp_path):
    """kill -9 of svbop report alone: its workflow holds the lock on; the next run names that process."""
    out = tmp_path / "out"
    work = _earlier_run(out)
    code = (f"import os, subprocess, sys; sys.path.insert(0, {str(CHECKOUT / 'workflow')!r}); "
            f"from svbop.report.folder import hold_folder; from pathlib import Path; "
            f"fd = hold_folder(Path({str(work)!r}), Path({str(out)!r})); "
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], cwd={str(work)!r}, "
            f"pass_fds=(fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid, flush=True); "
            f"os.kill(os.getpid(), 9)")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    workflow = int(child.stdout.strip())
    try:
        with pytest.raises(ValueError) as info:
            hold_folder(work, out)
        assert str(info.value) == (f"-o {out}: the workflow of a stopped svbop report still runs in {work} (process "
                                   f"{workflow}); wait for it to end or stop it (kill {workflow}), then rerun")
    finally:
        os.kill(workflow, signal.SIGKILL)
    for _ in range(100):  # the kernel drops the lock with its last holder
        try:
            os.close(hold_folder(work, out))
            break
        except ValueError:
            time.sleep(0.1)
    else:
        raise AssertionError("the lock outlived its holders")
