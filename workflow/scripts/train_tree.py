"""Glue: an SVBOP-HF tree model, merged from its parts (rule train_tree)."""

import json
import logging

from svbop.io import atomic_path
from svbop.logs import to_log_file
from svbop.trees import TreeModel, merge_trees
from svbop.tuning import read_choice, resolve_hf, tree_keys

to_log_file(snakemake.log[0])
model = merge_trees([TreeModel.load(path) for path in snakemake.input.parts])
model.save(snakemake.output.model)
infos = [json.loads(open(path).read()) for path in snakemake.input.infos]
tree_info = json.loads(open(snakemake.input.tree_info).read())
size = model.W.shape[0] * model.W.shape[1]
hf = resolve_hf(snakemake.params.hf, snakemake.wildcards.tree, snakemake.input.tuned)  # `auto`: the chosen values
info = {**hf, "tree": tree_info, "solver": "liblinear -s 7 per internal node",
        "train_seconds": sum(i["train_seconds"] for i in infos),
        "train_seconds_longest_part": max(i["train_seconds"] for i in infos),
        "K": model.n_classes, "D": model.n_features, "nnz": int(model.W.nnz), "density": model.W.nnz / size if size else 0.0}
if snakemake.input.tuned:  # where the `auto` values came from, as train_flat records it
    record = read_choice(snakemake.input.tuned[0], tree_keys(snakemake.wildcards.tree))
    info["tuning"] = {"record": snakemake.input.tuned[0], "score": record["score"], "grid": record["grid"],
                      "edge": record["edge"]}
with atomic_path(snakemake.output.info) as tmp:
    tmp.write_text(json.dumps(info, indent=2) + "\n")
logging.info("merged %d parts: %d nodes, %d non-zero weights, %.1f s of training", len(infos),
             model.tree.n_nodes, model.W.nnz, info["train_seconds"])
