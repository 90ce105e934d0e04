"""Glue: the s most probable classes of every test row (rule predict_top_s)."""

import logging


from svbop import top_s_sets
from svbop.io import load_score_arrays, save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
(P,) = load_score_arrays(snakemake.input.scores, "P_test")
s = snakemake.params.s
if s > P.shape[1]:  # a dataset with fewer classes than s: every set is all the classes
    logging.warning("top-%d on %d classes: returning all %d classes", s, P.shape[1], P.shape[1])
    s = P.shape[1]
sets = top_s_sets(P, s)
save_sets(snakemake.output[0], sets)
logging.info("top-%d: %d sets -> %s", s, len(sets), snakemake.output[0])
