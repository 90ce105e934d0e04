"""Glue: the tree model's grid point with the smallest validation log-loss, and whether a value sits at
its grid's edge (rule tune_hf; svbop.tuning)."""

import csv
import json
import logging

from svbop.io import atomic_path
from svbop.logs import to_log_file
from svbop.tuning import HF_AXES, read_points, select_point, tree_keys

to_log_file(snakemake.log[0])
keys = tree_keys(snakemake.wildcards.tree)
axes = {k: HF_AXES[k] for k in keys}
points = read_points(snakemake.input.points, keys=(*keys, "validation_log_loss"))
choice = select_point(points, tuned=snakemake.params.tuned, axes=axes)
choice["tree"] = snakemake.wildcards.tree
by_point = {tuple(float(p[k]) for k in keys): p for p in points}
extra = ("validation_top1", "internal_nodes", "build_seconds", "train_seconds")
choice["points"] = [{**r, **{e: by_point[tuple(r[k] for k in keys)].get(e) for e in extra}} for r in choice["points"]]
for k in keys:
    if k == "max_leaves":
        choice[k] = int(choice[k])
with atomic_path(snakemake.output.choice) as tmp:
    tmp.write_text(json.dumps(choice, indent=2) + "\n")
with atomic_path(snakemake.output.table) as tmp, open(tmp, "w", newline="") as fh:
    writer = csv.writer(fh, delimiter="\t")
    writer.writerow([*keys, "validation_log_loss", *extra, "chosen"])
    for r in choice["points"]:
        writer.writerow([*(r[k] for k in keys), r["validation_log_loss"], *(r[e] for e in extra),
                         all(r[k] == choice[k] for k in keys)])
for key in snakemake.params.tuned:
    edge = choice["edge"][key]
    logging.info("%s tree: chose %s = %g from %s (validation log-loss %.4f)%s", choice["tree"], key, choice[key],
                 choice["grid"][key], choice["value"], f"; at the {edge} value of the grid: the best may lie beyond it" if edge else "")
    if edge:
        logging.warning("hf.%s = %g (%s tree) is the %s value of its grid and beat its neighbour: widen the grid",
                        key, choice[key], choice["tree"], edge)
