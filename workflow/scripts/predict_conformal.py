"""Glue: a conformal method beyond the paper (APS, RAPS, class-conditional scores, Bayes-optimal sets
with a coverage guarantee), calibrated on the calibration rows like ICP (rules predict_conformal,
predict_coverage)."""

import json
import logging

from svbop.baselines import ConformalSetPredictor
from svbop.evaluation import calibration_record
from svbop.io import atomic_path, load_score_arrays, save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
params = snakemake.params
method = snakemake.output.sets.split("/")[-2]
P_cal, y_cal, P_test = load_score_arrays(snakemake.input.scores, "P_calibration", "y_calibration", "P_test")
predictor = ConformalSetPredictor(params.epsilon, score=params.score, class_conditional=params.class_conditional,
                                  empty=params.empty, **params.options).fit(P_cal, y_cal)
record = calibration_record(predictor, method=method, epsilon=params.epsilon, n_calibration=len(y_cal))
sets = predictor.predict(P_test)
del P_cal, P_test  # at small epsilon the sets hold most classes: GBs to write
save_sets(snakemake.output.sets, sets)
with atomic_path(snakemake.output.calibration) as tmp:
    tmp.write_text(json.dumps(record, indent=2) + "\n")
logging.info("%s at epsilon %g: %s; mean set size %.3f", method, params.epsilon,
             {k: v for k, v in record.items() if k not in ("method", "epsilon")}, sets.sizes.mean())
