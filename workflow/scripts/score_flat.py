"""Glue: class probabilities (softmax of the one-vs-rest scores) of the held-out rows (rule score_flat)."""

import logging

from svbop.datasets import Dataset, load_split
from svbop.io import load_matrix, save_arrays
from svbop.linear import LinearModel
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
model = LinearModel.load(snakemake.input.model)
X = load_matrix(snakemake.input.features)
y = Dataset.load(snakemake.input.dataset).y
split = load_split(snakemake.input.split)
arrays = {}
for part in ("validation", "calibration", "test"):
    rows = split[part]
    arrays[f"P_{part}"] = model.predict_proba(X[rows])
    arrays[f"y_{part}"] = y[rows]
    logging.info("%s: %d rows scored", part, len(rows))
save_arrays(snakemake.output[0], **arrays)
