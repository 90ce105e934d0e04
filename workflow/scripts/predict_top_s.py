"""Glue: the s most probable classes of every test row (rule predict_top_s)."""

import logging

import numpy as np

from svbop import top_s_sets
from svbop.io import save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
with np.load(snakemake.input.scores) as scores:
    P = scores["P_test"]
sets = top_s_sets(P, snakemake.params.s)
save_sets(snakemake.output[0], sets)
logging.info("top-%d: %d sets -> %s", snakemake.params.s, len(sets), snakemake.output[0])
