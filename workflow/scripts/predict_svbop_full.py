"""Glue: SVBOP-Full, the Bayes-optimal set of every test row for one utility, from the flat model
and the test rows' features (scoring included, as for SVBOP-HSG and -HF), timed (rules
predict_svbop_full and, with the paper's cost model, predict_svbop_full_naive)."""

import logging

from svbop import utility
from svbop.calibration import read_temperature
from svbop.datasets import load_split
from svbop.full import predict_sets_full, predict_sets_full_naive
from svbop.io import load_matrix, save_sets
from svbop.linear import LinearModel
from svbop.logs import to_log_file
from svbop.timing import time_predictions, timing_record, write_timing

to_log_file(snakemake.log[0])
method = snakemake.params.method
predict = {"svbop_full": predict_sets_full, "svbop_full_naive": predict_sets_full_naive}[method]
model = LinearModel.load(snakemake.input.model)
temperature = read_temperature(snakemake.input.calibration)  # calibrate: temperature (1: none)
if temperature != 1.0:
    model = model.with_temperature(temperature)
X = load_matrix(snakemake.input.features)[load_split(snakemake.input.split)["test"]]
u = utility(snakemake.params.utility, K=model.n_classes)
# time_predictions first predicts the first test row, untimed: numba compiles (or loads) the
# kernels and W^T is built on the first call, one-time costs that are not test time per sample;
# then it times `repeats` calls on all rows (the record holds their median, spread and the load).
sets, timing = time_predictions(lambda rows: predict(model, rows, u, n_jobs=snakemake.threads), X,
                                repeats=snakemake.params.repeats)
save_sets(snakemake.output.sets, sets)
record = timing_record(method, snakemake.wildcards.utility, len(sets), timing, threads=snakemake.threads)
write_timing(snakemake.output.timing, record)
logging.info("%s %s: %d sets, mean size %.3f, %.4f ms per sample", method, u.label, len(sets), sets.sizes.mean(),
             record["ms_per_sample"])
