"""Several models side by side (``svbop report --test A ... --test B ... --name a --name b``): each model
is a dataset of model outputs of the same run, on the same rows; the page compares them at each
coverage level and utility: the method each model's choice falls on, its coverage, mean set size and
worst-covered class, and how well calibrated the model's probabilities are (ECE on the test rows)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

__all__ = ["compare_models"]


def _fmt(v: object, decimals: int = 2) -> str:
    try:
        v = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "–"
    return "–" if math.isnan(v) else f"{v:.{decimals}f}"


def _worst_class(classes: pd.DataFrame | None, key: str) -> str:
    """The name of the class ``key`` covers least among the classes with test rows ("" when unknown)."""
    if classes is None or key not in classes.columns:
        return ""
    cover = pd.to_numeric(classes[key], errors="coerce").where(classes["n_test"] > 0)
    if cover.notna().sum() == 0:
        return ""
    i = int(cover.idxmin())
    name, number = (str(classes["name"].iloc[i]) if "name" in classes.columns else ""), int(classes["class"].iloc[i])
    return name if name and name != str(number) else f"class {number}"


def compare_models(frame: pd.DataFrame, labels: Sequence[str], order: Sequence[str], epsilons: Sequence[float], *,
                   titles: Mapping[str, str] | None = None,
                   calibration: Mapping[str, Mapping[str, object]] | None = None,
                   class_coverage: Mapping[str, object] | None = None) -> dict[str, object] | None:
    """The comparison of the models at each goal; None with fewer than two models.

    Parameters
    ----------
    frame : DataFrame
        Every kind of set of every model (:func:`svbop.report.beyond.read_beyond`).
    labels : sequence of str
        The run's utility labels.
    order : sequence of str
        The models (datasets), in the page's order.
    epsilons : sequence of float
        The coverage levels asked.
    titles : mapping, optional
        model -> its title.
    calibration : mapping, optional
        model -> its calibration record (``test.before/after.ece``).
    class_coverage : mapping, optional
        model -> its ``tables/class_coverage_<model>.tsv`` (:func:`svbop.report.model.read_class_coverage`): the
        worst-covered class is then named beside its coverage.

    Returns
    -------
    dict
        ``models`` (``id``, ``title``, ``ece``: the test rows' ECE % after calibration, ``ece_before``)
        and ``goals``: ``[{"goal", "coverage": bool, "cells": [per model {"model", "method" (the name the
        page shows, with its ε or utility), "key", "coverage", "size", "worst", "worst_class" (its name, or
        ""), "utility", "best": bool}]}]``; ``best`` marks the model with the smallest mean size (a coverage
        goal) or the largest mean utility.
    """
    from .beyond import beyond_table
    from .model import choose_sets, read_class_coverage

    present = set(frame["dataset"].astype(str))
    models = [d for d in order if d in present]
    if len(models) < 2:
        return None
    titles = dict(titles or {})
    goals: dict[str, dict[str, object]] = {}
    for d in models:
        table = beyond_table(frame, d, labels)
        worst = dict(zip(table["key"], table["class_coverage_worst_pct"]))
        path = (class_coverage or {}).get(d)
        classes = read_class_coverage(path) if path else None
        chosen = choose_sets(table, epsilons, labels)
        for r in chosen[chosen["rank"] <= 1].to_dict("records"):
            g = goals.setdefault(r["goal"], {"goal": r["goal"].replace(">=", "≥"), "goal_key": r["goal"],
                                             "coverage": r["goal"].startswith("coverage"), "cells": []})
            g["cells"].append({"model": d, "method": r["label"] if r["method"] != "none" else "none promises it",
                               "key": r["key"], "coverage": r["coverage_pct"], "size": r["mean_set_size"],
                               "worst": worst.get(r["key"], math.nan), "worst_class": _worst_class(classes, r["key"]),
                               "utility": r["utility_pct"]})
    for g in goals.values():
        cells = g["cells"]
        known = [c for c in cells if c["size"] == c["size"]]
        if known:
            best = (min(known, key=lambda c: (c["size"], -c["coverage"])) if g["coverage"]
                    else max(known, key=lambda c: (c["utility"], -c["size"])))
        for c in cells:
            c["best"] = bool(known) and c is best
            c["text"] = {k: _fmt(c[k]) for k in ("coverage", "size", "worst", "utility")}
            if c["worst_class"] and c["text"]["worst"] != "–":
                c["text"]["worst"] += f" ({c['worst_class']})"
    out_models = []
    for d in models:
        rec = dict((calibration or {}).get(d) or {})
        test = dict(rec.get("test") or {})
        after, before = dict(test.get("after") or {}), dict(test.get("before") or {})
        out_models.append({"id": d, "title": titles.get(d, d),
                           "ece": _fmt(100 * after["ece"]) if "ece" in after else "–",
                           "ece_before": _fmt(100 * before["ece"]) if "ece" in before else "–"})
    return {"models": out_models, "goals": list(goals.values())}
