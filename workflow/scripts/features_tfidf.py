"""Glue: tf-idf of term counts, texts (words) or sequences (k-mers), fitted on the training rows, plus
the Pfam domain encoding where configured (rule features_tfidf)."""

import logging
import os

import numpy as np
import scipy.sparse as sp

from svbop.datasets import Dataset, load_split
from svbop.features.domains import domain_encoding, read_domain_annotations, read_domain_column, read_families
from svbop.features.tfidf import tfidf_features, tfidf_strings
from svbop.io import save_matrix
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
cfg = snakemake.params.features
dataset = Dataset.load(snakemake.input.dataset)
split = load_split(snakemake.input.split)
if dataset.x_kind in ("text", "sequences"):
    X = tfidf_strings(dataset.X, split["train"], analyzer=cfg["analyzer"], ngram_range=tuple(cfg["ngram_range"]),
                      lowercase=cfg["lowercase"], min_df=cfg["min_df"], max_features=cfg.get("max_features"),
                      sublinear_tf=cfg["sublinear_tf"])
else:
    X = tfidf_features(dataset.X, split["train"], sublinear_tf=cfg["sublinear_tf"], drop_unseen=cfg["drop_unseen"])
if cfg.get("domains"):
    raw = snakemake.input.raw
    families = read_families(os.path.join(raw, cfg["domains"]["families"]))
    if "from_csv" in cfg["domains"]:
        annotations = read_domain_column(raw, cfg["domains"]["from_csv"]["files"], cfg["domains"]["from_csv"]["column"])
    else:
        annotations = read_domain_annotations(os.path.join(raw, cfg["domains"]["annotations"]))
    X = sp.hstack([X, domain_encoding(dataset.ids, annotations, families)], format="csr", dtype=np.float32)
    logging.info("appended the Pfam domain encoding over %d families", len(families))
save_matrix(snakemake.output.features, X)
logging.info("tf-idf features of %s: %s, %d non-zeros", dataset.x_kind, X.shape, X.nnz)
