"""Glue: the flat liblinear model on the training rows (rule train_flat)."""

import json
import logging
import time

from svbop.datasets import Dataset, load_split
from svbop.io import atomic_path, load_matrix
from svbop.linear import train_ovr
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
cfg = snakemake.params.flat
X = load_matrix(snakemake.input.features)
dataset = Dataset.load(snakemake.input.dataset)
train = load_split(snakemake.input.split)["train"]
start = time.perf_counter()
model = train_ovr(X[train], dataset.y[train], dataset.n_classes, C=cfg["C"], eps=cfg["eps"], bias=cfg["bias"],
                  n_jobs=snakemake.threads)
seconds = time.perf_counter() - start
model.save(snakemake.output.model)
info = {**cfg, "solver": "liblinear -s 7 (L2-regularised logistic regression, dual), one-vs-rest",
        "threads_used": snakemake.threads, "train_seconds": seconds,
        "n_train": int(len(train)), "K": dataset.n_classes, "D": int(X.shape[1])}
with atomic_path(snakemake.output.info) as tmp:
    tmp.write_text(json.dumps(info, indent=2) + "\n")
logging.info("trained %d classes x %d features in %.1f s", dataset.n_classes, X.shape[1], seconds)
