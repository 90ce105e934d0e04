"""The paper's experimental protocol on one dataset: every method's sets scored under every utility.

Rows follow the paper's CSV vocabulary (``../shared/paper/table3_utilities.csv``): ``method`` is
``svbop_full`` / ``threshold`` (``param`` = the utility label it optimises or was tuned for),
``top_s`` (``param`` = s) or ``icp`` (``param`` = epsilon, e.g. ``"0.10"``).  The approximate
SVBOP methods of the paper's Table 4 are ``svbop_hsg``, ``svbop_hf_predefined`` (SVBOP-HF on the
dataset's hierarchy) and ``svbop_hf_kmeans`` (on a balanced 2-means tree), ``param`` the utility
label; :func:`timing_columns` adds their test time and their agreement with SVBOP-Full.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .metrics import check_labels, mean_scores, set_agreement, top1_accuracy
from .sets import SetPredictions
from .utilities import Utility

__all__ = ["METHODS", "PAPER_FULL", "SVBOP_METHODS", "SUMMARY_KEYS", "evaluate_methods", "timing_columns", "dataset_summary"]

#: Methods of the paper's Tables 3 and 4, in the order the report lists them.
METHODS = ("svbop_full", "svbop_full_naive", "svbop_hsg", "svbop_hf_predefined", "svbop_hf_kmeans", "threshold",
           "top_s", "icp")

#: The SVBOP methods (``param`` = utility label), whose prediction jobs are timed.  ``svbop_full_naive``
#: is SVBOP-Full with the paper's cost model (all K probabilities, sorted; same sets as ``svbop_full``).
SVBOP_METHODS = METHODS[:5]

#: The paper's SVBOP-Full as it runs it, the reference of the paper's speed-ups.
PAPER_FULL = "svbop_full_naive"

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
    extra : mapping of (method, param) to dict, optional
        Further columns per method (e.g. the tuned ``theta`` of a threshold method, or the
        :func:`timing_columns` of the SVBOP methods); a column a method lacks is left empty.

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
        # a lazy mapping (svbop.io.SetFiles) reads each method's sets when asked: let these go
        # before the next are read (one conformal method's sets can take GBs)
        del predicted, scores
    return rows


def timing_columns(
    sets: Mapping[tuple[str, str], SetPredictions],
    timings: Mapping[tuple[str, str], Mapping[str, object]],
    *,
    reference: str = "svbop_full",
    paper_reference: str = PAPER_FULL,
) -> dict[tuple[str, str], dict[str, float]]:
    """Test-time columns of the timed methods, for :func:`evaluate_methods`'s ``extra``.

    Parameters
    ----------
    sets : mapping of (method, param) to SetPredictions
        Test sets of every method (as for :func:`evaluate_methods`).
    timings : mapping of (method, param) to dict
        Timing records (:func:`svbop.timing.read_timing`) of the timed methods; must include
        ``(reference, param)`` for every other timed method's ``param``.
    reference : str, default "svbop_full"
        The exact method the others are compared with.
    paper_reference : str, default "svbop_full_naive"
        SVBOP-Full with the paper's cost model: where it was timed for the same ``param``, every
        other timed method also gets ``speedup_vs_full_naive`` (the paper's speed-up).

    Returns
    -------
    dict
        Per timed method: ``t_test_ms`` (test time per sample in ms, the paper's Table 4); for
        the other methods also ``agreement_with_full_pct`` (percentage of test rows whose set
        equals the reference's for the same ``param``) and ``speedup_vs_full`` (reference's
        ``t_test_ms`` over the method's), and ``speedup_vs_full_naive`` (``paper_reference``'s
        over the method's) where that was timed; ``index_recall_pct`` where the record has it
        (SVBOP-HSG: recall@k of its index).

    Raises
    ------
    ValueError
        A timed method has no sets, or its reference has no sets or timing.
    """
    out: dict[tuple[str, str], dict[str, float]] = {}
    for key, record in timings.items():
        method, param = key
        if key not in sets:
            raise ValueError(f"timing for {method} {param} but no sets")
        ms = float(record["ms_per_sample"])
        out[key] = {"t_test_ms": ms}
        if record.get("index_recall_pct") is not None:  # SVBOP-HSG: its index's recall@k
            out[key]["index_recall_pct"] = float(record["index_recall_pct"])
        if method == reference:
            continue
        ref = (reference, param)
        if ref not in sets or ref not in timings:
            raise ValueError(f"{method} {param}: no {reference} sets and timing for {param!r} to compare with")
        out[key]["agreement_with_full_pct"] = 100.0 * set_agreement(sets[key], sets[ref])
        out[key]["speedup_vs_full"] = float(timings[ref]["ms_per_sample"]) / ms
        paper_ref = (paper_reference, param)
        if method != paper_reference and paper_ref in timings:
            out[key]["speedup_vs_full_naive"] = float(timings[paper_ref]["ms_per_sample"]) / ms
    return out


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
    """One row of the paper's Table 2 (K, D, N_train, N_test), with the held-out parts and accuracy."""
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
