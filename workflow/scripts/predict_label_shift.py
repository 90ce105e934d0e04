"""Glue: a conformal method under label shift, its class weights q(y)/p(y) estimated from the test rows' outputs
(methods.label_shift.estimator) and one weighted threshold per candidate class (rule predict_label_shift)."""

import json
import logging

from svbop.baselines import ConformalSetPredictor
from svbop.conformal import estimate_label_shift
from svbop.evaluation import label_shift_record
from svbop.io import atomic_path, load_score_arrays, save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
params = snakemake.params
method = snakemake.output.sets.split("/")[-2]
P_cal, y_cal, P_test = load_score_arrays(snakemake.input.scores, "P_calibration", "y_calibration", "P_test")
w = estimate_label_shift(P_cal, y_cal, P_test, params.estimator)
spec = params.method
predictor = ConformalSetPredictor(params.epsilon, score=spec["score"], class_conditional=spec["class_conditional"],
                                  empty=params.empty, **spec["options"]).fit(P_cal, y_cal, class_weights=w)
sets = predictor.predict(P_test)
record = label_shift_record(method=method, epsilon=params.epsilon, y_cal=y_cal, estimator=params.estimator,
                            class_weights=w, quantiles=predictor.quantiles_)
del P_cal, P_test
save_sets(snakemake.output.sets, sets)
with atomic_path(snakemake.output.calibration) as tmp:
    tmp.write_text(json.dumps(record, indent=2) + "\n")
logging.info("%s at epsilon %g: %s weights %.3g..%.3g from %d calibration rows; %d sets, mean size %.3f", method,
             params.epsilon, params.estimator, w.min(), w.max(), len(y_cal), len(sets),
             sets.sizes.mean() if len(sets) else 0.0)
