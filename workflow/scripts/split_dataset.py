"""Glue: seeded, stratified train / validation / calibration / test split (rule split_dataset)."""

import logging

from svbop.datasets import Dataset, make_split, save_split
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
dataset = Dataset.load(snakemake.input.dataset)
split = make_split(dataset.n_samples, snakemake.params.sizes, seed=snakemake.params.seed, y=dataset.y,
                   part=dataset.part)
save_split(snakemake.output[0], split)
logging.info("split sizes: %s", {part: len(rows) for part, rows in split.items()})
