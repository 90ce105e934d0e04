"""Glue: every kind of set of one dataset (the paper's and beyond it) -> utilities, coverage, worst-class
coverage and set sizes (rule evaluate_beyond)."""

import logging

from svbop.conformal import predicted_groups
from svbop.datasets import Dataset
from svbop.evaluation import evaluate_beyond, read_calibration
from svbop.io import SetFiles, load_score_arrays, load_score_groups, write_tsv
from svbop.logs import to_log_file

WSC_BYTES = 512 << 20
to_log_file(snakemake.log[0])
(y,) = load_score_arrays(snakemake.input.scores, "y_test")
groups, group_names = {}, {}
predicted = [by for by in snakemake.params.groupings if by != "group_column"]
(P_test,) = load_score_arrays(snakemake.input.scores, "P_test")
if predicted:  # methods.mondrian.by: every method's worst coverage over these groups
    hierarchy = Dataset.load(snakemake.input.dataset).hierarchy if "predicted_top_node" in predicted else None
    groups = {by: predicted_groups(P_test, by, hierarchy) for by in predicted}
# CovGap, SSCV and worst-slab coverage over the test rows' probabilities (WSC: while they fit in
# WSC_BYTES as float64; beyond, its columns stay empty)
X = P_test if P_test.size * 8 <= WSC_BYTES else None
if X is None:
    logging.info("worst-slab coverage skipped: %d x %d probabilities exceed %d MB as float64", *P_test.shape,
                 WSC_BYTES >> 20)
if "group_column" in snakemake.params.groupings:  # format.group_column: coverage of every group, by name too
    group_names["group_column"], (groups["group_column"],) = load_score_groups(snakemake.input.scores, "test")
methods = [tuple(m) for m in snakemake.params.methods]
sets = SetFiles(dict(zip(methods, snakemake.input.sets)))  # read one method at a time
extra, unreachable = {}, []
for method, path in zip(snakemake.params.calibrated, snakemake.input.calibration):
    extra[tuple(method)] = read_calibration(path)
    if not extra[tuple(method)].pop("reached"):  # no parameter reaches 1 - epsilon: a row without numbers
        unreachable.append(tuple(method))
rows = evaluate_beyond(sets, y, snakemake.params.utilities, dataset=snakemake.params.dataset, extra=extra,
                       unreachable=unreachable, groups=groups, group_names=group_names, X=X)
write_tsv(snakemake.output[0], rows)
logging.info("%d methods x %d utilities on %d test rows -> %s", len(rows), len(snakemake.params.utilities), len(y),
             snakemake.output[0])
