"""Glue: tf-idf of the term counts, idf fitted on the training rows (rule features_tfidf)."""

import logging

from svbop.datasets import Dataset, load_split
from svbop.features.tfidf import tfidf_features
from svbop.io import save_matrix
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
dataset = Dataset.load(snakemake.input.dataset)
split = load_split(snakemake.input.split)
X = tfidf_features(dataset.X, split["train"], sublinear_tf=snakemake.params.sublinear_tf)
save_matrix(snakemake.output.features, X)
logging.info("tf-idf features %s, %d non-zeros", X.shape, X.nnz)
