"""Glue: conformal sets covering at 1 - epsilon in every one of the user's overlapping groups (the model_outputs
parts' group_columns files, carried into scores/flat.npz as Phi_<part>) (rule predict_conditional)."""

import json
import logging

from svbop.conformal import ConditionalSetPredictor
from svbop.evaluation import promise_record
from svbop.io import atomic_path, load_score_arrays, save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
params = snakemake.params
method = snakemake.output.sets.split("/")[-2]
P_cal, y_cal, Phi_cal, P_test, Phi_test, names = load_score_arrays(
    snakemake.input.scores, "P_calibration", "y_calibration", "Phi_calibration", "P_test", "Phi_test",
    "group_column_names")
empty = [str(g) for g, c in zip(names.tolist(), Phi_cal.sum(axis=0)) if c == 0]
if empty:  # its cutoff would be unbounded: every class for its test rows
    raise ValueError(f"group columns: group {empty[0]!r} has no calibration row; a conditional promise needs "
                     "calibration rows in every group (give that group's rows to the calibration part, or drop it)")
options = {k: v for k, v in params.options.items() if k in ("k_reg", "lam")}
predictor = ConditionalSetPredictor(params.epsilon, params.score, empty=params.empty or "top1", **options)
sets = predictor.fit(P_cal, y_cal, Phi_cal).predict(P_test, Phi_test)
record = promise_record(method=method, epsilon=params.epsilon, y_cal=y_cal, group_columns=Phi_cal,
                        group_names=names.tolist())
del P_cal, P_test
save_sets(snakemake.output.sets, sets)
with atomic_path(snakemake.output.calibration) as tmp:
    tmp.write_text(json.dumps(record, indent=2) + "\n")
logging.info("%s at epsilon %g: %d calibration rows in %d groups; %d sets, mean size %.3f", method, params.epsilon,
             len(y_cal), len(names), len(sets), sets.sizes.mean() if len(sets) else 0.0)
