"""Glue: one part's probabilities (float64, as a model's softmax is saved) and labels as .npy files
(rule export_model_outputs)."""

import logging

import numpy as np

from svbop.io import load_score_arrays
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
part = snakemake.wildcards.part
P, y = load_score_arrays(snakemake.input.scores, f"P_{part}", f"y_{part}")
P = np.asarray(P, dtype=np.float64)
P /= P.sum(axis=1, keepdims=True)  # float32 rows renormalised in float64: they sum to 1 within rounding
np.save(snakemake.output.scores, P)
np.save(snakemake.output.labels, np.asarray(y, dtype=np.int64))
logging.info("%s: %d rows x %d classes -> %s", part, P.shape[0], P.shape[1], snakemake.output.scores)
