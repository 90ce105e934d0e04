"""Glue: inductive conformal prediction calibrated on the calibration rows (rule predict_icp)."""

import logging


from svbop import ConformalSetPredictor
from svbop.io import load_score_arrays, save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
P_cal, y_cal, P_test = load_score_arrays(snakemake.input.scores, "P_calibration", "y_calibration", "P_test")
predictor = ConformalSetPredictor(snakemake.params.epsilon).fit(P_cal, y_cal)
sets = predictor.predict(P_test)
del P_cal, P_test  # at small epsilon the sets hold most classes: GBs to write
save_sets(snakemake.output[0], sets)
logging.info("epsilon %g: nonconformity quantile %g", snakemake.params.epsilon, predictor.quantile_)
