"""Glue: seeded, stratified train / validation / calibration / test split (rule split_dataset); a
model's outputs: its own parts, and the missing ones dealt from its test (or all) rows."""

import logging

from svbop.datasets import Dataset, make_split, save_split
from svbop.datasets.calibration_share import AUTO, auto_calibration_rows
from svbop.datasets.outputs import split_model_outputs, split_origin
from svbop.logs import to_log_file
from svbop.report.status import failure_path, failure_recorded

to_log_file(snakemake.log[0])
sizes = dict(snakemake.params.sizes)
small_classes = sizes.pop("small_classes", "warn")  # warn / error here; drop already happened in prepare_dataset
rows_per_class = sizes.pop("rows_per_class", None)  # split.calibration: auto (common.smk, split_sizes)
with failure_recorded(failure_path(snakemake.wildcards.dataset, "split_dataset"), stage="split_dataset",
                      log=snakemake.log[0]):
    dataset = Dataset.load(snakemake.input.dataset)
    if snakemake.params.model_outputs:
        if sizes.get("calibration") == AUTO:  # the fewest rows that calibrate one threshold per class
            share = auto_calibration_rows(dataset.y, dataset.part, sizes, seed=snakemake.params.seed,
                                          rows_per_class=rows_per_class)
            sizes["calibration"] = share["rows"] if share["rows"] is not None else 0
            logging.info("split.calibration: auto: %s", share)
        split = split_model_outputs(dataset.y, dataset.part, sizes, seed=snakemake.params.seed)
        for part, origin in split_origin(dataset.part, split).items():
            logging.info("%s: %s", part, origin)
    else:
        split = make_split(dataset.n_samples, sizes, seed=snakemake.params.seed, y=dataset.y, part=dataset.part,
                           small_classes=small_classes, class_names=dataset.class_names)
    save_split(snakemake.output[0], split)
logging.info("split sizes: %s", {part: len(rows) for part, rows in split.items()})
