"""Glue: every method's test sets under every utility -> metrics table, with the SVBOP methods'
test time and agreement with SVBOP-Full (rule evaluate)."""

import logging

from svbop.evaluation import evaluate_methods, read_threshold_tuning, timing_columns
from svbop.io import SetFiles, load_score_arrays, write_tsv
from svbop.logs import to_log_file
from svbop.timing import read_timing

to_log_file(snakemake.log[0])
(y,) = load_score_arrays(snakemake.input.scores, "y_test")
# read when used, one method at a time (a conformal method's sets can take GBs)
sets = SetFiles(dict(zip(snakemake.params.methods, snakemake.input.sets)))
extra = {}
thresholds = [method for method in snakemake.params.methods if method[0] == "threshold"]
for method, path in zip(thresholds, snakemake.input.tuning):  # the tuned theta, and whether at the grid's edge
    extra[method] = read_threshold_tuning(path)
times = {method: read_timing(path) for method, path in zip(snakemake.params.timed, snakemake.input.timings)}
for method, columns in timing_columns(sets, times).items():  # t_test_ms, agreement and speed-up vs Full
    extra.setdefault(method, {}).update(columns)
rows = evaluate_methods(sets, y, snakemake.params.utilities, dataset=snakemake.params.dataset, extra=extra)
write_tsv(snakemake.output[0], rows)
logging.info("%d methods x %d utilities on %d test rows -> %s", len(rows), len(snakemake.params.utilities), len(y),
             snakemake.output[0])
