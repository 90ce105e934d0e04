"""Glue: a conformal method or risk control from a probabilistic tree, calibrated on the calibration rows
through the tree's own probabilities, no rows x classes matrix (rule predict_tree_sets)."""

import json
import logging

from svbop.datasets import Dataset, load_split
from svbop.io import atomic_path, load_matrix, save_sets
from svbop.logs import to_log_file
from svbop.tree_sets import predict_tree_sets
from svbop.trees import TreeModel

to_log_file(snakemake.log[0])
model = TreeModel.load(snakemake.input.model)
split = load_split(snakemake.input.split)
X = load_matrix(snakemake.input.features)
y = Dataset.load(snakemake.input.dataset).y
sets, record = predict_tree_sets(model, X[split["calibration"]], y[split["calibration"]], X[split["test"]],
                                 snakemake.params.method, snakemake.params.level, n_jobs=snakemake.threads)
save_sets(snakemake.output.sets, sets)
with atomic_path(snakemake.output.record) as tmp:
    tmp.write_text(json.dumps(record, indent=2) + "\n")
logging.info("%s at level %g: threshold %.6g from %d calibration rows (%.3f ms a row); %d test sets, mean size %.3f "
             "(%.4f ms a row)", record["method"], record["level"], record["threshold"], record["n_calibration"],
             1e3 * record["fit_s"] / max(1, record["n_calibration"]), len(sets), sets.sizes.mean() if len(sets) else 0,
             1e3 * record["predict_s"] / max(1, len(sets)))
