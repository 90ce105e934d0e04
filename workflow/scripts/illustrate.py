"""Glue: one of the paper's illustrations from a dataset's test set (rules illustrate, illustrate_texts).

entropy: test images of increasing entropy with their SVBOP-Full sets per utility (MNIST panel);
image_top / text_top: test images / texts whose top-1 is wrong, with top-k and SVBOP-Full set.
Writes the chosen rows as JSON (status "ok", or the reason nothing could be drawn) and, for
images, the figure.
"""

import json
import logging
from pathlib import Path

import numpy as np

from svbop.datasets import Dataset, load_split
from svbop.io import atomic_path, load_score_arrays
from svbop.logs import to_log_file
from svbop.report.figures import save_figure
from svbop.report.illustrations import (
    describe_rows,
    load_image,
    pick_by_entropy,
    pick_top1_wrong,
    plot_entropy_panel,
    plot_image_top,
)
from svbop.report.names import utility_name
from svbop.utilities import utility

to_log_file(snakemake.log[0])
kind, cfg, title = snakemake.params.kind, snakemake.params.illustration, snakemake.params.title
dataset = Dataset.load(snakemake.input.dataset)
test = load_split(snakemake.input.split)["test"]
P, y = load_score_arrays(snakemake.input.scores, "P_test", "y_test")
names = [str(c) for c in dataset.class_names]
specs = list(cfg["utilities"]) if kind == "entropy" else [cfg["utility"]]
labels = [utility(spec).label for spec in specs]
wants = "texts" if kind == "text_top" else "images"
has = {"images": "images", "image_paths": "images", "text": "texts", "sequences": "texts"}.get(dataset.x_kind)
out = {"name": kind, "dataset": cfg["dataset"], "x_kind": dataset.x_kind, "utilities": labels,
       "n_test": int(len(y)), "status": "ok", "reason": "", "records": []}


def image(row):
    x = dataset.X[test[row]]
    return load_image(Path(snakemake.input.raw) / x) if dataset.x_kind == "image_paths" else np.asarray(x)


figure = None
if has != wants:
    out["status"] = "not applicable"
    out["reason"] = f"{title} holds {dataset.x_kind} inputs, not {wants}"
else:
    if kind == "entropy":
        rows = pick_by_entropy(P, y, n=cfg["n"], spec=specs[0])
    else:
        rows = pick_top1_wrong(P, y, n=cfg["n"], spec=specs[0], k=cfg["k"])
    texts = {int(r): str(dataset.X[test[r]]) for r in rows} if wants == "texts" else None
    out["records"] = describe_rows(P, y, rows, names, specs, k=cfg.get("k", 5), texts=texts)
    for record, r in zip(out["records"], rows):
        record["index"] = int(test[r])
    if len(rows) == 0:
        out["status"] = "no example"
        out["reason"] = (f"No test row of {title} ({len(y):,} rows) has a wrong top-1 with the true class in "
                         f"its top-{cfg['k']} and in its SVBOP-Full set for {utility_name(labels[0])}")
    elif kind == "entropy":
        figure = plot_entropy_panel([image(r) for r in rows], out["records"], labels)
    elif kind == "image_top":
        figure = plot_image_top(image(rows[0]), out["records"][0], labels[0])
if "figure" in snakemake.output.keys():
    if figure is None:
        from svbop.report.figures import LEGEND_PT, _new_figure
        from svbop.report.illustrations import _row_title

        figure = _new_figure(figsize=(6, 1.2))  # says why there is no picture (Snakemake's report shows it)
        reason = (out["reason"] or "nothing to show").replace(utility_name(labels[0]), _row_title(labels[0]))
        # the reason holds the dataset's title as the user wrote it: drawn as written, never mathtext
        figure.text(0.5, 0.5, reason, ha="center", va="center", wrap=True, fontsize=LEGEND_PT, parse_math=False)
    save_figure(figure, snakemake.output.figure)
with atomic_path(snakemake.output.records) as tmp:
    tmp.write_text(json.dumps(out, indent=2) + "\n")
logging.info("%s from %s: %s, %d rows %s", kind, cfg["dataset"], out["status"], len(out["records"]),
             [r["row"] for r in out["records"]])
