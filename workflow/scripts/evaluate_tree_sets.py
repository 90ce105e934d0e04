"""Glue: the tree's guaranteed sets beside SVBOP-HF's, their coverage, size and time per row
(rule evaluate_tree_sets)."""

import json
import logging

from svbop.datasets import Dataset, load_split
from svbop.io import SetFiles
from svbop.logs import to_log_file
from svbop.tree_sets import tree_sets_table, write_tree_sets

to_log_file(snakemake.log[0])
keys = [tuple(k) for k in snakemake.params.methods]
y = Dataset.load(snakemake.input.dataset).y[load_split(snakemake.input.split)["test"]]
records = {k: json.loads(open(p).read()) for k, p in zip(keys, snakemake.input.records)}
rows = tree_sets_table(snakemake.params.dataset, y, SetFiles(dict(zip(keys, snakemake.input.sets))), records)
write_tree_sets(snakemake.output[0], rows)
logging.info("%d kinds of sets from the tree on %d test rows -> %s", len(rows), len(y), snakemake.output[0])
