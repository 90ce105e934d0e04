"""Glue: a conformal method under covariate shift, its calibration and test rows weighted by their likelihood
ratios (the model_outputs parts' weights files, carried into scores/flat.npz as w_<part>) (rule predict_weighted)."""

import json
import logging

from svbop.baselines import ConformalSetPredictor
from svbop.evaluation import promise_record
from svbop.io import atomic_path, load_score_arrays, save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
params = snakemake.params
method = snakemake.output.sets.split("/")[-2]
P_cal, y_cal, w_cal, P_test, w_test = load_score_arrays(snakemake.input.scores, "P_calibration", "y_calibration",
                                                        "w_calibration", "P_test", "w_test")
if not (w_cal > 0).any():
    raise ValueError("weights: every calibration row has weight 0 (the calibration part's weights file); "
                     "at least one likelihood ratio must be > 0")
spec = params.method
predictor = ConformalSetPredictor(params.epsilon, score=spec["score"], class_conditional=spec["class_conditional"],
                                  empty=params.empty, **spec["options"]).fit(P_cal, y_cal, weights=w_cal)
sets = predictor.predict(P_test, weights=w_test)
record = promise_record(method=method, epsilon=params.epsilon, y_cal=y_cal, weights=w_cal)
del P_cal, P_test
save_sets(snakemake.output.sets, sets)
with atomic_path(snakemake.output.calibration) as tmp:
    tmp.write_text(json.dumps(record, indent=2) + "\n")
logging.info("%s at epsilon %g: %d calibration rows (effective %.0f); %d sets, mean size %.3f", method,
             params.epsilon, len(y_cal), record["n_effective"], len(sets), sets.sizes.mean() if len(sets) else 0.0)
