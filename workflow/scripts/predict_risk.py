"""Glue: conformal risk control of one loss and score at one level alpha, calibrated on the calibration rows
(rule predict_risk); the JSON beside the sets records lambda and the calibration risk."""

import json
import logging

from svbop.conformal import RiskControlSetPredictor
from svbop.datasets import Dataset
from svbop.evaluation import risk_record
from svbop.io import atomic_path, load_score_arrays, save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
params = snakemake.params
method = snakemake.output.sets.split("/")[-2]
P_cal, y_cal, P_test = load_score_arrays(snakemake.input.scores, "P_calibration", "y_calibration", "P_test")
options = {"k_reg": params.options.get("k_reg", 1), "lam": params.options.get("lam")}
if params.loss == "class_cost":
    if len(params.cost) != P_cal.shape[1]:
        raise ValueError(f"config: methods.risk_control.cost: {len(params.cost)} costs, but the dataset has "
                         f"{P_cal.shape[1]} classes (one cost per class, in the class order)")
    options["cost"] = params.cost
elif params.loss == "hierarchical":
    options["hierarchy"] = Dataset.load(snakemake.input.dataset).hierarchy
predictor = RiskControlSetPredictor(params.alpha, params.loss, params.score, **options).fit(P_cal, y_cal)
sets = predictor.predict(P_test)
record = risk_record(predictor, method=method, n_calibration=len(y_cal))
del P_cal, P_test
save_sets(snakemake.output.sets, sets)
with atomic_path(snakemake.output.calibration) as tmp:
    tmp.write_text(json.dumps(record, indent=2) + "\n")
logging.info("%s at alpha %g: lambda %s, calibration risk %.4f; %d sets, mean size %.3f", method, params.alpha,
             record["lambda"], record["calibration_risk"], len(sets), sets.sizes.mean() if len(sets) else 0.0)
