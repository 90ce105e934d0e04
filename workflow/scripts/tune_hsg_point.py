"""Glue: SVBOP-HSG at one (k, ef) on the validation rows, with the one index (rule tune_hsg_point;
svbop.tuning.score_hsg_point)."""

import json
import logging

from svbop import utility
from svbop.calibration import read_temperature
from svbop.datasets import Dataset, load_split
from svbop.index import HNSWIndex
from svbop.io import atomic_path, load_matrix
from svbop.linear import LinearModel
from svbop.logs import to_log_file
from svbop.tuning import score_hsg_point

to_log_file(snakemake.log[0])
model = LinearModel.load(snakemake.input.model)
temperature = read_temperature(snakemake.input.calibration)  # calibrate: temperature (1: none), as predict_svbop_hsg
if temperature != 1.0:
    model = model.with_temperature(temperature)
index = HNSWIndex.load(snakemake.input.index)
validation = load_split(snakemake.input.split)["validation"]
if len(validation) == 0:
    raise ValueError(f"{snakemake.input.split}: no validation rows to choose hsg.k/ef on (set split.validation)")
X = load_matrix(snakemake.input.features)[validation]
y = Dataset.load(snakemake.input.dataset).y[validation]
u = utility(snakemake.params.utility, K=model.n_classes)
point = snakemake.params.point
result = score_hsg_point(model, index, X, y, u, k=point["k"], ef=point["ef"], engine=snakemake.params.engine,
                         n_jobs=snakemake.threads)
result["utility"] = u.label
with atomic_path(snakemake.output.point) as tmp:
    tmp.write_text(json.dumps(result, indent=2) + "\n")
logging.info("k %d, ef %s: %s mean validation utility %.4f, mean size %.3f, %.1f classes scored per row, "
             "recall@k %.1f %%, %.3f s", result["k"], result["ef"], u.label, result["validation_utility"],
             result["mean_size"], result["mean_scored"], 100 * result["index_recall"], result["seconds"])
