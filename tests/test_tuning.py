"""Hyper-parameters chosen on the validation rows (svbop.tuning; `flat: {C: auto}` in the pipeline)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from svbop.config import ConfigError, check_dataset, validate_config
from svbop.linear import train_ovr
from svbop.report.compare import table5_vs_paper
from svbop.tuning import (
    DEFAULT_C_GRID,
    DEFAULT_EPS_GRID,
    choice_text,
    flat_grid,
    read_points,
    resolve_flat,
    score_point,
    select_point,
    validation_log_loss,
    value_label,
)


def _problem(seed=0, K=5, D=50, N=600):
    """Gaussian classes, half the rows for training: tiny C gives near-uniform probabilities, huge C
    over-confident ones, so the validation log-loss is smallest inside a wide grid."""
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(K, D)) * 0.6
    y = rng.integers(0, K, N)
    X = means[y] + rng.normal(size=(N, D))
    half = N // 2
    return X[:half], y[:half], X[half:], y[half:], K


GRID = (1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0, 100.0)


def _independent_log_loss(model, X, y, K):
    from sklearn.metrics import log_loss

    return log_loss(y, model.predict_proba(X), labels=np.arange(K))


def test_auto_picks_the_interior_best_C_of_a_synthetic_problem():
    Xt, yt, Xv, yv, K = _problem()
    points = [score_point(Xt, yt, Xv, yv, K, C=c, eps=0.1, progress=False) for c in GRID]
    # the oracle: each C's model scored by scikit-learn's log-loss, not by svbop.tuning
    oracle = [_independent_log_loss(train_ovr(Xt, yt, K, C=c, eps=0.1, progress=False), Xv, yv, K) for c in GRID]
    best = GRID[int(np.argmin(oracle))]
    assert GRID[0] < best < GRID[-1]  # the problem is built so: both ends are clearly worse
    assert oracle[0] > min(oracle) + 0.5 and oracle[-1] > min(oracle) + 0.005
    choice = select_point(points, tuned=("C",))
    assert choice["C"] == best
    assert choice["edge"] == {"C": ""}
    assert choice["score"] == "validation_log_loss"
    np.testing.assert_allclose([p["validation_log_loss"] for p in points], oracle, rtol=1e-6)


def test_a_choice_at_the_edge_of_its_grid_is_flagged():
    Xt, yt, Xv, yv, K = _problem()
    # only strongly regularised values: the largest is best, and the best may lie beyond the grid
    points = [score_point(Xt, yt, Xv, yv, K, C=c, eps=0.1) for c in (1e-4, 1e-3, 1e-2)]
    choice = select_point(points, tuned=("C",))
    assert choice["C"] == 1e-2 and choice["edge"]["C"] == "largest"
    assert "the largest value" in choice_text(choice, "C")
    # and at the other end
    synthetic = [{"C": c, "eps": 0.1, "validation_log_loss": s} for c, s in ((1.0, 0.2), (10.0, 0.3), (100.0, 0.4))]
    assert select_point(synthetic, tuned=("C",))["edge"]["C"] == "smallest"
    # a tie at the edge decided nothing: not flagged (as Table 3's theta)
    tie = [{"C": c, "eps": 0.1, "validation_log_loss": s} for c, s in ((1.0, 0.2), (10.0, 0.2), (100.0, 0.4))]
    choice = select_point(tie, tuned=("C",))
    assert choice["C"] == 1.0 and choice["edge"]["C"] == ""


def test_both_auto_runs_every_pair_and_flags_each_key_on_its_own_line():
    cfg = {"C": "auto", "eps": "auto"}
    grid = flat_grid(cfg, {"C_grid": [1, 10, 100], "eps_grid": [0.01, 0.1]})
    assert len(grid) == 6 and {"C": 100.0, "eps": 0.01} in grid
    scores = {(1.0, 0.01): 0.5, (10.0, 0.01): 0.3, (100.0, 0.01): 0.2,
              (1.0, 0.1): 0.5, (10.0, 0.1): 0.3, (100.0, 0.1): 0.25}
    choice = select_point([{**p, "validation_log_loss": scores[(p["C"], p["eps"])]} for p in grid])
    assert (choice["C"], choice["eps"]) == (100.0, 0.01)
    assert choice["edge"] == {"C": "largest", "eps": "smallest"}


def test_grid_defaults_are_log_spaced_and_refuse_bad_values():
    assert flat_grid({"C": 1.0, "eps": 0.1}) == []  # nothing auto: no tuning jobs
    grid = flat_grid({"C": "auto", "eps": 0.1})
    assert [p["C"] for p in grid] == list(DEFAULT_C_GRID) and {p["eps"] for p in grid} == {0.1}
    assert np.allclose(np.diff(np.log10(DEFAULT_C_GRID)), 1.0) and np.allclose(np.diff(np.log10(DEFAULT_EPS_GRID)), 1.0)
    schema_defaults = validate_config({"run": []})["tuning"]
    assert tuple(schema_defaults["C_grid"]) == DEFAULT_C_GRID and tuple(schema_defaults["eps_grid"]) == DEFAULT_EPS_GRID
    for bad in ([], [0.0], [1.0, 1.0], ["x"], [math.inf]):
        with pytest.raises(ValueError, match="tuning.C_grid"):
            flat_grid({"C": "auto", "eps": 0.1}, {"C_grid": bad})
    for v in (0.1, 100000.0, 1e-05, 0.123456789, 1e9):
        assert float(value_label(v)) == v and "/" not in value_label(v)


def test_points_and_records_are_checked_naming_the_file(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"C": 1.0, "eps": 0.1, "validation_log_loss": None}))
    with pytest.raises(ValueError, match=r"p\.json: validation_log_loss"):
        read_points([bad])
    with pytest.raises(ValueError, match="'auto' but 0 tuning records"):
        resolve_flat({"C": "auto", "eps": 0.1}, [])
    record = tmp_path / "flat.json"
    record.write_text(json.dumps(select_point([{"C": 3.0, "eps": 0.1, "validation_log_loss": 0.1}], tuned=("C",))))
    assert resolve_flat({"C": "auto", "eps": 0.1, "bias": 1.0}, [record]) == {"C": 3.0, "eps": 0.1, "bias": 1.0}
    assert resolve_flat({"C": 2.0, "eps": 0.1}, []) == {"C": 2.0, "eps": 0.1}


def test_validation_log_loss_is_the_mean_negative_log_probability_of_the_true_class():
    P = np.array([[0.5, 0.5], [0.9, 0.1], [1.0, 0.0]])
    assert validation_log_loss(P, np.array([0, 0, 0])) == pytest.approx(-(np.log(0.5) + np.log(0.9)) / 3)
    assert math.isfinite(validation_log_loss(P, np.array([1, 1, 1])))  # a zero probability is floored
    with pytest.raises(ValueError):
        validation_log_loss(P, np.array([0, 2, 0]))


def test_the_chosen_values_reach_table5_with_the_grid_and_the_edge():
    datasets = {"mine": {"flat": {"C": "auto", "eps": 0.1}, "hsg": {"enabled": False}, "hf": {"enabled": False}},
                "paperlike": {"paper": "DBpedia", "flat": {"C": 100000.0, "eps": 0.1}}}
    record = select_point([{"C": c, "eps": 0.1, "validation_log_loss": s}
                           for c, s in ((1.0, 0.5), (10.0, 0.2), (100.0, 0.1))], tuned=("C",))
    t = table5_vs_paper(datasets, ["mine", "paperlike"], {"paperlike": ("DBpedia", "same")}, tuned={"mine": record})
    mine, paper = t.iloc[0], t.iloc[1]
    assert mine["full_C"] == 100.0 and mine["full_eps"] == 0.1
    assert mine["full_C_auto"] == "auto: chose 100 from grid 1, 10, 100 (the largest value: the best may lie beyond the grid)"
    assert mine["full_C_edge"] == "largest" and mine["full_eps_auto"] == ""
    # the paper's datasets keep Table 5's values (no auto)
    assert paper["full_C"] == 100000.0 and paper["full_C_auto"] == "" and paper["full_C_paper"] == 100000
    with pytest.raises(ValueError, match="no tuning record"):
        table5_vs_paper(datasets, ["mine"], {})


@pytest.mark.parametrize("key", ["M", "efC"])
def test_auto_for_the_index_shape_is_refused_naming_the_key(key):
    cfg = {"run": ["mine"], "datasets": {"mine": {"source": {"synthetic": {"n_classes": 4}}, "hsg": {key: "auto"}}}}
    cfg = validate_config(cfg)
    with pytest.raises(ConfigError) as info:
        check_dataset("mine", cfg["datasets"]["mine"])
    assert str(info.value) == (
        f"config: datasets.mine.hsg.{key}: 'auto' is not supported (the HNSW index is built once from hsg.M and "
        "hsg.efC; the validation rows choose only flat.C/eps, hf.C/eps/max_leaves and hsg.k/ef); give a number "
        "(the paper's Table 5 lists its values)")


@pytest.mark.parametrize("section, key", [("flat", "C"), ("hsg", "k"), ("hf", "max_leaves")])
def test_auto_on_a_model_outputs_dataset_is_refused_naming_the_key(section, key):
    entry = {"files": {"s.npy": {"path": "/x/s.npy"}, "l.npy": {"path": "/x/l.npy"}},
             "format": {"kind": "model_outputs", "outputs": "probabilities", "parts": {"test": {"scores": "s.npy", "labels": "l.npy"}}},
             section: {key: "auto"}}
    cfg = validate_config({"run": ["mine"], "datasets": {"mine": entry}})
    with pytest.raises(ConfigError) as info:
        check_dataset("mine", cfg["datasets"]["mine"])
    assert str(info.value) == (f"config: datasets.mine.{section}.{key}: 'auto' chooses a hyper-parameter of svbop's "
                               "own models on the validation rows, and a model's outputs train none; remove it")


@pytest.mark.parametrize("section, key", [("hf", "C"), ("hf", "eps"), ("hf", "max_leaves"), ("hsg", "k"), ("hsg", "ef")])
def test_auto_for_the_trees_and_hsg_queries_passes_the_config_checks(section, key):
    cfg = {"run": ["mine"], "datasets": {"mine": {"source": {"synthetic": {"n_classes": 4}}, section: {key: "auto"}}}}
    cfg = validate_config(cfg)
    check_dataset("mine", cfg["datasets"]["mine"])
    assert cfg["datasets"]["mine"][section][key] == "auto"


def test_flat_auto_passes_the_config_checks():
    cfg = validate_config({"run": ["mine"], "datasets": {"mine": {"source": {"synthetic": {"n_classes": 4}},
                                                                  "flat": {"C": "auto", "eps": "auto"}}}})
    check_dataset("mine", cfg["datasets"]["mine"])
    assert cfg["datasets"]["mine"]["flat"]["C"] == "auto"


# --- SVBOP-HF's trees and SVBOP-HSG's queries ------------------------------------------------------


def test_hf_auto_picks_the_interior_best_C_of_a_2means_tree():
    from svbop.trees import balanced_kmeans_tree, train_tree
    from svbop.tuning import HF_AXES, score_hf_point

    Xt, yt, Xv, yv, K = _problem()
    points = [score_hf_point(Xt, yt, Xv, yv, K, tree="kmeans", C=c, eps=0.1, max_leaves=2) for c in GRID]
    # the oracle: the same tree trained by hand at each C, scored by scikit-learn's log-loss
    shape = balanced_kmeans_tree(Xt, yt, K, max_leaves=2, eps=1e-3, seed=0)
    oracle = [_independent_log_loss(train_tree(Xt, yt, shape, C=c, eps=0.1, progress=False), Xv, yv, K) for c in GRID]
    best = GRID[int(np.argmin(oracle))]
    assert GRID[0] < best < GRID[-1] and oracle[0] > min(oracle) + 0.3
    choice = select_point(points, tuned=("C",), axes=HF_AXES)
    assert choice["C"] == best and choice["edge"] == {"C": ""} and choice["max_leaves"] == 2
    np.testing.assert_allclose([p["validation_log_loss"] for p in points], oracle, rtol=1e-6)
    # a grid that stops short of the best C: its largest value is chosen, and flagged
    short = select_point([p for p in points if p["C"] < best], tuned=("C",), axes=HF_AXES)
    assert short["edge"]["C"] == "largest" and "the largest value" in choice_text(short, "C")


def test_hf_grid_is_per_tree_kind_and_a_predefined_tree_has_no_max_leaves(tmp_path):
    from svbop.tuning import (
        hf_grid,
        parse_point_label,
        point_label,
        resolve_hf,
        tree_keys,
    )

    hf = {"C": "auto", "eps": 0.1, "max_leaves": "auto", "bias": 1.0}
    tuning = {"hf_C_grid": [1, 10], "max_leaves_grid": [5, 20]}
    kmeans, predefined = hf_grid(hf, tuning, "kmeans"), hf_grid(hf, tuning, "predefined")
    assert len(kmeans) == 4 and {"C": 10.0, "eps": 0.1, "max_leaves": 5} in kmeans
    assert predefined == [{"C": 1.0, "eps": 0.1}, {"C": 10.0, "eps": 0.1}]
    assert hf_grid({"C": 1.0, "eps": 0.1, "max_leaves": "auto"}, tuning, "predefined") == []  # nothing to tune
    for p in kmeans + predefined:
        keys = tree_keys("kmeans" if "max_leaves" in p else "predefined")
        assert parse_point_label(point_label(p, keys), keys, integer=("max_leaves",)) == p
    for bad in ([1], [2.5], [5, 5]):
        with pytest.raises(ValueError, match="tuning.max_leaves_grid"):
            hf_grid(hf, {"max_leaves_grid": bad}, "kmeans")
    record = tmp_path / "hf_kmeans.json"
    record.write_text(json.dumps(select_point([{"C": 10.0, "eps": 0.1, "max_leaves": 20, "validation_log_loss": 0.3}],
                                              tuned=("C", "max_leaves"), axes={"C": 1, "eps": -1, "max_leaves": -1})))
    assert resolve_hf(hf, "kmeans", [record]) == {"C": 10.0, "eps": 0.1, "max_leaves": 20, "bias": 1.0}
    assert resolve_hf({**hf, "C": 3.0}, "predefined", []) == {"C": 3.0, "eps": 0.1, "max_leaves": None, "bias": 1.0}
    with pytest.raises(ValueError, match=r"hf \(kmeans tree\): C, max_leaves is 'auto' but 0 tuning records"):
        resolve_hf(hf, "kmeans", [])


def _hsg_problem():
    """400 random classes and a deliberately poor HNSW graph (M 4, efC 10): a small ef misses classes."""
    from svbop.index import HNSWIndex
    from svbop.linear import LinearModel

    rng = np.random.default_rng(0)
    K, D, N = 400, 20, 300
    model = LinearModel(rng.normal(size=(K, D)), np.zeros(K), np.arange(K))
    X = rng.normal(size=(N, D)) * 1.5
    S = X @ model.W.T
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = np.array([rng.choice(K, p=p) for p in P])
    return model, HNSWIndex.from_model(model, M=4, ef_construction=10), X, y


def test_hsg_auto_keeps_the_cheapest_point_within_the_tolerance_of_full_as_brute_force_does():
    from svbop.hsg import predict_sets_hsg
    from svbop.tuning import (
        full_validation_utility,
        hsg_grid,
        score_hsg_point,
        select_hsg_point,
    )

    model, index, X, y = _hsg_problem()
    grid = hsg_grid({"k": "auto", "ef": "auto"}, {"hsg_k_grid": [2, 8], "hsg_ef_grid": [4, 16, 64, 256]})
    assert {"k": 8, "ef": 8} in grid and {"k": 8, "ef": 4} not in grid  # ef below k is the search ef = k
    points = [score_hsg_point(model, index, X, y, "fbeta:beta=1", k=p["k"], ef=p["ef"]) for p in grid]
    reference = full_validation_utility(model, X, y, "fbeta:beta=1")
    choice = select_hsg_point(points, reference, tolerance=0.02)

    # brute force: F1 of every set by hand (2 / (|s| + 1) when the true class is in it), and every point
    # in the order of its first query's efSearch, then k
    def f1(sets):
        return np.mean([2.0 / (len(s) + 1) if y[i] in s else 0.0 for i, s in enumerate(sets)])

    exact = f1([np.argsort(-(model.W @ x))[:1] for x in X])  # sanity: F1 of top-1 below Full's
    assert exact <= reference + 1e-12
    brute = sorted(grid, key=lambda p: (max(p["ef"], p["k"]), p["k"]))
    utilities = {(p["k"], p["ef"]): f1(list(predict_sets_hsg(model, index, X, "fbeta:beta=1", k=p["k"], ef=p["ef"])))
                 for p in brute}
    cheapest = next(p for p in brute if utilities[(p["k"], p["ef"])] >= reference - 0.02)
    assert (choice["k"], choice["ef"]) == (cheapest["k"], cheapest["ef"]) and choice["reached"]
    # the rule is not trivial here: the cheapest point is too inaccurate, the chosen one is not the largest
    assert utilities[(2, 4)] < reference - 0.1 and choice["ef"] < 256
    assert choice["edge"] == {"k": "smallest", "ef": ""}  # k = 2 is its grid's smallest: a smaller k may do too
    # nothing within the tolerance: the most accurate point, flagged
    none = select_hsg_point([p for p in points if p["ef"] <= 16], reference, tolerance=0.0)
    assert not none["reached"] and none["ef"] == 16 and none["edge"]["ef"] == "largest"
    assert "no point came within 0 of SVBOP-Full's validation utility" in choice_text(none, "ef")


def test_hsg_grid_and_records(tmp_path):
    from svbop.tuning import DEFAULT_HSG_TOLERANCE, hsg_grid, resolve_hsg

    assert hsg_grid({"k": 100, "ef": None}) == []
    assert hsg_grid({"k": "auto", "ef": None}, {"hsg_k_grid": [10, 20]}) == [{"k": 10, "ef": None}, {"k": 20, "ef": None}]
    assert hsg_grid({"k": 30, "ef": "auto"}, {"hsg_ef_grid": [10, 50]}) == [{"k": 30, "ef": 30}, {"k": 30, "ef": 50}]
    schema = validate_config({"run": []})["tuning"]
    assert schema["hsg_tolerance"] == DEFAULT_HSG_TOLERANCE
    with pytest.raises(ValueError, match="tuning.hsg_k_grid"):
        hsg_grid({"k": "auto"}, {"hsg_k_grid": [0]})
    record = tmp_path / "hsg.json"
    record.write_text(json.dumps({"k": 20, "ef": None, "grid": {"k": [10, 20]}, "edge": {"k": ""}}))
    assert resolve_hsg({"k": "auto", "ef": None, "M": 20}, [record]) == {"k": 20, "ef": None, "M": 20}
    with pytest.raises(ValueError, match="hsg: k is 'auto' but 0 tuning records"):
        resolve_hsg({"k": "auto", "ef": None}, [])


def test_hf_and_hsg_choices_reach_table5_per_tree():
    datasets = {"mine": {"flat": {"C": 1.0, "eps": 0.1},
                         "hsg": {"enabled": True, "M": 20, "efC": 100, "k": "auto", "ef": None},
                         "hf": {"enabled": True, "trees": ["kmeans", "predefined"], "C": "auto", "eps": 0.1,
                                "max_leaves": "auto", "kmeans_eps": 0.001}}}
    kmeans = select_point([{"C": c, "eps": 0.1, "max_leaves": m, "validation_log_loss": s}
                           for c, m, s in ((1.0, 5, 0.5), (10.0, 5, 0.2), (1.0, 20, 0.6), (10.0, 20, 0.3))],
                          tuned=("C", "max_leaves"), axes={"C": 1, "eps": -1, "max_leaves": -1})
    predefined = select_point([{"C": c, "eps": 0.1, "validation_log_loss": s} for c, s in ((1.0, 0.1), (10.0, 0.4))],
                              tuned=("C",))
    from svbop.tuning import select_hsg_point

    hsg = select_hsg_point([{"k": k, "ef": None, "validation_utility": u} for k, u in ((10, 0.5), (50, 0.6), (100, 0.6))],
                           reference=0.6, tuned=("k",))
    t = table5_vs_paper(datasets, ["mine"], {}, tuned={"mine": {"hsg": hsg, "hf_kmeans": kmeans, "hf_predefined": predefined}})
    row = t.iloc[0]
    assert row["hsg_k"] == 50 and row["hsg_k_auto"] == "auto: chose 50 from grid 10, 50, 100" and row["hsg_ef"] == "= k"
    assert row["hf_C"] == "10 (kmeans) / 1 (predefined)"
    assert row["hf_C_auto"] == ("kmeans tree: auto: chose 10 from grid 1, 10 (the largest value: the best may lie beyond "
                                "the grid); predefined tree: auto: chose 1 from grid 1, 10 (the smallest value: the best "
                                "may lie beyond the grid)")
    assert row["hf_C_edge"] == "the largest value for the kmeans tree; the smallest value for the predefined tree"
    assert row["hf_max_leaves"] == 5 and row["hf_max_leaves_auto"].startswith("kmeans tree: auto: chose 5 from grid 5, 20")
    assert row["hf_max_leaves_edge"] == "smallest"
    with pytest.raises(ValueError, match=r"datasets\.mine\.hf\.C is 'auto' but no tuning record .*hf_predefined"):
        table5_vs_paper(datasets, ["mine"], {}, tuned={"mine": {"hsg": hsg, "hf_kmeans": kmeans}})
