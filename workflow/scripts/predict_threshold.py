"""Glue: cumulative-probability threshold tuned on the validation rows for one utility (rule predict_threshold)."""

import logging


from svbop import ThresholdSetPredictor, utility
from svbop.io import load_score_arrays, save_sets, write_tsv
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
P_val, y_val, P_test = load_score_arrays(snakemake.input.scores, "P_validation", "y_validation", "P_test")
predictor = ThresholdSetPredictor(utility(snakemake.params.utility, K=P_test.shape[1]), snakemake.params.grid)
predictor.fit(P_val, y_val)
write_tsv(snakemake.output.tuning, [
    {"theta": theta, "validation_utility_pct": 100 * score, "chosen": theta == predictor.theta_}
    for theta, score in zip(predictor.thetas, predictor.scores_)
])
sets = predictor.predict(P_test)
del P_val, P_test  # a threshold near 1 gives sets of most classes: GBs to write
save_sets(snakemake.output.sets, sets)
logging.info("%s: theta = %g", snakemake.params.utility, predictor.theta_)
