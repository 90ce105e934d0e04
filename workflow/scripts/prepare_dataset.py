"""Glue: raw source -> parsed dataset file (rule prepare_dataset)."""

import logging

from svbop.datasets import from_source
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
dataset = from_source(snakemake.wildcards.dataset, snakemake.params.source, seed=snakemake.params.seed)
dataset.save(snakemake.output[0])
logging.info("%s: %d rows, %d classes, X %s -> %s", dataset.name, dataset.n_samples, dataset.n_classes,
             dataset.X.shape, snakemake.output[0])
