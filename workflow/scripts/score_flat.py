"""Glue: class probabilities (softmax of the one-vs-rest scores) of the held-out rows, in float32
(svbop.io.SCORES_DTYPE), computed in blocks of rows (rule score_flat)."""

import logging

from svbop.datasets import Dataset, load_split
from svbop.datasets.splits import split_groups, split_row_arrays
from svbop.io import SCORES_DTYPE, load_matrix, save_arrays
from svbop.linear import LinearModel
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
model = LinearModel.load(snakemake.input.model)
X = load_matrix(snakemake.input.features)
dataset = Dataset.load(snakemake.input.dataset)
y = dataset.y
split = load_split(snakemake.input.split)
# format.group_column: each row's group (group_names, g_<part>) for Mondrian sets grouped by it
arrays = split_groups(dataset.groups, split) if dataset.groups is not None else {}
arrays.update(split_row_arrays(dataset, split))  # per-row weights and group columns follow their rows
del dataset
for part in ("validation", "calibration", "test"):
    rows = split[part]
    arrays[f"P_{part}"] = model.predict_proba(X[rows], dtype=SCORES_DTYPE)
    arrays[f"y_{part}"] = y[rows]
    logging.info("%s: %d rows scored", part, len(rows))
# Stored without zlib: on an LSHTC1-shaped test part (34,905 x 12,166 float32) it saved 45 % of
# 1.6 GB but took 101 s to write and 10.5 s per reading job, against 1.7 s and 1.9 s.
save_arrays(snakemake.output[0], compress=False, **arrays)
