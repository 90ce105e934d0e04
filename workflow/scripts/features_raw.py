"""Glue: the source's own features (e.g. ALOI.BIN's random binning, an .npz) as the model input (rule features_raw)."""

import logging

from svbop.datasets import Dataset
from svbop.features.raw import raw_features
from svbop.io import save_matrix
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
dataset = Dataset.load(snakemake.input.dataset)
X = raw_features(dataset)
save_matrix(snakemake.output.features, X)
logging.info("raw features %s (%s)", X.shape, type(X).__name__)
