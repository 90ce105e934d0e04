"""Glue: the class tree of SVBOP-HF, predefined or balanced 2-means (rule build_tree)."""

import json
import logging
import time

from svbop.datasets import Dataset, load_split
from svbop.io import atomic_path, load_matrix
from svbop.logs import to_log_file
from svbop.trees import balanced_kmeans_tree, save_tree, tree_from_hierarchy
from svbop.tuning import resolve_hf

to_log_file(snakemake.log[0])
kind = snakemake.wildcards.tree
cfg = resolve_hf(snakemake.params.hf, kind, snakemake.input.tuned)  # hf: {max_leaves: auto}: the chosen value
dataset = Dataset.load(snakemake.input.dataset)
start = time.perf_counter()
if kind == "predefined":
    if dataset.hierarchy is None:
        raise ValueError(
            f"{snakemake.input.dataset} has no class hierarchy, so datasets.{snakemake.wildcards.dataset}.hf.trees "
            "cannot include 'predefined': give the dataset a `hierarchy:` or use trees: [kmeans]"
        )
    tree = tree_from_hierarchy(dataset.hierarchy)
else:
    train = load_split(snakemake.input.split)["train"]
    X = load_matrix(snakemake.input.features)
    tree = balanced_kmeans_tree(X[train], dataset.y[train], dataset.n_classes, max_leaves=cfg["max_leaves"],
                                eps=cfg["kmeans_eps"], seed=snakemake.params.seed)
seconds = time.perf_counter() - start
save_tree(snakemake.output.tree, tree)
depth = tree.depth()[: tree.n_classes]
info = {"tree": kind, "K": tree.n_classes, "internal_nodes": tree.n_nodes - tree.n_classes,
        "depth_min": int(depth.min()), "depth_max": int(depth.max()), "build_seconds": seconds}
if kind == "kmeans":
    info.update(max_leaves=cfg["max_leaves"], kmeans_eps=cfg["kmeans_eps"], seed=snakemake.params.seed)
    if snakemake.params.hf["max_leaves"] == "auto":
        info["max_leaves_from"] = snakemake.input.tuned[0]
with atomic_path(snakemake.output.info) as tmp:
    tmp.write_text(json.dumps(info, indent=2) + "\n")
logging.info("%s tree: %d internal nodes, leaf depth %d..%d, %.1f s", kind, info["internal_nodes"],
             info["depth_min"], info["depth_max"], seconds)
