"""Glue: SVBOP-HF, the Bayes-optimal sets of every test row for one utility under a probabilistic
tree (predefined or balanced 2-means), timed (rule predict_svbop_hf)."""

import logging

from svbop import utility
from svbop.datasets import load_split
from svbop.hf import predict_sets_hf
from svbop.io import load_matrix, save_sets
from svbop.logs import to_log_file
from svbop.timing import time_predictions, timing_record, write_timing
from svbop.trees import TreeModel

to_log_file(snakemake.log[0])
model = TreeModel.load(snakemake.input.model)
X = load_matrix(snakemake.input.features)[load_split(snakemake.input.split)["test"]]
u = utility(snakemake.params.utility, K=model.n_classes)
method = f"svbop_hf_{snakemake.wildcards.tree}"
# time_predictions first predicts the first test row, untimed: numba compiles (or loads) the
# kernels and the tree's search layout is built on the first call, one-time costs that are not
# test time per sample; then it times `repeats` calls on all rows (the record holds their median,
# spread and the load).
(sets, stats), timing = time_predictions(
    lambda rows: predict_sets_hf(model, rows, u, n_jobs=snakemake.threads, return_stats=True), X,
    repeats=snakemake.params.repeats,
)
save_sets(snakemake.output.sets, sets)
record = timing_record(method, snakemake.wildcards.utility, len(sets), timing,
                       threads=snakemake.threads, stats=stats)
write_timing(snakemake.output.timing, record)
logging.info("%s %s: %d sets, mean size %.3f, %.4f ms per sample, %.1f nodes expanded and %.1f classes pulled per row",
             method, u.label, len(sets), sets.sizes.mean(), record["ms_per_sample"], record["mean_expanded"],
             record["mean_pulled"])
