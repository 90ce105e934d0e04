"""Glue: one SVBOP-HF tree model at one grid point, built and trained on the training rows and scored
on the validation rows (rule tune_hf_point; svbop.tuning.score_hf_point)."""

import json
import logging

from svbop.datasets import Dataset, load_split
from svbop.io import atomic_path, load_matrix
from svbop.logs import to_log_file
from svbop.tuning import score_hf_point

to_log_file(snakemake.log[0])
cfg, tree, point = snakemake.params.hf, snakemake.wildcards.tree, snakemake.params.point
X = load_matrix(snakemake.input.features)
dataset = Dataset.load(snakemake.input.dataset)
split = load_split(snakemake.input.split)
train, validation = split["train"], split["validation"]
if len(validation) == 0:
    raise ValueError(f"{snakemake.input.split}: no validation rows to choose hf.C/eps/max_leaves on (set split.validation)")
if tree == "predefined" and dataset.hierarchy is None:
    raise ValueError(f"{snakemake.input.dataset} has no class hierarchy, so datasets.{snakemake.wildcards.dataset}.hf.trees "
                     "cannot include 'predefined': give the dataset a `hierarchy:` or use trees: [kmeans]")
result = score_hf_point(X[train], dataset.y[train], X[validation], dataset.y[validation], dataset.n_classes,
                        tree=tree, hierarchy=dataset.hierarchy, C=point["C"], eps=point["eps"],
                        max_leaves=point.get("max_leaves"), kmeans_eps=cfg["kmeans_eps"], bias=cfg["bias"],
                        clip=cfg["clip"], seed=snakemake.params.seed, n_jobs=snakemake.threads)
with atomic_path(snakemake.output.point) as tmp:
    tmp.write_text(json.dumps(result, indent=2) + "\n")
logging.info("%s tree, %s: validation log-loss %.4f, top-1 %.2f %%, %d internal nodes, %.1f s of training",
             tree, snakemake.wildcards.point, result["validation_log_loss"], 100 * result["validation_top1"],
             result["internal_nodes"], result["train_seconds"])
