"""Glue: SVBOP-Full on a model's outputs, the Bayes-optimal set of every test row from its
probabilities, timed (rule predict_svbop_full_probabilities)."""

import logging

from svbop import predict_sets, utility
from svbop.io import load_score_arrays, save_sets
from svbop.logs import to_log_file
from svbop.timing import time_predictions, timing_record, write_timing

to_log_file(snakemake.log[0])
(P,) = load_score_arrays(snakemake.input.scores, "P_test")
u = utility(snakemake.params.utility, K=P.shape[1])
sets, timing = time_predictions(lambda rows: predict_sets(rows, u, n_jobs=snakemake.threads), P,
                                repeats=snakemake.params.repeats)
save_sets(snakemake.output.sets, sets)
record = timing_record("svbop_full", snakemake.wildcards.utility, len(sets), timing, threads=snakemake.threads)
record["from"] = "probabilities (a model's outputs: its forward pass is not timed)"
write_timing(snakemake.output.timing, record)
logging.info("svbop_full %s: %d sets, mean size %.3f, %.4f ms per sample (from probabilities)", u.label, len(sets),
             sets.sizes.mean(), record["ms_per_sample"])
