"""The paper's own numbers (its Tables 1, 3, 4 and 5), shipped with the package as data.

The CSV files in ``svbop/report/paper/`` are transcribed from the paper (Mortier et al., DMKD 2021)
and copied unchanged from the project's ``../shared/paper/``.  This module reads them into tidy
frames with one spelling per dataset (the paper writes both "DMOZ" and "Dmoz").

Examples
--------
>>> from svbop.report.paper import paper_table
>>> t1 = paper_table("table1")
>>> int(t1.loc[t1["dataset"] == "LSHTC1", "K"].iloc[0])
12166
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pandas as pd

__all__ = ["PAPER_DIR", "PAPER_TABLES", "canonical_paper_name", "paper_datasets", "paper_table", "table4_long"]

#: Folder of the paper's CSV files.
PAPER_DIR = Path(__file__).resolve().with_name("paper")

#: Table name -> CSV file in :data:`PAPER_DIR`.
PAPER_TABLES = {
    "table1": "table1_datasets.csv",
    "table3": "table3_utilities.csv",
    "table4": "table4_algorithms.csv",
    "table5": "table5_hyperparameters.csv",
}

#: Table 4's utility column prefixes -> the utility labels used everywhere else.
_TABLE4_UTILITIES = {"fbeta_1": "fbeta_1", "credal_2_2_1_2": "credal_2.2_1.2"}
_TABLE4_MEASURES = ("utility_pct", "recall_pct", "set_size", "t_test_ms")


def _key(name: object) -> str:
    return re.sub(r"[^0-9a-z]", "", str(name).casefold())


@lru_cache(maxsize=None)
def _raw(name: str) -> pd.DataFrame:
    if name not in PAPER_TABLES:
        raise ValueError(f"paper_table: unknown table {name!r} (known: {', '.join(PAPER_TABLES)})")
    path = PAPER_DIR / PAPER_TABLES[name]
    if not path.is_file():
        raise ValueError(f"{path}: the paper's {name} is missing from the package (reinstall svbop)")
    return pd.read_csv(path, dtype={"dataset": str, "method": str, "param": str, "eval_utility": str})


def paper_datasets() -> list[str]:
    """The paper's 11 datasets, in the order of its Table 1."""
    return list(_raw("table1")["dataset"])


def canonical_paper_name(name: object) -> str | None:
    """The paper's Table 1 spelling of a dataset name (case, spaces and dashes ignored).

    Examples
    --------
    >>> canonical_paper_name("Dmoz"), canonical_paper_name("voc2006"), canonical_paper_name("CIFAR")
    ('DMOZ', 'VOC 2006', None)
    """
    if name is None:
        return None
    return {_key(d): d for d in paper_datasets()}.get(_key(name))


def paper_table(name: str) -> pd.DataFrame:
    """One of the paper's tables as a DataFrame (a copy), dataset names as in Table 1.

    Parameters
    ----------
    name : {"table1", "table3", "table4", "table5"}
        Table 1: datasets; Table 3: SVBOP-Full vs. baselines (long: one row per method, param and
        evaluation utility); Table 4: Full vs. HSG vs. HF (wide, as printed; see
        :func:`table4_long`); Table 5: hyper-parameters.

    Raises
    ------
    ValueError
        Unknown table name, or the file is missing from the installation.
    """
    df = _raw(name).copy()
    df["dataset"] = [canonical_paper_name(d) or d for d in df["dataset"]]
    return df


def table4_long() -> pd.DataFrame:
    """The paper's Table 4 with one row per (dataset, algorithm, utility).

    Returns
    -------
    DataFrame
        Columns ``dataset, algorithm, t_train_s, top1_pct, utility, utility_pct, recall_pct,
        set_size, t_test_ms``; ``utility`` is a label (``fbeta_1``, ``credal_2.2_1.2``) and
        ``algorithm`` one of ``Full``, ``HSG``, ``HF_p``, ``HF_c``.
    """
    wide = paper_table("table4")
    frames = []
    for prefix, label in _TABLE4_UTILITIES.items():
        part = wide[["dataset", "algorithm", "t_train_s", "top1_pct"]].copy()
        part["utility"] = label
        for m in _TABLE4_MEASURES:
            part[m] = wide[f"{prefix}_{m}"].astype(float)
        frames.append(part)
    return pd.concat(frames, ignore_index=True)
