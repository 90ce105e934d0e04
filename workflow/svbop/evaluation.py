"""The paper's experimental protocol on one dataset: every method's sets scored under every utility.

Rows follow the paper's CSV vocabulary (``../shared/paper/table3_utilities.csv``): ``method`` is
``svbop_full`` / ``threshold`` (``param`` = the utility label it optimises or was tuned for),
``top_s`` (``param`` = s) or ``icp`` (``param`` = epsilon, e.g. ``"0.10"``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .metrics import check_labels, mean_scores, top1_accuracy
from .sets import SetPredictions
from .utilities import Utility

__all__ = ["METHODS", "SUMMARY_KEYS", "evaluate_methods", "dataset_summary"]

#: Methods of the paper's Table 3, in the paper's order.
METHODS = ("svbop_full", "threshold", "top_s", "icp")

#: Keys of a dataset summary (:func:`dataset_summary`, ``results/{dataset}/summary.json``).
SUMMARY_KEYS = (
    "dataset", "title", "synthetic", "description", "features", "K", "D",
    "N_train", "N_validation", "N_calibration", "N_test", "top1_pct", "train_seconds",
)


def evaluate_methods(
    sets: Mapping[tuple[str, str], SetPredictions],
    y,
    utilities: list[Utility | str],
    *,
    dataset: str,
    extra: Mapping[tuple[str, str], Mapping[str, object]] | None = None,
) -> list[dict]:
    """Score the test sets of several methods.

    Parameters
    ----------
    sets : mapping of (method, param) to SetPredictions
        One entry per method, all for the same ``n`` test rows.
    y : array of int, shape (n,)
        True classes of the test rows.
    utilities : list of Utility or str
        Every method is evaluated under each (column ``<label>_pct``, mean utility in percent).
    dataset : str
        Written into each row.
    extra : mapping, optional
        Further columns per method (e.g. the tuned ``theta`` of a threshold method).

    Returns
    -------
    list of dict
        One row per method, in the order of ``sets``: ``dataset, method, param, n_test,
        recall_pct, mean_size, top1_pct`` (the first class of each set), ``<label>_pct``...
    """
    rows = []
    for (method, param), predicted in sets.items():
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r} (expected one of {METHODS})")
        scores = mean_scores(predicted, y, utilities)
        row = {"dataset": dataset, "method": method, "param": str(param), "n_test": int(scores.pop("n"))}
        row.update(scores)
        row.update((extra or {}).get((method, param), {}))
        rows.append(row)
    return rows


def dataset_summary(
    *,
    dataset: str,
    title: str,
    n_classes: int,
    n_features: int,
    split: Mapping[str, np.ndarray],
    P_test,
    y_test,
    synthetic: bool = False,
    description: str = "",
    features: str = "",
    train_seconds: float | None = None,
) -> dict:
    """One row of the paper's Table 1 (K, D, N_train, N_test), with the held-out parts and accuracy."""
    y_test = check_labels(y_test, np.shape(P_test), "y_test")
    return {
        "dataset": dataset,
        "title": title,
        "synthetic": bool(synthetic),
        "description": description,
        "features": features,
        "K": int(n_classes),
        "D": int(n_features),
        **{f"N_{part}": int(len(split[part])) for part in ("train", "validation", "calibration", "test")},
        "top1_pct": 100.0 * top1_accuracy(P_test, y_test),
        "train_seconds": None if train_seconds is None else float(train_seconds),
    }
