"""Glue: what the page embeds to compute the sets at any level in the browser (rule live_data):
svbop.report.live.live_data of the calibration and test rows -> results/<dataset>/live.json."""

import logging

from svbop.io import load_score_arrays
from svbop.logs import to_log_file
from svbop.report.live import live_data, write_live_data
from svbop.report.model import read_examples

to_log_file(snakemake.log[0])
P_cal, y_cal, P_test, y_test = load_score_arrays(snakemake.input.scores, "P_calibration", "y_calibration",
                                                 "P_test", "y_test")
examples = read_examples(snakemake.input.examples)
data = live_data(P_cal, y_cal, P_test, y_test, utilities=snakemake.params.utilities,
                 examples=[e["row"] for e in examples["rows"]], class_names=examples.get("class_names"))
write_live_data(snakemake.output[0], data)
logging.info("%s", data.get("too_large") or f"{len(y_test)} test rows, {len(y_cal)} calibration rows embedded")
