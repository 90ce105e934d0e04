"""Glue: a conformal method beyond the paper (APS, RAPS, class-conditional scores, hierarchy-restricted
sets, Bayes-optimal sets with a coverage guarantee), calibrated on the calibration rows like ICP (rules predict_conformal,
predict_coverage)."""

import json
import logging
import warnings

import numpy as np

from svbop import SetPredictions
from svbop.baselines import ConformalSetPredictor
from svbop.conformal import GroupCalibrationWarning, predicted_groups
from svbop.datasets import Dataset
from svbop.evaluation import calibration_record, unreachable_record
from svbop.io import atomic_path, load_score_arrays, load_score_groups, save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
params = snakemake.params
method = snakemake.output.sets.split("/")[-2]
P_cal, y_cal, P_test = load_score_arrays(snakemake.input.scores, "P_calibration", "y_calibration", "P_test")
options = dict(params.options)
if params.score == "hierarchical":  # unions of at most max_nodes nodes of the dataset's own hierarchy
    options["hierarchy"] = Dataset.load(snakemake.input.dataset).hierarchy
predictor = ConformalSetPredictor(params.epsilon, score=params.score, class_conditional=params.class_conditional,
                                  empty=params.empty, **options)
by = getattr(params, "by", None)  # rule predict_mondrian: one threshold per group known at test time
if by == "group_column":  # a column of the user's data (format.group_column), carried into the scores file
    _, (groups_cal, groups_test) = load_score_groups(snakemake.input.scores, "calibration", "test")
elif by is not None:
    hierarchy = Dataset.load(snakemake.input.dataset).hierarchy if by == "predicted_top_node" else None
    groups_cal, groups_test = (predicted_groups(P, by, hierarchy) for P in (P_cal, P_test))
try:
    if by is None:
        predictor.fit(P_cal, y_cal)
    else:
        with warnings.catch_warnings(record=True) as caught:  # small groups: said in the log and the record
            warnings.simplefilter("always", GroupCalibrationWarning)
            predictor.fit(P_cal, y_cal, groups=groups_cal)
        for w in caught:
            logging.warning("%s", w.message)
    reason = None
except ValueError as exc:
    if params.score != "credal":
        raise
    # the credal family may not reach 1 - epsilon at all (even its largest sets, delta = gamma, cover too
    # few calibration rows): a finding about this dataset, not a failure of it. No sets; the report says why.
    reason = str(exc)
if reason is None:
    record = calibration_record(predictor, method=method, epsilon=params.epsilon, n_calibration=len(y_cal))
    if by is None:
        sets = predictor.predict(P_test)
    else:
        record.update(by=by, n_groups=int(predictor.groups_.size), small_groups=int(predictor.small_groups_.size))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GroupCalibrationWarning)
            sets = predictor.predict(P_test, groups=groups_test)
        for w in caught:
            logging.warning("%s", w.message)
else:
    record = unreachable_record(method=method, epsilon=params.epsilon, n_calibration=len(y_cal), reason=reason)
    sets = SetPredictions(np.zeros(0, np.int64), np.zeros(1, np.int64), P_test.shape[1])
    logging.warning("%s at epsilon %g: not reachable (%s)", method, params.epsilon, reason)
del P_cal, P_test  # at small epsilon the sets hold most classes: GBs to write
save_sets(snakemake.output.sets, sets)
with atomic_path(snakemake.output.calibration) as tmp:
    tmp.write_text(json.dumps(record, indent=2) + "\n")
logging.info("%s at epsilon %g: %s; %d sets, mean size %s", method, params.epsilon,
             {k: v for k, v in record.items() if k not in ("method", "epsilon")}, len(sets),
             f"{sets.sizes.mean():.3f}" if len(sets) else "-")
