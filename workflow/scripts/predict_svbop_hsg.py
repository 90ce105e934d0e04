"""Glue: SVBOP-HSG, the sets of every test row for one utility from the HNSW index over the flat
model's classes, timed (rule predict_svbop_hsg)."""

import logging

from svbop import utility
from svbop.calibration import read_temperature
from svbop.datasets import load_split
from svbop.hsg import index_recall, predict_sets_hsg
from svbop.index import HNSWIndex
from svbop.io import load_matrix, save_sets
from svbop.linear import LinearModel
from svbop.logs import to_log_file
from svbop.timing import time_predictions, timing_record, write_timing
from svbop.tuning import resolve_hsg

to_log_file(snakemake.log[0])
model = LinearModel.load(snakemake.input.model)
temperature = read_temperature(snakemake.input.calibration)  # calibrate: temperature (1: none)
if temperature != 1.0:
    model = model.with_temperature(temperature)
index = HNSWIndex.load(snakemake.input.index)
X = load_matrix(snakemake.input.features)[load_split(snakemake.input.split)["test"]]
u = utility(snakemake.params.utility, K=model.n_classes)
hsg = resolve_hsg(snakemake.params.hsg, snakemake.input.tuned)  # hsg: {k/ef: auto}: the chosen values
k, ef, engine = hsg["k"], hsg["ef"], snakemake.params.engine


def predict(rows):
    return predict_sets_hsg(model, index, rows, u, k=k, ef=ef, engine=engine, n_jobs=snakemake.threads,
                            return_stats=True)


# time_predictions first predicts the first test row, untimed: numba compiles (or loads) the
# kernels on the first call, a one-time cost that is not test time per sample; then it times
# `repeats` calls on all rows (the record holds their median, spread and the load).
(sets, stats), timing = time_predictions(predict, X, repeats=snakemake.params.repeats)
save_sets(snakemake.output.sets, sets)
# the index's quality on these rows (untimed): the share of the exact top-k its first query returns
recall = index_recall(model, index, X, k, ef, engine=engine)
record = timing_record("svbop_hsg", snakemake.wildcards.utility, len(sets), timing,
                       threads=snakemake.threads, stats=stats, k=k, ef=ef, engine=engine,
                       index_recall_pct=100.0 * recall)
write_timing(snakemake.output.timing, record)
logging.info("%s: %d sets, mean size %.3f, %.4f ms per sample, %.2f queries and %.1f classes scored per row, "
             "index recall@%d %.1f %%", u.label, len(sets), sets.sizes.mean(), record["ms_per_sample"],
             record["mean_queries"], record["mean_scored"], min(k, model.n_classes), 100.0 * recall)
