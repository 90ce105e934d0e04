"""Glue: one part (a contiguous range of classes) of the flat liblinear model (rule train_flat_part)."""

import json
import logging
import time

from svbop.datasets import Dataset, load_split
from svbop.io import atomic_path, load_matrix
from svbop.linear import class_parts, train_ovr
from svbop.logs import to_log_file
from svbop.tuning import resolve_flat

to_log_file(snakemake.log[0])
# flat: {C: auto}: the value chosen on the validation rows (rule tune_flat)
cfg = resolve_flat(snakemake.params.flat, snakemake.input.tuned)
part, parts = snakemake.params.part, snakemake.params.parts
X = load_matrix(snakemake.input.features)
dataset = Dataset.load(snakemake.input.dataset)
train = load_split(snakemake.input.split)["train"]
classes = class_parts(dataset.n_classes, parts)[part]
start = time.perf_counter()
model = train_ovr(X[train], dataset.y[train], dataset.n_classes, C=cfg["C"], eps=cfg["eps"], bias=cfg["bias"],
                  classes=classes, clip=cfg["clip"], n_jobs=snakemake.threads)
seconds = time.perf_counter() - start
model.save(snakemake.output.model)
info = {"part": part, "parts": parts, "n_classes": int(classes.size), "train_seconds": seconds,
        "threads_used": snakemake.threads, "nnz": model.nnz}
with atomic_path(snakemake.output.info) as tmp:
    tmp.write_text(json.dumps(info, indent=2) + "\n")
logging.info("part %d of %d: %d classes in %.1f s", part + 1, parts, classes.size, seconds)
