"""The rehearsals of the paper's two largest datasets (workflow/configs/rehearsal.yaml).

The real rehearsal (LSHTC1's and DMOZ's K, D and test rows) takes hours; here it is planned with
``snakemake -n`` as it is, and run end to end for one dataset shrunk by a config file laid over it
(same keys, so the same code paths: a random class tree of the same leaf depths, long-tailed
classes, the source's test part, full-vocabulary tf-idf, clipped weights in parts, the 2-means
tree, the HNSW index, every SVBOP variant and baseline), with small K, D and N.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from test_workflow import ROOT, _copy_workflow, _snakemake

REHEARSAL = ROOT / "workflow" / "configs" / "rehearsal.yaml"

# Small K, D and N; everything else (tree depths, class-size tail, clipping, parts, index and tree
# parameters' kinds) as in rehearsal.yaml.
SHRINK = """
run: [rehearsal_lshtc1]
utilities: ["fbeta:beta=1", "credal:delta=2.2,gamma=1.2"]
baselines: {top_s: [1, 3], icp_epsilon: [0.1]}
datasets:
  rehearsal_lshtc1:
    source:
      synthetic: {n_classes: 90, n_features: 3000, n_samples: 1500, n_test: 400, doc_length: 60}
    split: {test: source, validation: 150, calibration: 150}
    flat: {C: 10, clip: 0.01, parts: 2}
    hsg: {M: 8, efC: 50, k: 10}
    hf: {C: 10, clip: 0.01, max_leaves: 8, parts: 2}
"""


def test_the_rehearsal_plans_every_stage_for_both_datasets():
    config = yaml.safe_load(REHEARSAL.read_text())
    assert config["run"] == ["rehearsal_lshtc1", "rehearsal_dmoz"]
    shapes = {name: config["datasets"][name]["source"]["synthetic"] for name in config["run"]}
    # the paper's Table 1: K, D, test rows
    assert [(s["n_classes"], s["n_features"], s["n_test"]) for s in shapes.values()] == [
        (12166, 381571, 34905),
        (11939, 833484, 38340),
    ]
    # --forceall: every job, whatever a local rehearsal already made in the checkout
    result = _snakemake("-n", "--forceall", "--cores", "2", "--configfile", str(REHEARSAL), "--quiet", "rules")
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stdout + result.stderr
    counts = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            counts[parts[0]] = int(parts[1])
    # per dataset: 16 flat parts, 4 tree parts, the index, 4 utilities for each SVBOP variant
    assert counts.get("train_flat_part", 0) >= 32 and counts.get("train_tree_part", 0) >= 8, text[-2000:]
    for rule in ("build_index", "predict_svbop_full", "predict_svbop_full_naive", "predict_svbop_hsg",
                 "predict_svbop_hf", "predict_threshold", "predict_top_s", "predict_icp", "report_html"):
        assert counts.get(rule, 0) >= 1, f"{rule} is not planned:\n{text[-2000:]}"


@pytest.fixture(scope="module")
def shrunk_run(tmp_path_factory):
    workdir = _copy_workflow(tmp_path_factory.mktemp("rehearsal"))
    (workdir / "shrink.yaml").write_text(SHRINK)
    result = _snakemake(
        "--cores", "2", "--configfile", str(REHEARSAL), "shrink.yaml", "--", "results/rehearsal_lshtc1/metrics.tsv",
        cwd=workdir,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir


def test_the_shrunk_rehearsal_runs_every_method_on_the_source_test_part(shrunk_run):
    from svbop.datasets import Dataset, load_split
    from svbop.io import load_matrix
    from svbop.linear import LinearModel

    dataset = Dataset.load(shrunk_run / "data/rehearsal_lshtc1/dataset.npz")
    split = load_split(shrunk_run / "data/rehearsal_lshtc1/split.npz")
    assert dataset.synthetic and dataset.hierarchy.depth()[:90].max() == 4  # leaf_depths: depth 4 at most
    np.testing.assert_array_equal(split["test"], np.arange(1100, 1500))  # the source's test part
    assert (split["validation"].size, split["calibration"].size) == (150, 150)
    X = load_matrix(shrunk_run / "results/rehearsal_lshtc1/features/tfidf.npz")
    assert X.shape == (1500, 3000)  # drop_unseen: false keeps D whole
    model = LinearModel.load(shrunk_run / "results/rehearsal_lshtc1/models/flat.npz")
    assert model.clip_threshold == 0.01 and model.density < 1

    metrics = pd.read_csv(shrunk_run / "results/rehearsal_lshtc1/metrics.tsv", sep="\t")
    assert set(metrics["method"]) >= {"svbop_full", "svbop_full_naive", "svbop_hsg", "svbop_hf_kmeans", "threshold",
                                      "top_s", "icp"}
    assert (metrics["n_test"] == 400).all()
    scores = ["recall_pct", "mean_size", "fbeta_1_pct", "credal_2.2_1.2_pct"]
    full = metrics[metrics.method == "svbop_full"].set_index("param")[scores]
    naive = metrics[metrics.method == "svbop_full_naive"].set_index("param")[scores]
    pd.testing.assert_frame_equal(full, naive)  # the paper's Full gives SVBOP-Full's sets
    for rule in ("train_flat_part", "score_flat", "predict_svbop_full_naive", "predict_icp", "evaluate"):
        assert list((shrunk_run / "results/benchmarks" / rule).glob("rehearsal_lshtc1*.tsv")), rule
