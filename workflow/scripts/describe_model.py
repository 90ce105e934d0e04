"""Glue: the page about a model (rule describe_model): every method's coverage of each class, by name, and a
handful of example test rows with every kind of set."""

import json
import logging

import numpy as np

from svbop.datasets import load_split
from svbop.evaluation import read_calibration
from svbop.io import NpzReader, SetFiles, atomic_path, escape_frame, load_score_arrays
from svbop.logs import to_log_file
from svbop.report.model import describe_model, write_class_coverage

to_log_file(snakemake.log[0])
P, y, y_cal = load_score_arrays(snakemake.input.scores, "P_test", "y_test", "y_calibration")
with NpzReader(snakemake.input.dataset, "dataset file") as data:  # names and parts only, not the scores
    names = data["class_names"].tolist()
    part = data["part"].astype(str) if "part" in data.files else None
test_rows = load_split(snakemake.input.split)["test"]
file_rows = None
if part is not None:  # a test row's line in the user's own file: its rank among the rows of its part
    rank = np.zeros(part.size, dtype=np.int64)
    for p in np.unique(part):
        rows = np.flatnonzero(part == p)
        rank[rows] = np.arange(rows.size)
    file_rows = rank[test_rows]
methods = [tuple(m) for m in snakemake.params.methods]
not_calibrated = {tuple(m) for m, path in zip(snakemake.params.calibrated, snakemake.input.calibration)
                  if not read_calibration(path)["reached"]}  # no sets to show: the page says why
sets = SetFiles({m: f for m, f in zip(methods, snakemake.input.sets) if m not in not_calibrated})
picks, picked_on = None, None
if snakemake.input.shared:  # several models on the same rows: the first model's example rows for every model
    from svbop.report.model import read_examples

    picks = {e["kind"]: e["row"] for e in read_examples(snakemake.input.shared[0])["rows"]}
    picked_on = snakemake.params.picked_on
classes, examples = describe_model(P, y, sets, y_calibration=y_cal, class_names=names, file_rows=file_rows,
                                   picks=picks, picked_on=picked_on)
examples["class_names"] = names if len(names) <= 100_000 else None
write_class_coverage(snakemake.output.classes, classes, snakemake.wildcards.dataset)
with atomic_path(snakemake.output.examples) as tmp:
    tmp.write_text(json.dumps(examples, ensure_ascii=False) + "\n")
logging.info("%d classes x %d methods, %d example rows -> %s, %s", len(classes), len(sets), len(examples["rows"]),
             snakemake.output.classes, snakemake.output.examples)
