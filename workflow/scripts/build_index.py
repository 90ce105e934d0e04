"""Glue: SVBOP-HSG's HNSW index over the flat model's classes (rule build_index)."""

import json
import logging

from svbop.index import HNSWIndex
from svbop.io import atomic_path
from svbop.linear import LinearModel
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
cfg = snakemake.params.hsg
model = LinearModel.load(snakemake.input.model)
index = HNSWIndex.from_model(model, M=cfg["M"], ef_construction=cfg["efC"], n_threads=snakemake.threads)
index.save(snakemake.output.index)
info = {**cfg, **index.info(), "threads_used": snakemake.threads, "deterministic": snakemake.threads == 1,
        "model_nnz": model.nnz, "model_density": model.density}
with atomic_path(snakemake.output.info) as tmp:
    tmp.write_text(json.dumps(info, indent=2) + "\n")
logging.info("HNSW index: %d classes x %d features (%s) in %.1f s with %d thread(s)",
             index.n_classes, index.n_features, "sparse" if index.sparse else "dense",
             index.build_seconds, snakemake.threads)
