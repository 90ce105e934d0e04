"""Glue: the probabilities every set is made from, calibrated on the validation rows (calibrate:
temperature or venn_abers) or as given, and the record of what calibration changed (rule calibrate_scores)."""

import json
import logging

from svbop._blocks import gather_rows
from svbop.calibration import calibrate_streams, describe
from svbop.datasets import Dataset, load_split
from svbop.datasets.outputs import split_origin
from svbop.datasets.splits import split_groups, split_row_arrays
from svbop.io import (
    SCORES_DTYPE,
    NpzReader,
    atomic_path,
    load_score_arrays,
    save_arrays,
)
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
params = snakemake.params
PARTS = ("validation", "calibration", "test")
origin = None
groups = {}  # format.group_column: each row's group (group_names, g_<part>), carried into scores/flat.npz
if params.model_outputs:  # the model's own scores, as read (float64), split into parts
    dataset = Dataset.load(snakemake.input.dataset)
    split = load_split(snakemake.input.split)
    scores = {p: gather_rows(dataset.X, split[p]) for p in PARTS}  # by blocks: the scores may exceed memory
    labels = {p: dataset.y[split[p]] for p in PARTS}
    origin = split_origin(dataset.part, split)
    if dataset.groups is not None:
        groups = split_groups(dataset.groups, split, PARTS)
    groups.update(split_row_arrays(dataset, split, PARTS))  # weights and group columns follow their rows
else:  # the flat model's probabilities before calibration
    arrays = load_score_arrays(snakemake.input.scores, *(f"{k}_{p}" for p in PARTS for k in ("P", "y")))
    scores = {p: arrays[2 * i] for i, p in enumerate(PARTS)}
    labels = {p: arrays[2 * i + 1] for i, p in enumerate(PARTS)}
    with NpzReader(snakemake.input.scores, "score file") as data:
        if "group_names" in data:
            groups = {k: data[k] for k in ("group_names", *(f"g_{p}" for p in PARTS))}
        groups.update({k: data[k] for k in ("group_column_names", *(f"{a}_{p}" for a in ("w", "Phi") for p in PARTS))
                       if k in data})
# streamed: each part's probabilities are written block by block as they are made and measured
probs, finish = calibrate_streams(scores, labels, outputs=params.outputs, method=params.method,
                                  utilities=params.utilities, dtype=SCORES_DTYPE)
save_arrays(snakemake.output.scores, compress=False, **groups,
            **{f"{k}_{p}": (probs[p] if k == "P" else labels[p]) for p in PARTS for k in ("P", "y")})
record = finish()
record["dataset"] = snakemake.wildcards.dataset
record["model_outputs"] = bool(params.model_outputs)
if origin is not None:
    record["origin"] = origin
with atomic_path(snakemake.output.record) as tmp:
    tmp.write_text(json.dumps(record, indent=2) + "\n")
logging.info("%s", describe(record))
