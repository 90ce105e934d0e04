"""Glue: the grid point with the smallest validation log-loss, and whether a value sits at its grid's
edge (rule tune_flat; svbop.tuning)."""

import csv
import json
import logging

from svbop.io import atomic_path
from svbop.logs import to_log_file
from svbop.tuning import read_points, select_point

to_log_file(snakemake.log[0])
points = read_points(snakemake.input.points)
choice = select_point(points, tuned=snakemake.params.tuned)
by_point = {(p["C"], p["eps"]): p for p in points}
choice["points"] = [{**r, "train_seconds": by_point[(r["C"], r["eps"])].get("train_seconds"),
                     "validation_top1": by_point[(r["C"], r["eps"])].get("validation_top1")} for r in choice["points"]]
with atomic_path(snakemake.output.choice) as tmp:
    tmp.write_text(json.dumps(choice, indent=2) + "\n")
with atomic_path(snakemake.output.table) as tmp, open(tmp, "w", newline="") as fh:
    writer = csv.writer(fh, delimiter="\t")
    writer.writerow(["C", "eps", "validation_log_loss", "validation_top1", "train_seconds", "chosen"])
    for r in choice["points"]:
        writer.writerow([r["C"], r["eps"], r["validation_log_loss"], r["validation_top1"], r["train_seconds"],
                         r["C"] == choice["C"] and r["eps"] == choice["eps"]])
for key in snakemake.params.tuned:
    edge = choice["edge"][key]
    logging.info("chose %s = %g from %s (validation log-loss %.4f)%s", key, choice[key], choice["grid"][key],
                 choice["value"], f"; at the {edge} value of the grid: the best may lie beyond it" if edge else "")
    if edge:
        logging.warning("%s = %g is the %s value of tuning.%s_grid and beat its neighbour: widen the grid",
                        key, choice[key], edge, key)
