"""Glue: VGG16 convolutional features (25,088 per image) of every image (rule features_vgg16)."""

import logging

from svbop.datasets import Dataset
from svbop.features.vgg16 import vgg16_features
from svbop.io import save_matrix
from svbop.logs import progress, to_log_file

to_log_file(snakemake.log[0])
cfg = snakemake.params.features
dataset = Dataset.load(snakemake.input.dataset)
if dataset.x_kind != "image_paths":
    raise ValueError(f"features.kind vgg16 needs images, but dataset {dataset.name!r} holds {dataset.x_kind}")
# The weights file the pipeline fetched and checksummed (rule fetch_weights); none: random weights.
weights = str(snakemake.input.weights) if snakemake.input.weights else None
X = vgg16_features(dataset.X, snakemake.input.raw, weights=weights, batch_size=cfg["batch_size"],
                   n_threads=snakemake.threads, progress=progress)
save_matrix(snakemake.output.features, X)
logging.info("VGG16 features %s", X.shape)
