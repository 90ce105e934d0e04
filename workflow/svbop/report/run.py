"""``svbop report``: the pipeline's report for a model's outputs, without writing YAML.

The command writes a config with one ``model_outputs`` dataset made of the given files, runs the
project's own Snakemake workflow on it in the output folder, and puts ``report.html`` (with its
``tables/`` and ``figures/``) at the top of that folder.  It is the pipeline's page, made by the
pipeline's rules: there is no second report implementation, so ``svbop report`` and
``snakemake --configfile <that config>`` give the same tables for the same files.

Everything is written inside the output folder: the config (``svbop_report.yaml``), links to the
workflow's files (``Snakefile``, ``config.yaml``, ``workflow/``, ``report/``, ``profiles/``,
``envs/``), the pipeline's ``data/`` and ``results/``, Snakemake's output
(``svbop_report.log``), and the page.  The input files are linked, never modified.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["WORKFLOW_FILES", "detect_outputs", "report_config", "run_report", "workflow_root"]

#: What the output folder links from the project's checkout so that the workflow runs there.
WORKFLOW_FILES = ("Snakefile", "config.yaml", "workflow", "report", "profiles", "envs")
#: Conformal and coverage-guaranteed sets the command adds (the quickstart's choice).
DEFAULT_METHODS = {"conformal": ["aps", "raps"], "class_conditional": ["lac"], "coverage": ["fbeta", "credal"]}


def workflow_root() -> Path:
    """The checkout whose Snakemake workflow ``svbop report`` runs (the folder holding ``Snakefile``).

    Raises
    ------
    ValueError
        svbop is installed without its checkout (``pip install .`` of a copy that was then removed).
    """
    root = Path(__file__).resolve().parents[3]
    if all((root / name).exists() for name in WORKFLOW_FILES):
        return root
    raise ValueError(f"svbop report runs the project's Snakemake workflow, which is not beside this svbop ({root} has no "
                     "Snakefile and workflow/); install svbop from its checkout: pip install -e <checkout>")


def detect_outputs(path: str | os.PathLike) -> str:
    """``"probabilities"`` when every row of the scores file is non-negative and sums to 1 within
    :data:`svbop.datasets.outputs.SUM_TOLERANCE`, else ``"logits"``."""
    from ..datasets.outputs import SUM_TOLERANCE, _read_scores

    S, *_ = _read_scores(Path(path), scores_key=None, header=True, sep=None, label_column=None)
    S = np.asarray(S)
    if S.ndim != 2 or S.size == 0:
        return "logits"  # the reader names the problem when the dataset is read
    # in blocks of rows, each in float64, stopping at the first that is not probabilities (logits are
    # told by their first block; the whole matrix in float64 took 1.35 CPU s at 50,000 x 1,000)
    rows = max(1, (1 << 20) // S.shape[1])
    for lo in range(0, S.shape[0], rows):
        block = np.asarray(S[lo: lo + rows], dtype=np.float64)
        if not (np.all(np.isfinite(block)) and block.min() >= 0
                and np.abs(block.sum(axis=1) - 1.0).max() <= SUM_TOLERANCE):
            return "logits"
    return "probabilities"


def _file_entry(files: dict, part: str, kind: str, path: str | os.PathLike) -> str:
    src = Path(path).expanduser()
    if not src.is_file():
        raise ValueError(f"--{part}: {src}: no such file (or not a regular file)")
    name = f"{part}_{kind}{''.join(src.suffixes[-1:]).lower()}"
    files[name] = {"path": str(src.resolve())}
    return name


def report_config(
    *,
    test: Sequence[str],
    validation: Sequence[str] | None = None,
    calibration: Sequence[str] | None = None,
    groups: dict[str, str] | None = None,
    outputs: str = "logits",
    calibrate: str = "temperature",
    class_names: str | None = None,
    hierarchy: str | None = None,
    hierarchy_format: str = "edges",
    epsilons: Sequence[float] = (0.1,),
    name: str = "model",
    title: str | None = None,
    repeats: int = 3,
) -> dict:
    """The workflow config of one ``model_outputs`` dataset made of these files.

    ``test``, ``validation`` and ``calibration`` are ``(scores, labels)`` pairs of file paths;
    the parts not given are split off the test rows by the schema's default fractions (a warning
    says so).  ``groups`` maps each given part to a file of one group per row (the parts' ``groups:``
    files, :mod:`svbop.datasets.outputs`): Mondrian LAC by that group is added, and the report shows
    each group's coverage.  Conformal sets (APS, RAPS, class-conditional LAC), Bayes-optimal sets with a coverage
    guarantee (F-beta, credal) at each ``epsilons``, Mondrian LAC by the predicted class and, with a
    ``hierarchy``, sets restricted to at most 1 and 3 of its nodes (Bayes-optimal and conformal) and
    Mondrian LAC by the top-level node are added to the paper's methods.
    """
    files: dict[str, dict] = {}
    parts = {}
    groups = dict(groups or {})
    given = [part for part, pair in (("validation", validation), ("calibration", calibration), ("test", test))
             if pair is not None]
    stray = [part for part in groups if part not in given]
    if stray:
        raise ValueError(f"--{stray[0]}-groups: there is no --{stray[0]} (groups are given for the parts given)")
    if groups and len(groups) != len(given):
        missing = [part for part in given if part not in groups]
        raise ValueError(f"--{missing[0]}-groups: missing; with groups for one part, every part given needs them "
                         f"(given: {', '.join('--' + p for p in given)})")
    for part, pair in (("validation", validation), ("calibration", calibration), ("test", test)):
        if pair is None:
            continue
        scores, labels = pair
        parts[part] = {"scores": _file_entry(files, part, "scores", scores),
                       "labels": _file_entry(files, part, "labels", labels)}
        if part in groups:
            parts[part]["groups"] = _file_entry(files, part, "groups", groups[part])
    fmt: dict = {"kind": "model_outputs", "outputs": outputs, "parts": parts}
    entry: dict = {"title": title or f"{name} (model outputs)", "files": files, "format": fmt, "calibrate": calibrate}
    if class_names is not None:
        fmt["class_names_file"] = _file_entry(files, "class", "names", class_names)
    methods = {**DEFAULT_METHODS, "epsilon": [float(e) for e in epsilons],
               "mondrian": {"by": ["predicted_class"]}}  # coverage within each predicted class too
    if hierarchy is not None:  # sets restricted to its nodes (Bayes-optimal and conformal), groups by top node
        entry["hierarchy"] = {"format": hierarchy_format, "file": _file_entry(files, "hierarchy", "file", hierarchy)}
        methods["hierarchical"] = {"max_nodes": [1, 3]}
        methods["conformal"] = [*DEFAULT_METHODS["conformal"], "hierarchical"]
        methods["mondrian"] = {"by": ["predicted_class", "predicted_top_node"]}
    if groups:  # coverage within each of the user's groups too
        methods["mondrian"] = {"by": [*methods["mondrian"]["by"], "group_column"]}
    return {
        "run": [name],
        "timing": {"repeats": int(repeats)},
        "baselines": {"icp_epsilon": [float(e) for e in epsilons]},
        "methods": methods,
        "report": {"title": f"Set-valued predictions of {title or name}", "illustrations": {}},
        "datasets": {name: entry},
    }


def _prepare_folder(out: Path, root: Path) -> None:
    """Create ``out`` and link the workflow's files into it; refuse a folder that holds other files of those names."""
    out = out.expanduser()
    if out.exists() and not out.is_dir():
        raise ValueError(f"-o {out}: exists and is not a folder")
    if out.resolve() == root.resolve():
        raise ValueError(f"-o {out}: is the project's checkout; give a folder of its own (it gets data/ and results/)")
    out.mkdir(parents=True, exist_ok=True)
    todo = []
    for name in WORKFLOW_FILES:  # every check first: a refused folder is left as it was
        link = out / name
        target = root / name
        if link.is_symlink():
            if Path(os.readlink(link)) == target:
                continue
            raise ValueError(f"-o {out}: {name} is a link to {os.readlink(link)}, not to this svbop's {target}; "
                             "choose a new folder")
        if link.exists():
            raise ValueError(f"-o {out}: already holds {name}, which is not svbop report's; choose a new or empty folder")
        todo.append((link, target))
    for link, target in todo:
        link.symlink_to(target, target_is_directory=target.is_dir())


def run_report(out: str | os.PathLike, config: dict, *, cores: int = 1, echo=sys.stderr) -> Path:
    """Run the workflow on ``config`` in the folder ``out``; return the path of ``out/report.html``.

    Snakemake's own output goes to ``out/svbop_report.log``; its progress lines are echoed.

    Raises
    ------
    ValueError
        The folder cannot be used, or the run failed (the message names the log and its last error).
    """
    import yaml

    root = workflow_root()
    out = Path(out).expanduser()
    _prepare_folder(out, root)
    cfg_path = out / "svbop_report.yaml"
    cfg_path.write_text("# written by svbop report: one model_outputs dataset (see workflow/docs/your_model.md)\n"
                        + yaml.safe_dump(config, sort_keys=False))
    log_path = out / "svbop_report.log"
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(int(cores)), "--configfile", cfg_path.name]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            log.write(line)
            if echo is not None and (" steps (" in line or line.startswith(("svbop:", "Error in rule"))):
                print(f"svbop report: {line.rstrip()}", file=echo, flush=True)
        code = proc.wait()
    if code != 0:
        lines = log_path.read_text().splitlines()
        reason = next((ln.strip() for ln in reversed(lines) if "Error" in ln or "error:" in ln), "")
        raise ValueError(f"the workflow failed (exit status {code}){': ' + reason if reason else ''}; "
                         f"Snakemake's output: {log_path}")
    results = out / "results"
    page = out / "report.html"
    shutil.copyfile(results / "report.html", page)
    for name in ("tables", "figures"):  # the page links them relative to itself
        link = out / name
        if not link.is_symlink() and not link.exists():
            link.symlink_to(Path("results") / name, target_is_directory=True)
    return page


def main(args) -> int:
    """``svbop report`` (see :func:`svbop.cli.build_parser`)."""
    t0 = time.perf_counter()
    outputs = args.outputs
    if outputs == "auto":
        outputs = detect_outputs(args.test[0])
        print(f"svbop report: --outputs auto: the test scores are {outputs}"
              + (" (every row non-negative, summing to 1)" if outputs == "probabilities" else " (not rows of probabilities)"),
              file=sys.stderr)
    if args.validation is None or args.calibration is None:
        missing = [p for p in ("validation", "calibration") if getattr(args, p) is None]
        print(f"svbop report: warning: no --{' or --'.join(missing)}: {' and '.join(missing)} rows are split off the "
              "test rows (10 % each, seeded, stratified); the page says which rows came from where", file=sys.stderr)
    config = report_config(
        test=args.test, validation=args.validation, calibration=args.calibration,
        groups={part: g for part in ("test", "validation", "calibration")
                if (g := getattr(args, f"{part}_groups", None)) is not None}, outputs=outputs,
        calibrate=args.calibrate, class_names=args.class_names, hierarchy=args.hierarchy,
        hierarchy_format=args.hierarchy_format or "edges", epsilons=args.epsilon or [0.1], name=args.name,
        title=args.title,
    )
    page = run_report(args.output, config, cores=args.cores)
    print(f"svbop report: {page} ({time.perf_counter() - t0:.0f} s)")
    return 0
