"""The page's block of promises beyond marginal coverage: weighted conformal sets under covariate shift
(the coverage under the weights, estimated by the weighted test coverage), conditional conformal sets
over the user's overlapping groups (the coverage in every group, with its test rows) and label-shift
conformal sets (their test coverage, and the class frequencies estimated from the test rows' outputs
beside the calibration ones and the test rows' own), each read from the rule evaluate_beyond's
``results/<dataset>/promises.json`` (:func:`svbop.evaluation.check_promise`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["promises_context", "LABEL_SHIFT_CLASSES"]

#: The most classes the label-shift table lists (those whose estimated frequency moved most).
LABEL_SHIFT_CLASSES = 30


def _pct(v: float) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.1f}"


def promises_context(files: Mapping[str, str] | None, names, order: Sequence[str]) -> list[dict] | None:
    """Per dataset (in ``order``) with a weighted or conditional method: its promises as the page shows
    them; None when no dataset has one.

    Each dataset: ``{"id", "title", "n_test", "weighted": [{"name", "target", "coverage", "plain", "n_effective",
    "short"}], "conditional": [{"name", "target", "groups": [{"name", "n", "n_calibration", "coverage",
    "short"}], "short"}], "label_shift": [{"name", "target", "coverage", "short"}], "frequencies"}`` (the
    label-shift class frequencies, :func:`_frequencies`, or None); ``short`` is True where the test rows fall below the promise (by chance,
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
        weighted, conditional, shifted, frequencies = [], [], [], None
        for p in data.get("promises", []):
            name = html_name(names.method(p["method"], p["param"]))
            target = float(p["target_pct"])
            if p["promise"] == "label_shift":
                cov = float(p["coverage_pct"])
                shifted.append({"name": name, "target": _pct(target), "coverage": _pct(cov), "short": cov < target})
                if frequencies is None:  # the same weights for every label-shift method of the dataset
                    frequencies = _frequencies(p)
                continue
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
        if weighted or conditional or shifted:
            out.append({"id": d, "title": names.dataset(d), "n_test": f"{int(data['n_test']):,}",
                        "weighted": weighted, "conditional": conditional, "label_shift": shifted,
                        "frequencies": frequencies})
    return out or None


def _frequencies(p: Mapping) -> dict:
    """The label-shift table: per class its calibration frequency, the test frequency estimated from the
    outputs, the test rows' own, and the weight; at most :data:`LABEL_SHIFT_CLASSES` classes (those whose
    estimate moved most from the calibration frequency)."""
    cal, est, obs = (list(map(float, p[k])) for k in ("calibration_freq", "estimated_test_freq", "test_freq"))
    w = list(map(float, p["weights"]))
    order = sorted(range(len(cal)), key=lambda c: -abs(est[c] - cal[c]))[:LABEL_SHIFT_CLASSES]
    rows = [{"cls": str(c), "calibration": f"{100 * cal[c]:.2f}", "estimated": f"{100 * est[c]:.2f}",
             "observed": f"{100 * obs[c]:.2f}", "weight": f"{w[c]:.3g}"} for c in sorted(order)]
    return {"estimator": str(p["estimator"]).upper(), "rows": rows, "n_classes": len(cal),
            "shown": len(rows), "tv_estimated": f"{50 * sum(abs(a - b) for a, b in zip(est, cal)):.1f}",
            "tv_error": f"{50 * sum(abs(a - b) for a, b in zip(est, obs)):.1f}"}
