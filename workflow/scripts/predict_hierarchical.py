"""Glue: sets restricted to unions of at most max_nodes nodes of the dataset's class hierarchy, for
one utility (rule predict_hierarchical)."""

import logging

from svbop import predict_sets_hierarchical, utility
from svbop.datasets import Dataset
from svbop.io import load_score_arrays, save_sets
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
hierarchy = Dataset.load(snakemake.input.dataset).hierarchy
if hierarchy is None:  # the config promised one (svbop.config): the dataset file disagrees
    raise ValueError(f"{snakemake.input.dataset} has no class hierarchy, so methods.hierarchical cannot run on "
                     f"dataset {snakemake.wildcards.dataset!r}")
(P,) = load_score_arrays(snakemake.input.scores, "P_test")
u = utility(snakemake.params.utility, P.shape[1])
sets = predict_sets_hierarchical(P, u, hierarchy, snakemake.params.max_nodes)
save_sets(snakemake.output[0], sets)
logging.info("hierarchy-restricted sets (at most %d nodes) for %s: %d sets, mean size %.3f -> %s",
             snakemake.params.max_nodes, u.label, len(sets), sets.sizes.mean(), snakemake.output[0])
