"""Glue: one part (a group of internal nodes) of an SVBOP-HF tree model (rule train_tree_part)."""

import json
import logging
import time

from svbop.datasets import Dataset, load_split
from svbop.io import atomic_path, load_matrix
from svbop.logs import to_log_file
from svbop.trees import load_tree, split_nodes, train_tree
from svbop.tuning import resolve_hf

to_log_file(snakemake.log[0])
cfg = resolve_hf(snakemake.params.hf, snakemake.wildcards.tree, snakemake.input.tuned)  # hf: {C/eps: auto}: the chosen values
part, parts = snakemake.params.part, snakemake.params.parts
tree = load_tree(snakemake.input.tree)
X = load_matrix(snakemake.input.features)
dataset = Dataset.load(snakemake.input.dataset)
train = load_split(snakemake.input.split)["train"]
nodes = split_nodes(tree, dataset.y[train], parts)[part]
start = time.perf_counter()
# clipped as each node is trained (the same weights as clipping the part afterwards, without the unclipped
# part in memory: about 10^9 weights at K = 10^5)
model = train_tree(X[train], dataset.y[train], tree, C=cfg["C"], eps=cfg["eps"], bias=cfg["bias"], nodes=nodes,
                   n_jobs=snakemake.threads, clip=cfg["clip"])
seconds = time.perf_counter() - start
model.save(snakemake.output.model)
info = {"part": part, "parts": parts, "nodes": int(nodes.size), "train_seconds": seconds,
        "threads_used": snakemake.threads, "nnz": int(model.W.nnz)}
with atomic_path(snakemake.output.info) as tmp:
    tmp.write_text(json.dumps(info, indent=2) + "\n")
logging.info("part %d of %d: %d nodes in %.1f s", part + 1, parts, nodes.size, seconds)
