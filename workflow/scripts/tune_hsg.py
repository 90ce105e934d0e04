"""Glue: the cheapest (k, ef) whose SVBOP-HSG validation utility is within tuning.hsg_tolerance of
SVBOP-Full's on the same rows (rule tune_hsg; svbop.tuning.select_hsg_point)."""

import csv
import json
import logging

from svbop import utility
from svbop.calibration import read_temperature
from svbop.datasets import Dataset, load_split
from svbop.io import atomic_path, load_matrix
from svbop.linear import LinearModel
from svbop.logs import to_log_file
from svbop.tuning import full_validation_utility, read_points, select_hsg_point

to_log_file(snakemake.log[0])
model = LinearModel.load(snakemake.input.model)
temperature = read_temperature(snakemake.input.calibration)
if temperature != 1.0:
    model = model.with_temperature(temperature)
validation = load_split(snakemake.input.split)["validation"]
X = load_matrix(snakemake.input.features)[validation]
y = Dataset.load(snakemake.input.dataset).y[validation]
u = utility(snakemake.params.utility, K=model.n_classes)
reference = full_validation_utility(model, X, y, u)
points = read_points(snakemake.input.points, keys=("k", "ef", "validation_utility"), nullable=("ef",))
choice = select_hsg_point(points, reference, snakemake.params.tolerance, tuned=snakemake.params.tuned)
choice["utility"] = u.label
by_point = {(p["k"], p["ef"]): p for p in points}
extra = ("mean_size", "mean_scored", "index_recall", "seconds")
choice["points"] = [{**r, **{e: by_point[(r["k"], r["ef"])].get(e) for e in extra}} for r in choice["points"]]
with atomic_path(snakemake.output.choice) as tmp:
    tmp.write_text(json.dumps(choice, indent=2) + "\n")
with atomic_path(snakemake.output.table) as tmp, open(tmp, "w", newline="") as fh:
    writer = csv.writer(fh, delimiter="\t")
    writer.writerow(["k", "ef", "validation_utility", "gap", "within", *extra, "chosen"])
    for r in choice["points"]:
        writer.writerow([r["k"], "" if r["ef"] is None else r["ef"], r["validation_utility"], r["gap"], r["within"],
                         *(r[e] for e in extra), (r["k"], r["ef"]) == (choice["k"], choice["ef"])])
logging.info("SVBOP-Full's %s on the validation rows: %.4f; chose k %d, ef %s (%.4f)%s", u.label, reference,
             choice["k"], choice["ef"], choice["value"],
             "" if choice["reached"] else f"; no point came within {choice['tolerance']:g}: the most accurate one")
for key, edge in choice["edge"].items():
    if edge:
        logging.warning("hsg.%s = %s is the %s value of tuning.hsg_%s_grid: widen the grid", key, choice[key], edge, key)
