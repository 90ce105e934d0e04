"""Which configured datasets can run, and the status of every dataset for the report.

A dataset whose raw files cannot be obtained without a person (a ``manual`` download that is not
in place yet, or a local ``path`` that does not exist) is *not run*: the pipeline leaves it out
(config ``missing_data: skip``) and the report says which file is missing, where to put it and
where to get it.  Nothing here touches the network: a file with a ``url`` counts as obtainable.

A dataset whose download, unpacking, parsing or split *fails* is *failed*: the failing job
records why (:func:`failure_recorded`, a JSON file under ``results/status/failed/``) and still
fails, so the run exits non-zero; the pipeline's ``onerror`` handler then builds the report from
every dataset that finished, listing the failed ones with their reason (:func:`failures`).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from ..io import atomic_path
from .paper import canonical_paper_name, paper_datasets

__all__ = [
    "DOMAINS",
    "FAILED_DIR",
    "PAPER_DOMAINS",
    "STATUS_COLUMNS",
    "dataset_domain",
    "dataset_status",
    "describe_missing",
    "failure_path",
    "failure_recorded",
    "describe_failure",
    "failure_summary",
    "failures",
    "log_failure",
    "missing_inputs",
    "paper_link",
    "status_view",
]

logger = logging.getLogger(__name__)

#: Where failing acquisition jobs record why, one JSON file per job (relative to the workdir).
FAILED_DIR = Path("results/status/failed")
#: The folder of the records of failed weights downloads (no dataset may be named so: "_" first).
WEIGHTS_OWNER = "_weights"

#: Columns of :func:`dataset_status`.
STATUS_COLUMNS = ("dataset", "title", "paper_dataset", "relation", "status", "detail")


def pipeline_product(path: object) -> bool:
    """Whether a file's local ``path`` names a file the pipeline itself writes: a relative path under
    ``results/`` (the quickstart reads the digits' probabilities back as a model's outputs this way);
    the workflow makes it before the file is linked, so it is never missing."""
    parts = Path(str(path)).parts
    return not Path(str(path)).is_absolute() and len(parts) > 1 and parts[0] == "results" and ".." not in parts


def missing_inputs(name: str, dataset_config: Mapping[str, object], root: str | os.PathLike = ".") -> list[dict[str, str]]:
    """Raw files of one dataset that are neither in place nor downloadable.

    Parameters
    ----------
    name : str
        The dataset's key in ``config["datasets"]``.
    dataset_config : mapping
        Its configuration (``files``: name -> ``{url | path | manual}``).
    root : path, default="."
        The workflow's working directory (``data/<name>/downloads/`` is looked up under it, and a
        relative ``path`` is resolved against it).

    Returns
    -------
    list of dict
        One ``{"file", "where", "url", "note", "kind"}`` per missing file: ``where`` is the path to
        put it at, ``url`` where a person gets it (empty for a local ``path``), ``kind``
        ``"manual"`` (a download by hand) or ``"local"`` (a local ``path`` that does not exist; a relative
        path under ``results/`` is a file of the run itself, :func:`pipeline_product`, never missing).  Empty
        when the dataset can run (also for ``source`` datasets, which need no files).
    """
    root = Path(root)
    missing = []
    for file, spec in dict(dataset_config.get("files") or {}).items():
        placed = root / "data" / name / "downloads" / file
        if placed.exists():  # a dangling link does not count
            continue
        spec = dict(spec or {})
        if "url" in spec:
            continue
        if "path" in spec:
            path = Path(os.path.expanduser(str(spec["path"])))
            if pipeline_product(spec["path"]):  # written by another rule of the run (e.g. a model's outputs)
                continue
            path = path if path.is_absolute() else root / path
            if not path.exists():
                missing.append({"file": file, "where": str(path), "url": "", "note": "local file not found",
                                "kind": "local"})
        elif "manual" in spec:
            manual = dict(spec["manual"] or {})
            missing.append(
                {"file": file, "where": str(placed), "url": str(manual.get("url", "")), "note": str(manual.get("note", "")),
                 "kind": "manual"}
            )
    return missing


# ------------------------------------------------------------------------------- failures
def failure_path(owner: str, job: str, root: str | os.PathLike = ".") -> Path:
    """The record of a failed job: ``results/status/failed/<owner>/<job>.json``.

    ``owner`` is the dataset (or :data:`WEIGHTS_OWNER` for a weights file), ``job`` names the
    job within it (e.g. ``"fetch.train.svm"``, ``"prepare_dataset"``).
    """
    if not owner or "/" in owner or not job or "/" in job:
        raise ValueError(f"failure_path: owner and job must be non-empty names without '/', got {owner!r}, {job!r}")
    return Path(root) / FAILED_DIR / owner / f"{job}.json"


@contextmanager
def failure_recorded(path: str | os.PathLike, *, stage: str, log: str | os.PathLike | None = None) -> Iterator[None]:
    """Run a job's body; if it raises, record why at ``path`` and re-raise (the job still fails).

    On success an older record at ``path`` (from a failed earlier run) is removed, so a record
    exists exactly while the job's last attempt failed.  ``KeyboardInterrupt`` and ``SystemExit``
    are not recorded (a killed job is not a failed dataset).

    The record is JSON: ``{"stage", "error" (exception type), "reason" (its message), "log", "time"}``.
    """
    path = Path(path)
    try:
        yield
    except Exception as exc:
        record = {"stage": stage, "error": type(exc).__name__, "reason": str(exc), "log": str(log or ""),
                  "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        with atomic_path(path) as tmp:  # created exclusively: no planted link at a guessable name
            tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        raise
    else:
        if path.exists():
            path.unlink()


def _one_line(text: str, width: int = 600) -> str:
    """A multi-line message on one line (its lines joined), cut to ``width`` characters."""
    line = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return line if len(line) <= width else line[: width - 3] + "..."


def log_failure(log: str | os.PathLike) -> str | None:
    """The reason a job's log gives for its failure (the ``failed:`` line :func:`svbop.logs.to_log_file`
    writes for an uncaught exception), or None."""
    try:
        lines = Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if " CRITICAL " in line and "failed: " in line:
            return line.split("failed: ", 1)[1].strip() or None
    return None


def failures(
    datasets: Iterable[str],
    root: str | os.PathLike = ".",
    weights: Mapping[str, str] | None = None,
) -> dict[str, list[dict[str, str]]]:
    """The recorded failures of each dataset: ``{dataset: [{"stage", "error", "reason", "log"}, ...]}``.

    Parameters
    ----------
    datasets : iterable of str
        The datasets to look up (those of ``run``).
    root : path
        The workflow's working directory.
    weights : mapping, optional
        dataset -> the weights entry its features need (e.g. ``{"voc2007": "vgg16_imagenet"}``):
        a failed fetch of those weights is that dataset's failure too.

    Returns
    -------
    dict
        Only datasets with at least one record; records sorted by stage order of the pipeline.
    """
    order = {"fetch_weights": 0, "fetch": 1, "unpack_dataset": 2, "prepare_dataset": 3, "split_dataset": 4}
    out: dict[str, list[dict[str, str]]] = {}

    def read(path: Path) -> dict[str, str] | None:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            logger.warning("%s: unreadable failure record (%s)", path, exc)
            return None
        return {k: str(record.get(k, "")) for k in ("stage", "error", "reason", "log")}

    for name in datasets:
        records = [r for p in sorted((Path(root) / FAILED_DIR / name).glob("*.json")) if (r := read(p))]
        key = (weights or {}).get(name)
        if key:
            path = Path(root) / FAILED_DIR / WEIGHTS_OWNER / f"{key}.json"
            if path.is_file() and (r := read(path)):
                records.insert(0, r)
        if records:
            out[name] = sorted(records, key=lambda r: order.get(r["stage"].split(" ")[0], 9))
    return out


def dataset_logs(dataset: str, datasets: Iterable[str], root: str | os.PathLike = ".") -> list[Path]:
    """The job logs of one dataset under ``results/logs/<rule>/``: ``<dataset>.log``,
    ``<dataset>/*.log`` and ``<dataset>_*.log`` (not those of a longer dataset name, such as
    ``mnist_shared_*`` for ``mnist``), newest first."""
    longer = [d for d in datasets if d != dataset and d.startswith(dataset + "_")]
    logs = Path(root) / "results" / "logs"
    found = [*logs.glob(f"*/{dataset}.log"), *logs.glob(f"*/{dataset}/*.log")]
    for path in logs.glob(f"*/{dataset}_*.log"):
        if not any(path.name.startswith(d + "_") or path.name == f"{d}.log" for d in longer):
            found.append(path)
    return sorted(set(found), key=lambda p: p.stat().st_mtime, reverse=True)


def describe_failure(records: Iterable[Mapping[str, str]]) -> str:
    """One line for the report: each failed stage, its reason (lines joined) and the log.

    Examples
    --------
    >>> describe_failure([{"stage": "fetch train.svm", "error": "DownloadError", "reason": "could not download x:\\n  u: HTTP 404", "log": "l.log"}])
    'fetch train.svm failed: could not download x: u: HTTP 404 (DownloadError; log: l.log)'
    """
    parts = []
    for r in records:
        log = f"; log: {r['log']}" if r.get("log") else ""
        parts.append(f"{r['stage']} failed: {_one_line(r['reason'])} ({r['error']}{log})")
    return "; ".join(parts)


def failure_summary(
    finished: Sequence[str] | None,
    failed: Mapping[str, str] | None,
    jobs: Sequence[Mapping[str, str]] = (),
    page: str = "results/report.partial.html",
    log: str | os.PathLike | None = None,
) -> list[str]:
    """What the terminal says after a failed run, one line each; the last line sums it up.

    A run fails when any job fails: a dataset's (its download, parse, model, ...) or one that belongs
    to no dataset (an illustration, the tables, the report).  The summary names both kinds, so it
    never reads "0 of 1 datasets failed" alone for a run that exits non-zero.

    Parameters
    ----------
    finished : sequence of str, or None
        The datasets that finished; None when the partial report could not be built.
    failed : mapping, or None
        dataset -> why it failed (one line); None as for ``finished``.
    jobs : sequence of mapping
        The failed jobs that belong to no dataset: ``{"job": "illustrate (name=entropy)", "reason": ...,
        "log": ...}`` (``reason`` and ``log`` may be empty).
    page : str, default="results/report.partial.html"
        The page of what finished.
    log : path, optional
        Snakemake's own log of the run, named when nothing else says why the run failed.

    Examples
    --------
    >>> failure_summary(["a"], {}, [{"job": "tables", "reason": "boom", "log": "t.log"}])[-1]
    'the run failed in 1 job that belongs to no dataset (above); the 1 dataset finished: results/report.partial.html shows it. Fix the cause and rerun.'
    """
    lines = [f"dataset {name!r} failed: {why}" for name, why in (failed or {}).items()]
    for job in jobs:
        reason = f": {job['reason']}" if job.get("reason") else ""
        where = f" (log: {job['log']})" if job.get("log") else ""
        lines.append(f"the run failed in job {job['job']}, which belongs to no dataset{reason}{where}")
    n_jobs = f"{len(jobs)} job{'s' if len(jobs) != 1 else ''} that belong{'s' if len(jobs) == 1 else ''} to no dataset"
    if finished is None or failed is None:
        what = f"the run failed in {n_jobs} (above)" if jobs else "the run failed"
        lines.append(f"{what}; no partial report could be built" + (f" (Snakemake's log: {log})" if log else "")
                     + ". Fix the cause and rerun.")
        return lines
    total = len(finished) + len(failed)
    if failed:
        also = f"; the run also failed in {n_jobs} (above)" if jobs else ""
        lines.append(f"{len(failed)} of {total} datasets failed{also}; {page} shows the {len(finished)} that finished "
                     f"and why the others did not. Fix the cause and rerun.")
    elif jobs:
        every = f"the {total} dataset" if total == 1 else f"all {total} datasets"
        lines.append(f"the run failed in {n_jobs} (above); {every} finished: {page} shows "
                     f"{'it' if total == 1 else 'them'}. Fix the cause and rerun.")
    else:
        lines.append(f"the run failed, but no dataset and no job of it recorded why"
                     + (f": see Snakemake's log {log}" if log else "") + f"; {page} shows the {total} datasets "
                     "that finished. Fix the cause and rerun.")
    return lines


def describe_missing(missing: Iterable[Mapping[str, str]]) -> str:
    """What :func:`missing_inputs` found, as one line for people.

    Examples
    --------
    >>> describe_missing([{"file": "a.csv", "where": "data/d/downloads/a.csv", "url": "https://x.org", "note": "login"}])
    'a.csv at data/d/downloads/a.csv (get it from https://x.org; login)'
    """
    parts = []
    for m in missing:
        source = "; ".join(t for t in (f"get it from {m['url']}" if m["url"] else "", m["note"]) if t)
        parts.append(f"{m['file']} at {m['where']}" + (f" ({source})" if source else ""))
    return "; ".join(parts)


def paper_link(dataset_config: Mapping[str, object]) -> tuple[str | None, str]:
    """The paper's dataset a configured dataset is compared with, and how.

    Returns
    -------
    (str or None, str)
        The paper's Table 1 name and ``"same"`` (key ``paper``: the paper's dataset itself) or
        ``"stand-in"`` (key ``stand_in_for``: a smaller real dataset of the same kind, compared
        for reference only); ``(None, "")`` for datasets outside the paper.

    Raises
    ------
    ValueError
        The name is not one of the paper's 11 datasets (the message lists them).
    """
    for key, relation in (("paper", "same"), ("stand_in_for", "stand-in")):
        if dataset_config.get(key):
            name = canonical_paper_name(dataset_config[key])
            if name is None:
                raise ValueError(
                    f"config: {key}: {dataset_config[key]!r} is not one of the paper's datasets "
                    f"({', '.join(paper_datasets())})"
                )
            return name, relation
    return None, ""


#: The domains a dataset's data can come from (config key ``domain``).
DOMAINS = ("images", "text", "biological", "other")

#: The domain of each of the paper's datasets (its Table 2 names).
PAPER_DOMAINS = {
    "MNIST": "images", "VOC 2006": "images", "VOC 2007": "images", "Caltech-101": "images", "Caltech-256": "images",
    "ALOI.BIN": "images", "DBpedia": "text", "DMOZ": "text", "LSHTC1": "text", "Bacteria": "biological",
    "Proteins": "biological",
}


def dataset_domain(dataset_config: Mapping[str, object]) -> str:
    """The domain of a configured dataset's data, one of :data:`DOMAINS` (the claims use it:
    the paper finds a predefined hierarchy helps on biological data).

    The config key ``domain`` when set; else the domain of the paper's dataset it is or stands in
    for (:data:`PAPER_DOMAINS`); else ``"images"`` for image features (``cnn``, ``vgg16``); else
    ``"other"``.

    Examples
    --------
    >>> dataset_domain({"stand_in_for": "Bacteria"}), dataset_domain({"domain": "text"}), dataset_domain({})
    ('biological', 'text', 'other')

    Raises
    ------
    ValueError
        ``domain`` is not one of :data:`DOMAINS`, or ``paper``/``stand_in_for`` is not a paper dataset.
    """
    domain = dataset_config.get("domain")
    if domain is not None:
        if domain not in DOMAINS:
            raise ValueError(f"config: domain: {domain!r} is not one of {', '.join(DOMAINS)}")
        return str(domain)
    paper, _ = paper_link(dataset_config)
    if paper:
        return PAPER_DOMAINS[paper]
    features = dataset_config.get("features")
    kind = features.get("kind") if isinstance(features, Mapping) else features
    return "images" if kind in ("cnn", "vgg16") else "other"


def dataset_status(
    datasets: Mapping[str, Mapping[str, object]],
    run: Iterable[str],
    not_run: Mapping[str, list[Mapping[str, str]]] | None = None,
    failed: Mapping[str, str] | None = None,
    missing: Mapping[str, list[Mapping[str, str]]] | None = None,
) -> pd.DataFrame:
    """Status of every configured dataset and of every paper dataset, for the report.

    Parameters
    ----------
    datasets : mapping
        ``config["datasets"]``.
    run : iterable of str
        ``config["run"]``: the datasets asked for.
    not_run : mapping, optional
        Datasets of ``run`` left out because files are missing: name -> :func:`missing_inputs`.
    failed : mapping, optional
        Datasets of ``run`` that failed (or did not finish): name -> the reason, one line.
    missing : mapping, optional
        :func:`missing_inputs` of datasets *not* in ``run`` (any others are ignored): their
        detail says which files to put where before adding them to ``run``.

    Returns
    -------
    DataFrame
        Columns :data:`STATUS_COLUMNS`, one row per configured dataset (the ``run`` ones first,
        in order), then one per paper dataset that no configured dataset covers.  ``status`` is
        ``"run"``, ``"failed"``, ``"not run: data missing"`` or ``"not run: not in run"``;
        ``detail`` says why and what to do about it.
    """
    run = list(run)
    not_run = dict(not_run or {})
    failed = dict(failed or {})
    rows = []
    covered = set()
    for name in run + [d for d in datasets if d not in run]:
        cfg = datasets[name]
        paper, relation = paper_link(cfg)
        if paper and name in run and name not in not_run and name not in failed:
            covered.add(paper)
        if name in failed and name in run:
            status, detail = "failed", failed[name]
        elif name in not_run:
            status = "not run: data missing"
            detail = "missing " + describe_missing(not_run[name])
        elif name in run:
            status, detail = "run", ""
        else:
            status = "not run: not in run"
            detail = f"add {name} to run: in the config (or --config 'run=[\"{name}\"]')"
            if (missing or {}).get(name):
                detail = f"first put {describe_missing(missing[name])}; then {detail}"
        rows.append(
            {"dataset": name, "title": str(cfg.get("title", name)), "paper_dataset": paper or "",
             "relation": relation, "status": status, "detail": detail}
        )
    for paper in paper_datasets():
        if any(r["paper_dataset"] == paper for r in rows):
            continue
        rows.append(
            {"dataset": "", "title": paper, "paper_dataset": paper, "relation": "same",
             "status": "not configured", "detail": "no entry in config datasets: for this paper dataset"}
        )
    out = pd.DataFrame(rows, columns=list(STATUS_COLUMNS))
    out.attrs["covered"] = sorted(covered)
    return out


def _file_groups(missing: Iterable[Mapping[str, str]]) -> list[dict[str, object]]:
    """Missing files grouped by folder, page and note (DBpedia's three CSV files: one group)."""
    groups: dict[tuple[str, str, str, bool], list[str]] = {}
    for m in missing:
        local = m.get("kind", "manual") == "local"
        where = str(m["where"])
        folder = where[: -len(m["file"])] if where.endswith("/" + str(m["file"])) else where
        groups.setdefault((folder, str(m.get("url", "")), str(m.get("note", "")), local), []).append(where)
    out = []
    for (folder, url, note, local), wheres in groups.items():
        files = [w[len(folder):] if w.startswith(folder) else w for w in wheres]
        out.append({"files": files, "paths": wheres, "folder": folder, "url": url,
                    "note": "" if local else note, "local": local})
    return out


def status_view(status: pd.DataFrame, missing: Mapping[str, list[Mapping[str, str]]] | None = None) -> dict[str, object]:
    """The report's compact status, limited to the run's datasets: one row per dataset of ``run``
    (it ran, failed, or waits for files a person must fetch); every configured dataset not in
    ``run`` on one line, also those whose files must be fetched by hand (flagged ``manual``: what
    to fetch is said where it matters, in ``dataset_status.csv`` and when the dataset is added to
    ``run``).

    Parameters
    ----------
    status : DataFrame
        :func:`dataset_status`.
    missing : mapping, optional
        :func:`missing_inputs` of every configured dataset (those of ``run`` and the others).

    Returns
    -------
    dict
        ``rows``: dicts with the status frame's columns, ``state`` (``"ran"``, ``"failed"``,
        ``"data missing"``: in ``run`` but its files are not there), ``in_run`` (True) and
        ``files`` (the missing files grouped by folder: ``files``, ``paths``, ``folder``, ``url``,
        ``note``, ``local``); ``not_in_run``: ``{"dataset", "title", "paper_dataset", "relation",
        "manual"}`` of the other configured datasets (``manual``: some of its files must be
        fetched by hand); ``not_configured``: the paper's datasets no entry covers; ``counts``:
        the number of each state, of the two lists and, as ``"by hand"``, of the datasets not in
        ``run`` whose files must be fetched by hand.
    """
    missing = dict(missing or {})
    rows, not_in_run, not_configured = [], [], []
    for r in status.to_dict("records"):
        name = str(r["dataset"])
        if r["status"] == "not configured":
            not_configured.append(str(r["title"]))
            continue
        if r["status"] == "not run: not in run":
            manual = any(m.get("kind", "manual") == "manual" for m in missing.get(name, []))
            not_in_run.append({**{k: r[k] for k in ("dataset", "title", "paper_dataset", "relation")}, "manual": manual})
            continue
        state = {"run": "ran", "failed": "failed", "not run: data missing": "data missing"}[r["status"]]
        rows.append({**r, "state": state, "in_run": True,
                     "files": _file_groups(missing.get(name, [])) if state == "data missing" else []})
    counts = {state: sum(1 for r in rows if r["state"] == state) for state in ("ran", "failed", "data missing")}
    counts |= {"not in run": len(not_in_run), "not configured": len(not_configured),
               "by hand": sum(1 for r in not_in_run if r["manual"])}
    return {"rows": rows, "not_in_run": not_in_run, "not_configured": not_configured, "counts": counts}
