"""Glue: SVBOP-Full, the Bayes-optimal set of every test row for one utility (rule predict_svbop_full)."""

import logging

import numpy as np

from svbop import predict_sets, utility
from svbop.io import save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
with np.load(snakemake.input.scores) as scores:
    P = scores["P_test"]
sets = predict_sets(P, utility(snakemake.params.utility, K=P.shape[1]))
save_sets(snakemake.output[0], sets)
logging.info("%s: %d sets, mean size %.3f", snakemake.params.utility, len(sets), sets.sizes.mean())
