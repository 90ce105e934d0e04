"""The page's block of promises beyond marginal coverage: weighted conformal sets under covariate shift
(the coverage under the weights, estimated by the weighted test coverage) and conditional conformal sets
over the user's overlapping groups (the coverage in every group, with its test rows), each read from the
rule evaluate_beyond's ``results/<dataset>/promises.json`` (:func:`svbop.evaluation.check_promise`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["promises_context"]


def _pct(v: float) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def promises_context(files: Mapping[str, str] | None, names, order: Sequence[str]) -> list[dict] | None:
    """Per dataset (in ``order``) with a weighted or conditional method: its promises as the page shows
    them; None when no dataset has one.

    Each dataset: ``{"id", "title", "n_test", "weighted": [{"name", "target", "coverage", "plain", "n_effective",
    "short"}], "conditional": [{"name", "target", "groups": [{"name", "n", "n_calibration", "coverage",
    "short"}], "short"}]}``; ``short`` is True where the test rows fall below the promise (by chance,
    or not: the page says how many rows each number rests on).
    """
    from ..io import read_json_object
    from .names import html_name

    out = []
    for d in order:
        path = (files or {}).get(d)
        if path is None:
            continue
        data = read_json_object(path, "the promises record")
        weighted, conditional = [], []
        for p in data.get("promises", []):
            name = html_name(names.method(p["method"], p["param"]))
            target = float(p["target_pct"])
            if p["promise"] == "weighted":
                cov = float(p["weighted_coverage_pct"])
                weighted.append({"name": name, "target": _pct(target), "coverage": _pct(cov),
                                 "plain": _pct(float(p.get("coverage_pct", float("nan")))),
                                 "n_effective": f"{float(p['n_effective']):,.0f}", "short": cov < target})
            else:
                groups = [{"name": g["name"], "n": f"{int(g['n']):,}", "n_calibration": f"{int(g['n_calibration']):,}",
                           "coverage": _pct(g["coverage_pct"]),
                           "short": g["n"] > 0 and float(g["coverage_pct"]) < target} for g in p["groups"]]
                conditional.append({"name": name, "target": _pct(target), "groups": groups,
                                    "short": any(g["short"] for g in groups)})
        if weighted or conditional:
            out.append({"id": d, "title": names.dataset(d), "n_test": f"{int(data['n_test']):,}",
                        "weighted": weighted, "conditional": conditional})
    return out or None
