"""Glue: the flat liblinear model, merged from its parts (rule train_flat)."""

import json
import logging

from svbop.io import atomic_path
from svbop.linear import LinearModel, merge_models
from svbop.logs import to_log_file
from svbop.tuning import read_choice, resolve_flat

to_log_file(snakemake.log[0])
cfg = resolve_flat(snakemake.params.flat, snakemake.input.tuned)
parts = [LinearModel.load(path) for path in snakemake.input.parts]
infos = [json.loads(open(path).read()) for path in snakemake.input.infos]
model = merge_models(parts)
model.save(snakemake.output.model)
tuned = {k: "auto" for k, v in snakemake.params.flat.items() if v == "auto"}
if tuned:  # where the values came from: the grid, the score and any edge (rules/tune.smk)
    record = read_choice(list(snakemake.input.tuned)[0])
    tuned = {"auto": sorted(tuned), "grid": record["grid"], "edge": record["edge"], "score": record["score"]}
info = {**cfg, **({"tuning": tuned} if tuned else {}), "solver": "liblinear -s 7 (L2-regularised logistic regression, dual), one-vs-rest",
        "threads_used": max(i["threads_used"] for i in infos),
        "train_seconds": sum(i["train_seconds"] for i in infos),
        "train_seconds_longest_part": max(i["train_seconds"] for i in infos),
        "K": model.n_classes, "D": model.n_features, "nnz": model.nnz, "density": model.density}
with atomic_path(snakemake.output.info) as tmp:
    tmp.write_text(json.dumps(info, indent=2) + "\n")
logging.info("merged %d parts: %d classes x %d features, density %.4g, %.1f s of training",
             len(parts), model.n_classes, model.n_features, model.density, info["train_seconds"])
