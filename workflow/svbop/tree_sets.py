"""Guaranteed sets from a probabilistic class tree, as the pipeline runs them beside SVBOP-HF (issue 54):
conformal sets (``tree_<score>``) and conformal risk control (``tree_risk_<loss>``), calibrated and
predicted through :class:`svbop.trees.TreeProbabilities` without an ``n x K`` matrix.

* :func:`tree_set_predictor` -- the predictor of a method name at a level;
* :func:`predict_tree_sets` -- calibrate on held-out rows, predict the test rows, timed;
* :func:`tree_sets_table` -- the rows of ``results/<dataset>/tree_sets.tsv``: every such method and
  SVBOP-HF's Bayes-optimal sets, with coverage, set size and time per row.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from .sets import SetPredictions

__all__ = ["TREE_SCORES", "TREE_RISK_LOSSES", "tree_set_predictor", "predict_tree_sets", "tree_sets_table",
           "write_tree_sets", "TREE_SETS_COLUMNS"]

#: Conformal scores run from a tree (``hf.conformal`` in the config).
TREE_SCORES = ("lac", "aps", "raps", "saps", "topk")
#: Losses of conformal risk control run from a tree (``hf.risk_control``): the hierarchical one uses the
#: tree itself as the class hierarchy.
TREE_RISK_LOSSES = ("miscoverage", "hierarchical")
#: The columns of ``tree_sets.tsv``.
TREE_SETS_COLUMNS = ("dataset", "method", "param", "target_coverage_pct", "coverage_pct", "mean_size",
                     "calibrated", "fit_ms_per_row", "ms_per_row", "n_calibration", "n_test")


def tree_set_predictor(method: str, level: float, tree=None):
    """The predictor of ``method`` (``tree_<score>`` or ``tree_risk_<loss>``) at ``level`` (epsilon, or
    alpha for risk control); ``tree``: the class hierarchy of the hierarchical loss."""
    from .conformal import ConformalSetPredictor, RiskControlSetPredictor

    if method.startswith("tree_risk_"):
        loss = method[len("tree_risk_"):]
        if loss not in TREE_RISK_LOSSES:
            raise ValueError(f"{method}: the tree's risk control takes the losses {', '.join(TREE_RISK_LOSSES)}")
        return RiskControlSetPredictor(level, loss=loss, score="lac", **({"hierarchy": tree} if loss == "hierarchical"
                                                                          else {}))
    score = method[len("tree_"):] if method.startswith("tree_") else None
    if score not in TREE_SCORES:
        raise ValueError(f"{method}: a tree's conformal method is tree_<score>, score one of {', '.join(TREE_SCORES)}")
    return ConformalSetPredictor(level, score=score, random_state=0)


def predict_tree_sets(model, X_cal, y_cal, X_test, method: str, level: float, *, n_jobs=None
                      ) -> tuple[SetPredictions, dict]:
    """Calibrate ``method`` on the rows ``X_cal``/``y_cal`` and predict ``X_test`` (one thread unless
    ``n_jobs``); the record holds the threshold and the seconds of both steps."""
    from .trees import TreeProbabilities

    predictor = tree_set_predictor(method, level, tree=getattr(model, "tree", None))
    t = time.perf_counter()
    predictor.fit(TreeProbabilities(model, X_cal, n_jobs=n_jobs), y_cal)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    sets = predictor.predict(TreeProbabilities(model, X_test, n_jobs=n_jobs))
    predict_s = time.perf_counter() - t
    threshold = getattr(predictor, "lambda_", getattr(predictor, "quantile_", None))
    record = {"method": method, "level": float(level), "threshold": float(threshold),
              "n_calibration": int(np.asarray(y_cal).size), "n_test": len(sets), "fit_s": fit_s,
              "predict_s": predict_s}
    return sets, record


def tree_sets_table(dataset: str, y_test, sets: Mapping[tuple[str, str], SetPredictions],
                    records: Mapping[tuple[str, str], Mapping[str, object]]) -> list[dict]:
    """The rows of ``tree_sets.tsv``: for each ``(method, param)`` its coverage of ``y_test``, mean set size,
    and from its record (a tree method's :func:`predict_tree_sets` record, or SVBOP-HF's timing record:
    ``ms_per_sample``) the threshold and the time per row."""
    y = np.asarray(y_test)
    rows = []
    for key, s in sets.items():
        method, param = key
        rec = records.get(key, {})
        row = {"dataset": dataset, "method": method, "param": param, "target_coverage_pct": float("nan"),
               "coverage_pct": 100.0 * float(s.contains(y).mean()) if len(s) else float("nan"),
               "mean_size": float(s.sizes.mean()) if len(s) else float("nan"), "calibrated": "",
               "fit_ms_per_row": float("nan"), "ms_per_row": float("nan"), "n_calibration": 0, "n_test": len(s)}
        if "threshold" in rec:
            level = float(rec["level"])
            row.update(target_coverage_pct=100.0 * (1 - level) if not method.startswith("tree_risk_") else float("nan"),
                       calibrated=(f"lambda = {rec['threshold']:.6g}" if method.startswith("tree_risk_")
                                   else f"q = {rec['threshold']:.6g}"),
                       fit_ms_per_row=1e3 * float(rec["fit_s"]) / max(1, int(rec["n_calibration"])),
                       ms_per_row=1e3 * float(rec["predict_s"]) / max(1, len(s)),
                       n_calibration=int(rec["n_calibration"]))
        elif "ms_per_sample" in rec:
            row["ms_per_row"] = float(rec["ms_per_sample"])
        rows.append(row)
    return rows


def write_tree_sets(path, rows: Sequence[Mapping[str, object]]) -> None:
    """``rows`` as the tab-separated ``tree_sets.tsv`` (written atomically)."""
    import pandas as pd

    from .io import atomic_path

    with atomic_path(path) as tmp:
        pd.DataFrame(list(rows), columns=list(TREE_SETS_COLUMNS)).to_csv(tmp, sep="\t", index=False,
                                                                         float_format="%.6g")
