"""Glue: inductive conformal prediction calibrated on the calibration rows (rule predict_icp)."""

import logging

import numpy as np

from svbop import ConformalSetPredictor
from svbop.io import save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
with np.load(snakemake.input.scores) as scores:
    P_cal, y_cal, P_test = scores["P_calibration"], scores["y_calibration"], scores["P_test"]
predictor = ConformalSetPredictor(snakemake.params.epsilon).fit(P_cal, y_cal)
sets = predictor.predict(P_test)
del P_cal, P_test  # at small epsilon the sets hold most classes: GBs to write
save_sets(snakemake.output[0], sets)
logging.info("epsilon %g: nonconformity quantile %g", snakemake.params.epsilon, predictor.quantile_)
