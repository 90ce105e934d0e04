"""Glue: train the paper's MNIST CNN on the training rows, hidden layer as features (rule features_cnn)."""

import logging

from svbop.datasets import Dataset, load_split
from svbop.features.cnn import extract_features, save_cnn, train_cnn
from svbop.io import save_matrix, write_tsv
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
cfg = snakemake.params.cnn
dataset = Dataset.load(snakemake.input.dataset)
split = load_split(snakemake.input.split)
train, val = split["train"], split["validation"]
result = train_cnn(
    dataset.X[train], dataset.y[train], dataset.X[val], dataset.y[val],
    n_classes=dataset.n_classes, hidden=cfg["hidden"], channels=tuple(cfg["channels"]),
    max_epochs=cfg["max_epochs"], patience=cfg["patience"], lr=cfg["lr"], batch_size=cfg["batch_size"],
    seed=snakemake.params.seed, n_threads=snakemake.threads,
)
logging.info("best epoch %d of %d (stopped early: %s)", result.best_epoch, len(result.history), result.stopped_early)
save_cnn(snakemake.output.model, result)
write_tsv(snakemake.output.history, result.history)
save_matrix(snakemake.output.features, extract_features(result.model, dataset.X))
