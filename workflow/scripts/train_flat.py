"""Glue: the flat liblinear model, merged from its parts (rule train_flat)."""

import json
import logging

from svbop.io import atomic_path
from svbop.linear import LinearModel, merge_models
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
cfg = snakemake.params.flat
parts = [LinearModel.load(path) for path in snakemake.input.parts]
infos = [json.loads(open(path).read()) for path in snakemake.input.infos]
model = merge_models(parts)
model.save(snakemake.output.model)
info = {**cfg, "solver": "liblinear -s 7 (L2-regularised logistic regression, dual), one-vs-rest",
        "threads_used": max(i["threads_used"] for i in infos),
        "train_seconds": sum(i["train_seconds"] for i in infos),
        "train_seconds_longest_part": max(i["train_seconds"] for i in infos),
        "K": model.n_classes, "D": model.n_features, "nnz": model.nnz, "density": model.density}
with atomic_path(snakemake.output.info) as tmp:
    tmp.write_text(json.dumps(info, indent=2) + "\n")
logging.info("merged %d parts: %d classes x %d features, density %.4g, %.1f s of training",
             len(parts), model.n_classes, model.n_features, model.density, info["train_seconds"])
