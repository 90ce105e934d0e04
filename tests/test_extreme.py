"""Issue 49: the learnable extreme problem (benchmarks/extreme_problem.py), its files as svbop and napkinXC
read them, training with per-node clipping, and workflow/configs/extreme.yaml (planned at a tiny K in
the default run; run end to end, slow)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from svbop.datasets.libsvm import read_libsvm
from svbop.trees import balanced_kmeans_tree, train_tree

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from extreme_problem import ExtremeProblem, main as generate_main, write_problem  # noqa: E402

EXTREME = ROOT / "workflow" / "configs" / "extreme.yaml"


def _read(folder: Path):
    data = read_libsvm(folder, {"train": ["train.txt"], "test": ["test.txt"]})
    y = np.array([int(c) for c in data.class_names])[data.y]
    return data.X, y, data.part == "train"


def test_generator_is_seeded_and_puts_every_class_in_training(tmp_path, monkeypatch):
    import extreme_problem

    monkeypatch.setattr(extreme_problem, "BLOCK", 97)  # several blocks, each with its own generator
    problem = ExtremeProblem(classes=230, train_per_class=2, test_rows=300, seed=7)
    a = write_problem(problem, tmp_path / "a", log=lambda m: None)
    write_problem(problem, tmp_path / "b", log=lambda m: None)
    write_problem(ExtremeProblem(classes=230, train_per_class=2, test_rows=300, seed=8), tmp_path / "c",
                  log=lambda m: None)
    for name in ("train.txt", "test.txt"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert (tmp_path / "a" / name).read_bytes() != (tmp_path / "c" / name).read_bytes()
    assert a["n_train"] == 460 and a["n_test"] == 300 and a["n_features"] == problem.n_features
    X, y, train = _read(tmp_path / "a")
    assert np.array_equal(np.bincount(y[train], minlength=230), np.full(230, 2))
    np.testing.assert_allclose(sp.linalg.norm(X, axis=1), 1.0, rtol=1e-5)  # L2-normalised rows
    assert X.shape[1] <= problem.n_features
    first = (tmp_path / "a" / "train.txt").read_text().splitlines()[0].split()
    idx = [int(t.split(":")[0]) for t in first[1:]]
    assert idx == sorted(set(idx)) and min(idx) >= 1  # 1-based, sorted, unique: napkinXC's reader takes it


def test_generated_rows_carry_their_class_and_hierarchy_features():
    problem = ExtremeProblem(classes=1000, branching=10, own=10, own_per_row=4, sibling_per_row=0, seed=1)
    labels = np.array([0, 537, 999])
    indptr, indices, values = problem.rows(labels, np.random.default_rng(0))
    offsets = problem.level_offsets()
    for r, c in enumerate(labels):
        feats = indices[indptr[r]:indptr[r + 1]]
        own = feats[feats >= problem.own_offset] - problem.own_offset
        assert own.size == 4 and (own // problem.own == c).all()
        for h, offset in enumerate(offsets, start=1):  # heights 1 and 2 (the root's has no features)
            at = feats[(feats >= offset) & (feats < offset + problem.level_sizes()[h - 1] * problem.shared)]
            assert at.size and ((at - offset) // problem.shared == c // 10**h).all()
    assert problem.depth == 3 and problem.level_sizes() == [100, 10]


def test_generator_refuses_bad_parameters_with_their_name(capsys):
    with pytest.raises(ValueError, match="own_per_row \\(12\\) must not exceed own \\(10\\)"):
        ExtremeProblem(classes=10, own_per_row=12)
    with pytest.raises(ValueError, match="classes must be an integer >= 1"):
        ExtremeProblem(classes=0)
    with pytest.raises(SystemExit):
        generate_main(["--classes", "10", "--branching", "1", "--out", "unused"])
    assert "branching must be at least 2" in capsys.readouterr().err


def test_the_problem_is_learnable_by_a_trained_tree(tmp_path):
    """A 2-means tree with liblinear nodes finds most test rows' class (chance: 1 in 300)."""
    write_problem(ExtremeProblem(classes=300, test_rows=400, seed=3), tmp_path, log=lambda m: None)
    X, y, train = _read(tmp_path)
    tree = balanced_kmeans_tree(X[train], y[train], 300, max_leaves=20, n_init=1)
    model = train_tree(X[train], y[train], tree, C=10, progress=False)
    accuracy = (model.predict(X[~train]) == y[~train]).mean()
    assert accuracy > 0.5, accuracy


def test_clipping_while_training_equals_clipping_after(tmp_path):
    write_problem(ExtremeProblem(classes=120, test_rows=10, seed=4), tmp_path, log=lambda m: None)
    X, y, train = _read(tmp_path)
    tree = balanced_kmeans_tree(X[train], y[train], 120, max_leaves=10, n_init=1)
    after = train_tree(X[train], y[train], tree, C=10, progress=False).clip(0.1)
    during = train_tree(X[train], y[train], tree, C=10, progress=False, clip=0.1)
    assert during.W.nnz == after.W.nnz > 0
    assert (during.W != after.W).nnz == 0 and np.array_equal(during.b, after.b)
    with pytest.raises(ValueError, match="clip must be a finite number >= 0"):
        train_tree(X[train], y[train], tree, clip=-1.0, progress=False)


def _extreme_workdir(tmp_path: Path, classes: int) -> Path:
    from test_workflow import _copy_workflow

    workdir = _copy_workflow(tmp_path)
    write_problem(ExtremeProblem(classes=classes, test_rows=200, seed=0), workdir / "data/extreme/k100000",
                  log=lambda m: None)
    (workdir / "small.yaml").write_text(
        "datasets:\n  extreme100k:\n    hf: {max_leaves: 10, parts: 2, mem_mb: 1000}\n")
    return workdir


TARGET = "results/extreme100k/predictions/svbop_hf_kmeans/fbeta_1.npz"


def test_extreme_config_plans_hf_alone_end_to_end(tmp_path):
    """The config is valid and its documented target plans the generated files' HF chain, without the flat
    model (whose 10^5 one-vs-rest problems would take hours)."""
    pytest.importorskip("snakemake", reason="snakemake is not installed")
    from test_workflow import _snakemake

    assert "python benchmarks/extreme_problem.py --classes 100000 --out data/extreme/k100000" in EXTREME.read_text()
    # the documented command names the target before --configfile (which takes several files and would take it)
    assert f"snakemake {TARGET}" in EXTREME.read_text()
    workdir = _extreme_workdir(tmp_path, 60)
    result = _snakemake(TARGET, "-n", "--cores", "2", "--quiet", "rules", "--configfile",
                        "workflow/configs/extreme.yaml", "small.yaml", cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout + result.stderr
    for rule in ("fetch", "prepare_dataset", "split_dataset", "features_raw", "build_tree", "train_tree_part",
                 "train_tree", "predict_svbop_hf"):
        assert rule in text, (rule, text[-2000:])
    assert "train_flat" not in text and "score_flat" not in text


@pytest.mark.slow
def test_extreme_config_runs_hf_end_to_end(tmp_path):
    pytest.importorskip("snakemake", reason="snakemake is not installed")
    from test_workflow import _snakemake

    workdir = _extreme_workdir(tmp_path, 400)
    result = _snakemake(TARGET, "--cores", "2", "--configfile", "workflow/configs/extreme.yaml", "small.yaml",
                        cwd=workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    timing = json.loads((workdir / TARGET).with_suffix(".json").read_text())
    assert timing
    info = json.loads((workdir / "results/extreme100k/models/hf_kmeans.json").read_text())
    assert info["K"] == 400 and info["nnz"] > 0


TREE_SETS = "results/extreme100k/tree_sets.tsv"


def test_extreme_config_runs_the_trees_guaranteed_sets_end_to_end(tmp_path):
    """extreme.yaml's guaranteed sets from the tree (conformal LAC and APS, risk control of miscoverage and of
    the tree distance) run end to end without the flat model, beside HF's sets in tree_sets.tsv, each
    level's coverage and time per row; the calibration rows are the split's."""
    pytest.importorskip("snakemake", reason="snakemake is not installed")
    import pandas as pd

    from test_workflow import _snakemake

    assert f"snakemake {TREE_SETS}" in EXTREME.read_text()
    workdir = _extreme_workdir(tmp_path, 120)
    result = _snakemake(TREE_SETS, "--cores", "2", "--configfile", "workflow/configs/extreme.yaml", "small.yaml",
                        cwd=workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    text = result.stdout + result.stderr
    assert "train_flat" not in text and "score_flat" not in text
    table = pd.read_csv(workdir / TREE_SETS, sep="\t", keep_default_na=False, dtype={"param": str})
    methods = set(table["method"])
    assert {"tree_lac_kmeans", "tree_aps_kmeans", "tree_risk_miscoverage_kmeans", "tree_risk_hierarchical_kmeans",
            "svbop_hf_kmeans"} <= methods
    lac = table[table["method"] == "tree_lac_kmeans"].set_index("param")
    assert set(lac.index) == {"0.05", "0.10", "0.20"}
    assert (lac["mean_size"].astype(float).diff().dropna() <= 0).all()  # smaller sets at larger epsilon
    assert (table["ms_per_row"].astype(float) > 0).all()
    record = json.loads((workdir / "results/extreme100k/predictions/tree_lac_kmeans/0.10.json").read_text())
    split = np.load(workdir / "data/extreme100k/split.npz")
    assert record["n_calibration"] == split["calibration"].size > 0 and record["n_test"] == split["test"].size


def test_the_page_shows_the_trees_guaranteed_sets(tmp_path):
    """The report's section "Guaranteed sets from the tree" lists every row of a dataset's tree_sets.tsv with
    its method's name, coverage and time per row."""
    from svbop.report.html import _context_tree_sets
    from svbop.report.names import DisplayNames
    from svbop.tree_sets import write_tree_sets

    rows = [{"dataset": "ext", "method": "tree_aps_kmeans", "param": "0.10", "target_coverage_pct": 90.0,
             "coverage_pct": 90.5, "mean_size": 3.2, "calibrated": "q = 0.93", "fit_ms_per_row": 0.2,
             "ms_per_row": 0.11, "n_calibration": 3000, "n_test": 10000},
            {"dataset": "ext", "method": "svbop_hf_kmeans", "param": "fbeta_1", "target_coverage_pct": float("nan"),
             "coverage_pct": 80.0, "mean_size": 2.0, "calibrated": "", "fit_ms_per_row": float("nan"),
             "ms_per_row": 0.08, "n_calibration": 0, "n_test": 10000}]
    write_tree_sets(tmp_path / "tree_sets.tsv", rows)
    ctx = _context_tree_sets([tmp_path / "tree_sets.tsv"], DisplayNames({"ext": "Extreme"}), ["ext"])
    assert ctx[0]["title"] == "Extreme" and len(ctx[0]["rows"]) == 2
    aps, hf = ctx[0]["rows"]
    assert aps["method"] == "conformal APS (randomised) from the tree (kmeans)" and aps["coverage"] == "90.50"
    assert aps["target"] == "90.0" and aps["ms"] == "0.1100" and hf["target"] == "–" and "HF" in hf["method"]
