"""Glue: raw files (or a builtin/synthetic source) -> one parsed dataset file (rule prepare_dataset)."""

import logging

from svbop.datasets import drop_small_classes, from_source, read_dataset
from svbop.logs import to_log_file
from svbop.report.status import failure_path, failure_recorded

to_log_file(snakemake.log[0])
name, params = snakemake.wildcards.dataset, snakemake.params
with failure_recorded(failure_path(name, "prepare_dataset"), stage="prepare_dataset", log=snakemake.log[0]):
    if params.source is not None:
        dataset = from_source(name, params.source, seed=params.seed)
    else:
        dataset = read_dataset(snakemake.input.raw, params.format, hierarchy=params.hierarchy, name=name,
                               where=f"{params.where}.format")
    if params.drop_small_classes is not None:  # split.small_classes: drop, with the split's sizes
        dataset = drop_small_classes(dataset, params.drop_small_classes, where=f"{params.where}.split.small_classes")
    dataset.save(snakemake.output[0])
logging.info("%s: %d rows, %d classes, X %s (%s) -> %s", dataset.name, dataset.n_samples, dataset.n_classes,
             dataset.X.shape, dataset.x_kind, snakemake.output[0])
