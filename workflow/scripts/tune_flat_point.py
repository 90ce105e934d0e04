"""Glue: the flat model at one grid point, trained on the training rows and scored on the validation
rows (rule tune_flat_point; svbop.tuning)."""

import json
import logging

from svbop.datasets import Dataset, load_split
from svbop.io import atomic_path, load_matrix
from svbop.logs import to_log_file
from svbop.tuning import score_point

to_log_file(snakemake.log[0])
cfg = snakemake.params.flat
X = load_matrix(snakemake.input.features)
dataset = Dataset.load(snakemake.input.dataset)
split = load_split(snakemake.input.split)
train, validation = split["train"], split["validation"]
if len(validation) == 0:
    raise ValueError(f"{snakemake.input.split}: no validation rows to choose flat.C/eps on (set split.validation)")
point = score_point(X[train], dataset.y[train], X[validation], dataset.y[validation], dataset.n_classes,
                    C=snakemake.params.C, eps=snakemake.params.eps, bias=cfg["bias"], clip=cfg["clip"],
                    n_jobs=snakemake.threads)
with atomic_path(snakemake.output.point) as tmp:
    tmp.write_text(json.dumps(point, indent=2) + "\n")
logging.info("C %g, eps %g: validation log-loss %.4f, top-1 %.2f %%, %.1f s of training",
             point["C"], point["eps"], point["validation_log_loss"], 100 * point["validation_top1"],
             point["train_seconds"])
