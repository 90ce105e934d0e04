"""Every figure the report draws fits its image (issue 50, item 2): no legend, label, title or tick label reaches
outside the figure once it is rendered as the report renders it (svbop.report.figures.figure_to_png), and every
kind of marker the coverage figure plots has its entry in the legend. The headline figure of the page about a model
(coverage against mean set size, one panel) had its legend cut at both edges."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgba

from svbop.evaluation import BEYOND_COLUMNS
from svbop.report import figures as F
from svbop.report.beyond import BEYOND_FAMILIES

#: One method of every kind of set (family) svbop draws.
METHODS = [("svbop_full", "fbeta_1"), ("svbop_full", "fbeta_5"), ("threshold", "fbeta_1"), ("top_s", "3"),
           ("icp", "0.10"), ("conformal_aps", "0.10"), ("conformal_raps", "0.05"), ("conformal_lac_cc", "0.10"),
           ("conformal_lac_clustered", "0.10"), ("mondrian_lac_predicted_class", "0.10"), ("coverage_fbeta", "0.10"),
           ("hierarchical_1", "fbeta_1"), ("conformal_hierarchical_3", "0.10")]


def _frame(datasets) -> pd.DataFrame:
    from svbop.report.beyond import method_family

    rng = np.random.default_rng(0)
    rows = []
    for d in datasets:
        for method, param in METHODS:
            guaranteed = method == "icp" or method.startswith(("conformal_", "coverage_", "mondrian_"))
            rows.append({"dataset": d, "method": method, "param": param, "n_test": 8000,
                         "target_coverage_pct": 100 * (1 - float(param)) if guaranteed else np.nan,
                         "coverage_pct": rng.uniform(60, 99.9), "class_coverage_worst_pct": rng.uniform(20, 80),
                         "ssc_worst_pct": rng.uniform(20, 80), "singleton_pct": rng.uniform(0, 100), "empty_pct": 0.0,
                         "mean_size": rng.uniform(1, 40), "family": method_family(method)})
    frame = pd.DataFrame(rows)
    assert set(BEYOND_COLUMNS) <= set(frame.columns)
    return frame


def _record(T: float) -> dict:
    curve = {"confidence": list(np.linspace(0.1, 0.95, 15)), "accuracy": list(np.linspace(0.05, 0.9, 15))}
    return {"temperature": T, "test": {"before": {"reliability": curve, "ece": 0.12},
                                       "after": {"reliability": curve, "ece": 0.02}}}


def _classes() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    K = 100
    return pd.DataFrame({"class": np.arange(K), "name": [f"class {k}" for k in range(K)],
                         "n_test": rng.integers(1, 100, K), "n_calibration": rng.integers(1, 20, K),
                         "icp/0.10": rng.uniform(50, 100, K), "conformal_aps/0.10": rng.uniform(50, 100, K),
                         "svbop_full/fbeta_1": rng.uniform(30, 100, K)})


FIGURES = {
    # the page about a model: its headline figure (one model, as svbop report draws it), its utilities, classes
    "coverage, one model": lambda: F.plot_coverage_size(_frame(["cifar100"]), {"cifar100": "CIFAR-100 ResNet-20"},
                                                        paper=False),
    "coverage, three models": lambda: F.plot_coverage_size(_frame(["a", "b", "c"]), paper=False),
    "coverage, the paper's page": lambda: F.plot_coverage_size(_frame(["mnist", "voc2006"])),
    "utilities": lambda: F.plot_utilities(["fbeta:beta=1", "fbeta:beta=5", "credal:delta=1.6,gamma=0.6",
                                           "credal:delta=2.2,gamma=1.2"], K=100, title="What a right set earns, K = 100"),
    "utilities, K = 1,000": lambda: F.plot_utilities(K=1000),
    "F-beta family": lambda: F.plot_fbeta_family(K=100),
    "generalised reject option": lambda: F.plot_genreject_family(),
    "reliability": lambda: F.plot_reliability({"a": _record(2.5), "b": _record(1.0), "c": _record(0.8)}),
    "class coverage": lambda: __import__("svbop.report.model", fromlist=["x"]).plot_class_coverage(
        _classes(), {"icp/0.10": "ICP_{ε=0.10}", "conformal_aps/0.10": "APS_{ε=0.10}",
                     "svbop_full/fbeta_1": "SVBOP-Full-u_{F1}"}, [90.0], title="A model with a long title, 100 classes"),
}


@pytest.mark.parametrize("name", list(FIGURES))
def test_nothing_of_a_figure_is_cut(name):
    fig = FIGURES[name]()
    png = F.figure_to_png(fig)
    assert png.startswith(b"\x89PNG")
    assert F.outside_figure(fig) == []
    width, height = (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big"))
    assert (width, height) == tuple(round(v) for v in fig.get_size_inches() * 120)  # the PNG is the figure checked


def test_every_marker_kind_of_the_coverage_figure_has_its_legend_entry():
    frame = _frame(["cifar100"])
    fig = F.plot_coverage_size(frame, paper=False)
    F.figure_to_png(fig)
    (legend,) = fig.legends
    entries = {(h.get_marker(), to_rgba(h.get_color())): t.get_text()
               for h, t in zip(legend.legend_handles, legend.get_texts()) if h.get_marker() not in (None, "None", "")}
    plotted = {tuple(np.round(c.get_facecolor()[0][:3], 6)) for ax in fig.axes for c in ax.collections}
    assert plotted <= {tuple(np.round(rgba[:3], 6)) for _, rgba in entries}  # every colour plotted is named
    assert len(entries) == len(set(frame["family"])) == len({c for ax in fig.axes for c in map(id, ax.collections)})
    names = dict(BEYOND_FAMILIES)
    assert sorted(entries.values()) == sorted(names[f].replace(" (the paper)", "") for f in set(frame["family"]))
    assert "guaranteed coverage 1 - ε" in [t.get_text() for t in legend.get_texts()]
    assert not any("paper" in t.get_text() for t in legend.get_texts())
    assert F.outside_figure(fig) == []


def test_outside_figure_finds_a_cut_legend():
    """The check itself: a legend wider than its figure (the old headline figure's) is found and measured."""
    fig = F.plot_coverage_size(_frame(["cifar100"]))
    handles = fig.legends[0].legend_handles
    fig.legends[0].remove()
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=F.LEGEND_PT, frameon=False)
    (line,) = F.outside_figure(fig)
    assert line.startswith("legend 'SVBOP-Full (the paper), ") and "px outside the figure" in line
    F.fit_figure(fig)  # grown until it fits
    assert F.outside_figure(fig) == []
