"""Glue: random binning features of the Laplacian kernel (ALOI.BIN from plain ALOI), fitted on the training rows (rule features_binning)."""

import logging

from svbop.datasets import Dataset, load_split
from svbop.features.binning import random_binning_features
from svbop.io import save_matrix
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
cfg = snakemake.params.features
dataset = Dataset.load(snakemake.input.dataset)
split = load_split(snakemake.input.split)
X = random_binning_features(dataset.X, split["train"], n_grids=cfg["n_grids"], sigma=cfg["sigma"], seed=snakemake.params.seed)
save_matrix(snakemake.output.features, X)
logging.info("random binning features of %s: %s, %d non-zeros", dataset.x_kind, X.shape, X.nnz)
