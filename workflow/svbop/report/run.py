"""``svbop report``: the pipeline's report for a model's outputs, without writing YAML.

The command checks every option and reads every input file in its own process first (a refusal is
one line naming the option, or the user's own file and row, and nothing is written); then it writes
a config with one ``model_outputs`` dataset made of the given files, runs the project's own
Snakemake workflow on it, and puts the page at the top of the output folder.  It is the pipeline's
page, made by the pipeline's rules: there is no second report implementation, so ``svbop report``
and ``snakemake --configfile <that config>`` give the same tables for the same files.

The output folder holds what the user reads::

    OUT/report.html          the page
    OUT/tables/, figures/    its tables (CSV, LaTeX) and figures
    OUT/svbop_report.log     Snakemake's output
    OUT/svbop_report.yaml    the config that was run
    OUT/.svbop/              the workflow's working folder: a copy of its files (from the checkout, or
                             from the wheel, svbop/_resources.py), data/, results/, .snakemake/

Nothing is written outside ``OUT``, no link is made or written through, and a second run in the same
folder reuses the work (only what changed reruns).  The input files are read, never modified.
Faults (:mod:`svbop.report.folder`): a link anywhere in what is written is refused before any work; a
run holds ``OUT/.svbop/report.lock`` before it writes anything, so a second run into the folder is
refused first; a killed run's Snakemake lock is cleared when no process works in ``.svbop`` any more;
Ctrl-C stops the workflow and leaves no temporary file (exit status 130); the workflow's caches stay
in ``OUT/.svbop/.cache``.  Rows too few for the split's parts are refused up front
(:mod:`svbop.report.rows`).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .._resources import WORKFLOW_FILES, workflow_root
from .folder import LOCK_NAME, check_links, check_lock_file, clear_leftovers, clear_stale_locks, hold_folder
from .rows import check_part_rows

__all__ = ["WORKFLOW_FILES", "OUTPUT_NAMES", "WORK_DIR", "check_inputs", "check_options", "detect_outputs",
           "check_same_rows", "report_config", "report_models", "run_report", "workflow_root"]

#: The workflow's working folder inside the output folder.
WORK_DIR = ".svbop"
#: What svbop report writes at the top of the output folder (nothing else is touched there).
OUTPUT_NAMES = ("report.html", "tables", "figures", "svbop_report.log", "svbop_report.yaml", WORK_DIR)
#: Conformal and coverage-guaranteed sets the command adds (the quickstart's choice).
#: APS and RAPS are randomised (coverage close to 1 - epsilon, as practitioners know them); clustered
#: class-conditional LAC beside class-conditional LAC (usable with few calibration rows per class).
DEFAULT_METHODS = {"conformal": ["aps", "aps_top1", "raps"], "class_conditional": ["lac"], "clustered": ["lac"],
                   "coverage": ["fbeta", "credal"]}
#: With ``--weights``: weighted conformal sets under covariate shift (methods.weighted.scores).
WEIGHTED_METHODS = ("lac", "aps")
#: With ``--group-columns``: conformal sets covering in every group (methods.conditional.scores).
CONDITIONAL_METHODS = ("lac", "aps")
#: With ``--label-shift``: conformal sets under label shift, class weights estimated from the test rows
#: (methods.label_shift.scores).
LABEL_SHIFT_METHODS = ("lac", "aps")
#: svbop report's options of per-row files beside the scores, by the parts' key; the test part's is the bare name.
ROW_OPTIONS = {"weights": "weights", "group_columns": "group-columns"}


def detect_outputs(path: str | os.PathLike) -> str:
    """``"probabilities"`` when every row of the scores file is non-negative and sums to 1 within
    :data:`svbop.datasets.outputs.SUM_TOLERANCE`, else ``"logits"``."""
    from ..datasets.outputs import _read_scores, detect_outputs as detect

    S, *_ = _read_scores(Path(path), scores_key=None, header=True, sep=None, label_column=None)
    return detect(S)


def _file_entry(files: dict, flag: str, name: str, path: str | os.PathLike) -> str:
    src = Path(path).expanduser()
    _regular_file(flag, path)
    files[name] = {"path": str(src.resolve())}
    return name


def report_config(
    *,
    test: Sequence[str],
    validation: Sequence[str] | None = None,
    calibration: Sequence[str] | None = None,
    groups: dict[str, str] | None = None,
    weights: dict[str, str] | None = None,
    group_columns: dict[str, str] | None = None,
    outputs: str = "logits",
    calibrate: str = "temperature",
    class_names: str | None = None,
    hierarchy: str | None = None,
    hierarchy_format: str = "edges",
    epsilons: Sequence[float] = (0.1,),
    name: str = "model",
    title: str | None = None,
    repeats: int = 3,
    label_shift: str | None = None,
) -> dict:
    """The workflow config of one ``model_outputs`` dataset made of these files.

    ``test``, ``validation`` and ``calibration`` are ``(scores, labels)`` pairs of file paths;
    the parts not given are split off the test rows (a warning says so): the validation rows by the
    schema's default fraction, the calibration rows by ``split.calibration: auto``
    (:mod:`svbop.datasets.calibration_share`: enough rows for one conformal threshold per class).  ``groups`` maps each given part to a file of one group per row (the parts' ``groups:``
    files, :mod:`svbop.datasets.outputs`): Mondrian LAC by that group is added, and the report shows
    each group's coverage.  ``weights`` and ``group_columns`` map each given part to a file of one
    likelihood ratio per row, or of group indicator columns (the parts' ``weights:`` and
    ``group_columns:`` files): weighted conformal sets (:data:`WEIGHTED_METHODS`) and conditional
    ones (:data:`CONDITIONAL_METHODS`) are added, and the page checks their promises.  Conformal sets (randomised APS and RAPS, class-conditional and clustered LAC), Bayes-optimal sets with a coverage
    guarantee (F-beta, credal) at each ``epsilons``, Mondrian LAC by the predicted class and, with a
    ``hierarchy``, sets restricted to at most 1 and 3 of its nodes (Bayes-optimal and conformal) and
    Mondrian LAC by the top-level node are added to the paper's methods.
    """
    files: dict[str, dict] = {}
    parts = {}
    groups = dict(groups or {})
    _check_group_flags(groups, validation=validation, calibration=calibration, test=test)
    rows = {"weights": dict(weights or {}), "group_columns": dict(group_columns or {})}
    for key, given in rows.items():
        _check_row_flags(key, given, validation=validation, calibration=calibration, test=test)
    for part, pair in (("validation", validation), ("calibration", calibration), ("test", test)):
        if pair is None:
            continue
        scores, labels = pair
        parts[part] = {"scores": _file_entry(files, f"--{part}", f"{part}_scores{_suffix(scores)}", scores),
                       "labels": _file_entry(files, f"--{part}", f"{part}_labels{_suffix(labels)}", labels)}
        if part in groups:
            parts[part]["groups"] = _file_entry(files, f"--{part}-groups", f"{part}_groups{_suffix(groups[part])}",
                                                groups[part])
        for key, given in rows.items():  # weights, group columns: each part's rows keep their own
            if part in given:
                parts[part][key] = _file_entry(files, row_flag(key, part), f"{part}_{key}{_suffix(given[part])}",
                                               given[part])
    fmt: dict = {"kind": "model_outputs", "outputs": outputs, "parts": parts}
    entry: dict = {"title": title or f"{name} (model outputs)", "files": files, "format": fmt, "calibrate": calibrate}
    if calibration is None:  # split off the test rows: as many as one threshold per class needs (schema: auto)
        entry["split"] = {"calibration": "auto"}
    if class_names is not None:
        fmt["class_names_file"] = _file_entry(files, "--class-names", f"class_names{_suffix(class_names)}", class_names)
    methods = {**DEFAULT_METHODS, "epsilon": [float(e) for e in epsilons],
               "mondrian": {"by": ["predicted_class"]}}  # coverage within each predicted class too
    if hierarchy is not None:  # sets restricted to its nodes (Bayes-optimal and conformal), groups by top node
        entry["hierarchy"] = {"format": hierarchy_format,
                              "file": _file_entry(files, "--hierarchy", f"hierarchy_file{_suffix(hierarchy)}", hierarchy)}
        methods["hierarchical"] = {"max_nodes": [1, 3]}
        methods["conformal"] = [*DEFAULT_METHODS["conformal"], "hierarchical"]
        methods["mondrian"] = {"by": ["predicted_class", "predicted_top_node"]}
    if groups:  # coverage within each of the user's groups too
        methods["mondrian"] = {"by": [*methods["mondrian"]["by"], "group_column"]}
    if rows["weights"]:  # covariate shift: weighted conformal sets, their coverage under the weights
        methods["weighted"] = {"scores": list(WEIGHTED_METHODS)}
    if rows["group_columns"]:  # overlapping groups: sets covering in every group, each group's coverage
        methods["conditional"] = {"scores": list(CONDITIONAL_METHODS)}
    if label_shift is not None:  # label shift: class weights estimated from the test rows (bbse or em)
        methods["label_shift"] = {"estimator": label_shift, "scores": list(LABEL_SHIFT_METHODS)}
    return {
        "run": [name],
        "timing": {"repeats": int(repeats)},
        "baselines": {"icp_epsilon": [float(e) for e in epsilons]},
        "methods": methods,
        # no Table 4 scaling figure (svbop's own benchmark of the paper's algorithms, not this model's)
        "report": {"title": f"Set-valued predictions of {title or (name if name != 'model' else Path(test[0]).name)}",
                   "illustrations": {}, "scaling": None},
        "datasets": {name: entry},
    }


def _suffix(path) -> str:
    return "".join(Path(path).suffixes[-1:]).lower()


def _check_part_files(given: dict[str, str], flag, what: str, own: str, pairs: dict) -> None:
    """Per-part files (``given``: part -> file) only for the parts given, and then for every part
    given (``pairs``: part -> files or None); ``flag(part)`` names a part's option, ``what`` the files."""
    parts = [part for part in ("validation", "calibration", "test") if pairs.get(part) is not None]
    stray = [part for part in given if part not in parts]
    if stray:
        raise ValueError(f"{flag(stray[0])}: there is no --{stray[0]} ({what} are given for the parts given)")
    if given and len(given) != len(parts):
        missing = [part for part in parts if part not in given]
        raise ValueError(f"{flag(missing[0])}: missing; with {what} for one part, every part given needs them{own} "
                         f"(given: {', '.join('--' + p for p in parts)})")


def _check_group_flags(groups: dict[str, str], **pairs) -> None:
    """Groups only for parts given, and then for every part given (``pairs``: part -> files or None)."""
    _check_part_files(groups, lambda part: f"--{part}-groups", "groups", "", pairs)


def row_flag(key: str, part: str) -> str:
    """The option of a part's per-row file: ``--weights`` (the test rows), ``--calibration-weights``, ..."""
    return f"--{ROW_OPTIONS[key]}" if part == "test" else f"--{part}-{ROW_OPTIONS[key]}"


def _check_row_flags(key: str, given: dict[str, str], **pairs) -> None:
    """Weights or group columns (``key``) only for parts given, and then for every part given, as groups."""
    _check_part_files(given, lambda part: row_flag(key, part), ROW_OPTIONS[key], ", each for its own rows", pairs)


# --- checks before any work -----------------------------------------------------------------------

def check_options(*, epsilons: Sequence[float] | None, cores: int, name: str) -> None:
    """Refuse options the workflow would fail on, in one line naming the option.

    Raises
    ------
    ValueError
        ``--epsilon`` outside (0, 1) (NaN included), ``--cores`` below 1, a ``--name`` that is not a
        plain word (it names folders and files).
    """
    from ..config import MIN_EPSILON

    seen = set()
    for e in epsilons or ():
        if not (isinstance(e, (int, float)) and math.isfinite(e) and 0 < e < 1):
            raise ValueError(f"--epsilon: {e!r} is not in (0, 1) (the significance level: 0.1 asks for 90 % coverage)")
        if e < MIN_EPSILON:
            raise ValueError(f"--epsilon: {e!r} is below {MIN_EPSILON:g}: a finite conformal threshold at this level "
                             f"needs at least 1/epsilon - 1 = {1 / e - 1:.3g} calibration "
                             "rows, more than any data set holds")
        if e in seen:
            raise ValueError(f"--epsilon: {e!r} is given twice; give each level once")
        seen.add(e)
    if not isinstance(cores, int) or isinstance(cores, bool) or cores < 1:
        raise ValueError(f"--cores: {cores!r}; expected a whole number >= 1")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", str(name)) or str(name).endswith("."):
        raise ValueError(f"--name: {name!r}; expected a word of letters, digits, '_', '-', '.' (it names the "
                         "dataset's folders), at most 64 characters")


def check_inputs(
    *,
    test: Sequence[str],
    validation: Sequence[str] | None = None,
    calibration: Sequence[str] | None = None,
    groups: dict[str, str] | None = None,
    weights: dict[str, str] | None = None,
    group_columns: dict[str, str] | None = None,
    outputs: str = "auto",
    class_names: str | None = None,
    hierarchy: str | None = None,
    hierarchy_format: str = "edges",
    epsilons: Sequence[float] | None = None,
) -> tuple[str, int, int]:
    """Read and check every input file completely, as the workflow will; return ``(outputs, K, n_rows)``.

    ``epsilons`` (the ``--epsilon`` levels; None: the default 0.1) also checks that the rows can be
    split into parts with the rows each needs (:func:`svbop.report.rows.check_part_rows`).

    ``outputs="auto"`` is decided from the test scores (probabilities when every row is
    non-negative and sums to 1).  Each path is first refused, naming its flag, unless it is a regular
    file; scores, labels, groups and class names are then checked by
    :func:`svbop.datasets.outputs.check_model_outputs` (shapes, dtypes, finiteness, row sums of
    probabilities, labels within the classes, agreeing row counts, the number of names; no float64
    copy of the scores), the hierarchy by :func:`svbop.datasets.hierarchies.read_hierarchy`.

    Raises
    ------
    ValueError
        One line naming the user's own file (and the row, line or column).
    """
    from ..datasets.outputs import check_model_outputs

    parts = {}
    for part, pair in (("validation", validation), ("calibration", calibration), ("test", test)):
        if pair is None:
            continue
        for flag, path in ((f"--{part}", pair[0]), (f"--{part}", pair[1]),
                           *(((f"--{part}-groups", groups[part]),) if groups and part in groups else ())):
            _regular_file(flag, path)
        parts[part] = {"scores": str(pair[0]), "labels": str(pair[1])}
        if groups and part in groups:
            parts[part]["groups"] = str(groups[part])
        for key, given in (("weights", weights), ("group_columns", group_columns)):
            if given and part in given:
                _regular_file(row_flag(key, part), given[part])
                parts[part][key] = str(given[part])
    if class_names is not None:
        _regular_file("--class-names", class_names)
    if hierarchy is not None:
        _regular_file("--hierarchy", hierarchy)
    try:
        found = check_model_outputs(parts, outputs=outputs, class_names_file=class_names)
    except ValueError as exc:  # name the option of a weights or group columns file
        message = str(exc)
        for part, spec in parts.items():
            for key in ("weights", "group_columns"):
                if key in spec and message.startswith(f"{spec[key]}:"):
                    raise ValueError(f"{row_flag(key, part)}: {message}") from None
        raise
    counts = found.get("group_counts") or {}
    source = "calibration" if "calibration" in counts else "test"  # calibration rows: given, or split off --test
    for j, name in enumerate(found.get("group_columns") or []):
        if source in counts and counts[source][j] == 0:
            where = ("has no calibration row" if source == "calibration"
                     else "has no --test row, so the calibration rows split off them have none either")
            raise ValueError(f"{row_flag('group_columns', source)}: {group_columns[source]}: group {name!r} {where}; "
                             "coverage in a group needs calibration rows in it (drop the column, or give it rows)")
    K = int(found["n_classes"])
    check_part_rows(found["rows"], epsilons=epsilons)
    if hierarchy is not None:
        from ..datasets.hierarchies import read_hierarchy

        names = found["class_names"] or [str(c) for c in range(K)]
        read_hierarchy(None, {"format": hierarchy_format, "file": str(hierarchy)}, list(names), where="--hierarchy")
    return str(found["outputs"]), K, int(sum(found["rows"].values()))


def _regular_file(flag: str, path) -> None:
    """A regular file (a FIFO, a device or a folder would hang or read without end)."""
    import stat

    from .._npz import file_kind

    p = Path(path).expanduser()
    try:
        mode = p.stat().st_mode
    except OSError as exc:
        raise ValueError(f"{flag}: {path}: {(exc.strerror or 'cannot be read').lower()}") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{flag}: {path}: is {file_kind(mode)}, not a regular file; give the file itself")


def _check_folder(out: Path, root: Path) -> None:
    """Refuse an output folder svbop report must not write into; writes nothing.

    The folder may be new, or hold anything of the user's: svbop report writes only the names of
    :data:`OUTPUT_NAMES`, so those must be absent or its own (from an earlier run, marked by the
    working folder ``.svbop``), and never links.
    """
    if out.is_symlink() and not out.is_dir():
        raise ValueError(f"-o {out}: is a link to {os.readlink(out)}, not a folder")
    if out.exists() and not out.is_dir():
        raise ValueError(f"-o {out}: exists and is not a folder")
    resolved = out.resolve()
    if resolved == root.resolve() or root.resolve() in resolved.parents and (resolved / "Snakefile").exists():
        raise ValueError(f"-o {out}: is the project's checkout; give a folder of its own")
    if not out.exists():
        return
    for name in OUTPUT_NAMES:
        if (out / name).is_symlink():
            raise ValueError(f"-o {out}: {name} is a link (to {os.readlink(out / name)}); svbop report writes only "
                             "real files inside the folder: remove the link or choose another folder")
    if (out / WORK_DIR).is_dir() and not (out / WORK_DIR).is_symlink():
        check_lock_file(out / WORK_DIR, out)  # a FIFO or a device in its place: named, never opened
    ours = ((out / WORK_DIR / "Snakefile").is_file() or (out / WORK_DIR / LOCK_NAME).is_file()
            or (out / WORK_DIR / "top_k.json").is_file())  # a page about top-k outputs (svbop.report.top_k)
    if not ours:
        taken = [name for name in OUTPUT_NAMES if (out / name).exists()]
        if taken:
            raise ValueError(f"-o {out}: already holds {', '.join(taken)}, not svbop report's; choose a new or "
                             "empty folder")
    elif not (out / WORK_DIR).is_dir():
        raise ValueError(f"-o {out}: {WORK_DIR} is not a folder")
    check_links(out, OUTPUT_NAMES, WORK_DIR)  # anywhere in what is written: nothing goes through a link


# --- the run ---------------------------------------------------------------------------------------

def _mkstemp(folder: Path, name: str) -> str:
    """A temporary file beside ``folder/name``, readable as a file created with the umask would be."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
    os.close(fd)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)
    return tmp


def _sync(src: Path, dst: Path) -> None:
    """Copy ``src`` (a file or a folder) to ``dst``, file by file, only what differs (times kept, so a
    second run's Snakemake sees the same files); never through a link."""
    if src.is_dir():
        if dst.is_symlink():
            dst.unlink()
        dst.mkdir(parents=True, exist_ok=True)
        clear_leftovers(dst, {child.name for child in src.iterdir()})  # an interrupted copy's temporaries
        for child in src.iterdir():
            if child.name in ("__pycache__", ".snakemake") or child.suffix == ".pyc":
                continue
            _sync(child, dst / child.name)
        return
    if dst.is_symlink():
        dst.unlink()
    elif dst.is_file() and dst.stat().st_size == src.stat().st_size and dst.read_bytes() == src.read_bytes():
        return
    tmp = _mkstemp(dst.parent, dst.name)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_text(path: Path, text: str) -> None:
    """Write ``path`` anew (a temporary file renamed over it: a link there is replaced, never followed)."""
    tmp = _mkstemp(path.parent, path.name)
    try:
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run_report(out: str | os.PathLike, config: dict, *, cores: int = 1, echo=sys.stderr) -> Path:
    """Run the workflow on ``config`` in the folder ``out``; return the path of ``out/report.html``.

    Snakemake's own output goes to ``out/svbop_report.log``; its progress lines are echoed.

    Raises
    ------
    ValueError
        The folder cannot be used, or the run failed (the message names the log and its last error).
    """
    root = workflow_root()
    out = Path(out).expanduser()
    _check_folder(out, root)
    work = out / WORK_DIR
    work.mkdir(parents=True, exist_ok=True)
    lock = hold_folder(work, out)  # before anything else is written: a second run stops here
    try:
        _check_folder(out, root)  # again, now that no other run can change the folder
        if clear_stale_locks(work, out) and echo is not None:
            print(f"svbop report: cleared the Snakemake lock that a stopped run left in {work}", file=echo, flush=True)
        clear_leftovers(out, {"report.html", "svbop_report.log", "svbop_report.yaml"})
        return _run(out, work, root, config, cores, echo, lock)
    finally:
        if lock is not None:
            os.close(lock)


def _run(out: Path, work: Path, root: Path, config: dict, cores: int, echo, lock: int | None) -> Path:
    """:func:`run_report`'s work, once the folder is held."""
    import yaml

    for name in WORKFLOW_FILES:
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        _sync(root / name, work / name)
    cfg_path = out / "svbop_report.yaml"
    _write_text(cfg_path, "# written by svbop report: one model_outputs dataset (its guide: svbop docs your_model)\n"
                + yaml.safe_dump(config, sort_keys=False))
    log_path = out / "svbop_report.log"
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(int(cores)), "--configfile", str(cfg_path.resolve())]
    # the workflow's caches (matplotlib's fonts, Snakemake's sources) stay inside the folder, not in ~/.cache
    env = {**os.environ, "XDG_CACHE_HOME": str((work / ".cache").resolve()),
           "MPLCONFIGDIR": str((work / ".cache" / "matplotlib").resolve())}
    tmp_log = _mkstemp(out, "svbop_report.log")
    try:
        with open(tmp_log, "w") as log:
            proc = subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    stdin=subprocess.DEVNULL, env=env, pass_fds=() if lock is None else (lock,))
            try:
                for line in proc.stdout:
                    log.write(line)
                    log.flush()
                    if echo is not None and (" steps (" in line or line.startswith(("svbop:", "Error in rule"))):
                        print(f"svbop report: {line.rstrip()}", file=echo, flush=True)
                code = proc.wait()
            except BaseException:  # Ctrl-C, a full disk: the workflow stops too, and its output is kept
                _stop(proc, log)
                raise
    finally:
        if os.path.exists(tmp_log):
            os.replace(tmp_log, log_path)
    if code != 0:
        raise ValueError(f"the workflow failed (exit status {code}){_failure_reason(log_path, work)}; "
                         f"Snakemake's output: {log_path}")
    results = work / "results"
    for name in ("tables", "figures"):  # the page links them relative to itself
        if (results / name).is_dir():
            _sync(results / name, out / name)
    page = out / "report.html"
    _sync(results / "report.html", page)
    return page


def _stop(proc: subprocess.Popen, log) -> None:
    """Stop the workflow after Ctrl-C or a failed write here: a moment for Snakemake to end on the
    terminal's own SIGINT, then SIGINT (Snakemake ends its jobs and releases its lock), SIGTERM,
    SIGKILL; what it still prints goes to ``log``."""
    import signal

    try:
        for sig, wait in ((None, 5), (signal.SIGINT, 60), (signal.SIGTERM, 10), (signal.SIGKILL, None)):
            if proc.poll() is not None and proc.stdout.closed:
                return
            if sig is not None and proc.poll() is None:
                proc.send_signal(sig)
            try:
                rest, _ = proc.communicate(timeout=wait)
            except subprocess.TimeoutExpired:
                continue
            try:
                log.write(rest or "")
            except OSError:  # the disk is full: the log keeps what it has
                pass
            return
    except KeyboardInterrupt:  # a second Ctrl-C: stop at once
        proc.kill()
        proc.wait()
        raise


def _failure_reason(log_path: Path, work: Path) -> str:
    """The failed job's own last error line (its log under results/logs), else Snakemake's; the
    workflow's paths (``results/...``, ``data/...``) made whole inside ``work`` (they are not the
    user's files), and a full disk's fix added."""
    reason = re.sub(r"(?<![\w/.~-])(results|data)/", lambda m: f"{work}/{m.group(1)}/", _last_error(log_path, work))
    if "No space left on device" in reason:
        reason += "; free some space and rerun (finished steps are kept)"
    return reason


def _last_error(log_path: Path, work: Path) -> str:
    lines = log_path.read_text(errors="replace").splitlines()
    for i, ln in enumerate(lines):
        if ln.strip().startswith("log:") and i and any("Error in rule" in x for x in lines[max(0, i - 12):i]):
            for logfile in ln.split(":", 1)[1].split("(check log file")[0].split(","):
                p = work / logfile.strip()
                if p.is_file():
                    errs = [x.strip() for x in p.read_text(errors="replace").splitlines()
                            if "Error" in x or "error:" in x]
                    if errs:
                        return f": {errs[-1]}"
    reason = next((ln.strip() for ln in reversed(lines) if "Error" in ln or "error:" in ln), "")
    return f": {reason}" if reason else ""


def _pairs(value) -> list | None:
    """An option's ``(scores, labels)`` pairs: ``None``, one pair, or a list of pairs (``action="append"``)."""
    if value is None:
        return None
    value = list(value)
    return [list(value)] if value and isinstance(value[0], (str, os.PathLike)) else [list(v) for v in value]


def report_models(args) -> list[dict]:
    """The models of ``svbop report``'s options: ``[{"name", "test", "validation", "calibration"}]``.

    ``--test`` once per model, ``--name`` once per ``--test`` (or not at all for one model),
    ``--validation`` and ``--calibration`` each absent, once for all models or once per model.

    Raises
    ------
    ValueError
        A count that does not match, naming the options; a name given twice.
    """
    tests = _pairs(args.test) or []
    names = args.name if isinstance(args.name, list) else ([args.name] if args.name is not None else None)
    if names is None:
        if len(tests) > 1:
            raise ValueError(f"--name: missing; with {len(tests)} --test (several models), give one --name per --test, "
                             "in the same order")
        names = ["model"]
    if len(names) != len(tests):
        raise ValueError(f"--name: given {len(names)} times for {len(tests)} --test; give one --name per --test, in "
                         "the same order")
    dup = [n for i, n in enumerate(names) if n in names[:i]]
    if dup:
        raise ValueError(f"--name: {dup[0]!r} given twice; each model needs its own name")
    per = {}
    for part in ("validation", "calibration"):
        given = _pairs(getattr(args, part, None))
        if given is not None and len(given) not in (1, len(tests)):
            raise ValueError(f"--{part}: given {len(given)} times for {len(tests)} --test; give it once (for every "
                             "model) or once per --test, in the same order")
        per[part] = given
    return [{"name": name, "test": tests[i],
             **{part: None if per[part] is None else per[part][i if len(per[part]) > 1 else 0]
                for part in ("validation", "calibration")}}
            for i, name in enumerate(names)]


def check_same_rows(models: Sequence[Mapping]) -> None:
    """Several models must be scored on the same rows: each part's labels equal the first model's.

    Raises
    ------
    ValueError
        Naming both label files and the first row that differs (or the row counts).
    """
    import numpy as np

    from ..datasets.outputs import _read_labels

    first = models[0]
    for part in ("test", "validation", "calibration"):
        if first[part] is None:
            continue
        ref_path = Path(first[part][1]).expanduser()
        ref = None
        for m in models[1:]:
            path = Path(m[part][1]).expanduser()
            if path.resolve() == ref_path.resolve():
                continue
            ref = _read_labels(ref_path) if ref is None else ref
            y = _read_labels(path)
            if y.shape != ref.shape:
                raise ValueError(f"--{part}: {path}: {y.shape[0]:,} labels, but {ref_path} (model {first['name']!r}) has "
                                 f"{ref.shape[0]:,}; the models must be scored on the same rows")
            diff = np.flatnonzero(_label_keys(y, f"--{part}: {path}") != _label_keys(ref, f"--{part}: {ref_path}"))
            if diff.size:
                i = int(diff[0])
                raise ValueError(f"--{part}: {path}: row {i}: label {y[i].item()!r}, but {ref_path} (model {first['name']!r}) "
                                 f"has {ref[i].item()!r}; the models must be scored on the same rows, in the same order")


def _label_keys(y, where: str):
    """Labels as the classes they name, comparable across files of any dtype: a whole number, saved as an
    integer, a float (``1.0``) or text (``"1"``), as its decimal text; a name as it is.

    Raises
    ------
    ValueError
        A float label that is not a whole number (or not finite), naming ``where``, the row and the dtype.
    """
    import numpy as np

    from ..datasets.outputs import _is_int_text

    y = np.asarray(y)
    if y.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(~np.isfinite(y) | (y != np.round(y)))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{where}: row {i}: label {float(y[i])!r} is not a whole number (labels of dtype {y.dtype} "
                             "must be integral class indices)")
        return y.astype(np.int64).astype(str)
    if y.dtype.kind in "iu":
        return y.astype(str)
    if y.dtype.kind == "S":
        y = np.char.decode(y, "utf-8", errors="replace")
    return np.asarray([str(int(v)) if _is_int_text(v) else v for v in y.astype(str).tolist()], dtype=str)


def main(args) -> int:
    """``svbop report`` (see :func:`svbop.cli.build_parser`): every check first, then the workflow."""
    t0 = time.perf_counter()
    groups = {part: g for part in ("test", "validation", "calibration")
              if (g := getattr(args, f"{part}_groups", None)) is not None}
    rows = {key: {part: f for part in ("test", "validation", "calibration")
                  if (f := getattr(args, f"{part}_{key}", None)) is not None} for key in ROW_OPTIONS}
    models = report_models(args)
    for m in models:
        check_options(epsilons=args.epsilon, cores=args.cores, name=m["name"])
    from .top_k import is_top_k_run, main_top_k

    if is_top_k_run(models):  # each row's top-k classes only: the short path (svbop.report.top_k)
        _check_folder(Path(args.output).expanduser(), workflow_root())
        return main_top_k(args, models)
    from .stream import prepare_stream  # --ordered: the stream section's rows, read and checked now

    stream = prepare_stream(args, models[0])
    out = Path(args.output).expanduser()
    _check_folder(out, workflow_root())
    for m in models:
        _check_group_flags(groups, validation=m["validation"], calibration=m["calibration"], test=m["test"])
        for key, given in rows.items():
            _check_row_flags(key, given, validation=m["validation"], calibration=m["calibration"], test=m["test"])
    found = []
    for m in models:
        outputs, K, n = check_inputs(
            test=m["test"], validation=m["validation"], calibration=m["calibration"], groups=groups,
            weights=rows["weights"], group_columns=rows["group_columns"], outputs=args.outputs,
            class_names=args.class_names, hierarchy=args.hierarchy,
            hierarchy_format=args.hierarchy_format or "edges", epsilons=args.epsilon,
        )
        found.append(outputs)
        of = f" of {m['name']}" if len(models) > 1 else ""
        print(f"svbop report: read {n:,} rows x {K:,} classes{of} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        if args.outputs == "auto":
            print(f"svbop report: --outputs auto: the test scores are {outputs}"
                  + (" (every row non-negative, summing to 1)" if outputs == "probabilities" else " (not rows of probabilities)"),
                  file=sys.stderr)
    if len(models) > 1:
        check_same_rows(models)
    args.validation, args.calibration = models[0]["validation"], models[0]["calibration"]
    if args.validation is None or args.calibration is None:
        missing = [p for p in ("validation", "calibration") if getattr(args, p) is None]
        how = {"validation": "validation 10 %",
               "calibration": "calibration the smallest share from 10 % to 50 % that gives every class the rows the "
                              "conformal methods need"}
        print(f"svbop report: warning: no --{' or --'.join(missing)}: {' and '.join(missing)} rows are split off the "
              f"test rows ({'; '.join(how[p] for p in missing)}; seeded, stratified); the page says which rows came "
              "from where", file=sys.stderr)
    configs = [report_config(
        test=m["test"], validation=m["validation"], calibration=m["calibration"],
        groups=groups, weights=rows["weights"], group_columns=rows["group_columns"], outputs=outputs,
        calibrate=args.calibrate, class_names=args.class_names, hierarchy=args.hierarchy,
        hierarchy_format=args.hierarchy_format or "edges", epsilons=args.epsilon or [0.1], name=m["name"],
        title=args.title if len(models) == 1 else None, label_shift=getattr(args, "label_shift", None),
    ) for m, outputs in zip(models, found)]
    config = configs[0]
    if len(configs) > 1:  # one model_outputs dataset per model, on the same rows
        config["run"] = [m["name"] for m in models]
        config["datasets"] = {m["name"]: c["datasets"][m["name"]] for m, c in zip(models, configs)}
        config["report"]["title"] = args.title or f"Set-valued predictions of {', '.join(config['run'])}"
        config["report"]["examples_from"] = config["run"][0]  # the same example rows for every model
    from ..config import ConfigError, check_config, load_yaml, merge_configs, validate_config

    try:  # the workflow's own config checks, here, before it starts
        merged = merge_configs(load_yaml(workflow_root() / "config.yaml"), config)
        check_config(validate_config(merged))
    except ConfigError as exc:
        raise ValueError(str(exc)) from None
    page = run_report(out, config, cores=args.cores)
    if stream is not None:
        stream.write(page)
    print(f"svbop report: {page} ({time.perf_counter() - t0:.0f} s)")
    return 0
