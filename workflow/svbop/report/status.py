"""Which configured datasets can run, and the status of every dataset for the report.

A dataset whose raw files cannot be obtained without a person (a ``manual`` download that is not
in place yet, or a local ``path`` that does not exist) is *not run*: the pipeline leaves it out
(config ``missing_data: skip``) and the report says which file is missing, where to put it and
where to get it.  Nothing here touches the network: a file with a ``url`` counts as obtainable.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from .paper import canonical_paper_name, paper_datasets

__all__ = ["STATUS_COLUMNS", "dataset_status", "describe_missing", "missing_inputs", "paper_link"]

#: Columns of :func:`dataset_status`.
STATUS_COLUMNS = ("dataset", "title", "paper_dataset", "relation", "status", "detail")


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
        One ``{"file", "where", "url", "note"}`` per missing file: ``where`` is the path to put
        it at, ``url`` where a person gets it (empty for a local ``path``).  Empty when the
        dataset can run (also for ``source`` datasets, which need no files).
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
            path = path if path.is_absolute() else root / path
            if not path.exists():
                missing.append({"file": file, "where": str(path), "url": "", "note": "local file not found"})
        elif "manual" in spec:
            manual = dict(spec["manual"] or {})
            missing.append(
                {"file": file, "where": str(placed), "url": str(manual.get("url", "")), "note": str(manual.get("note", ""))}
            )
    return missing


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


def dataset_status(
    datasets: Mapping[str, Mapping[str, object]],
    run: Iterable[str],
    not_run: Mapping[str, list[Mapping[str, str]]] | None = None,
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

    Returns
    -------
    DataFrame
        Columns :data:`STATUS_COLUMNS`, one row per configured dataset (the ``run`` ones first,
        in order), then one per paper dataset that no configured dataset covers.  ``status`` is
        ``"run"``, ``"not run: data missing"`` or ``"not run: not in run"``; ``detail`` says what
        to do about it.
    """
    run = list(run)
    not_run = dict(not_run or {})
    rows = []
    covered = set()
    for name in run + [d for d in datasets if d not in run]:
        cfg = datasets[name]
        paper, relation = paper_link(cfg)
        if paper and name in run and name not in not_run:
            covered.add(paper)
        if name in not_run:
            status = "not run: data missing"
            detail = "missing " + describe_missing(not_run[name])
        elif name in run:
            status, detail = "run", ""
        else:
            status = "not run: not in run"
            detail = f"add {name} to run: in the config (or --config 'run=[\"{name}\"]')"
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
