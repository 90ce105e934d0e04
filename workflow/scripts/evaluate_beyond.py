"""Glue: every kind of set of one dataset (the paper's and beyond it) -> utilities, coverage, worst-class
coverage and set sizes (rule evaluate_beyond)."""

import logging

from svbop.conformal import predicted_groups
from svbop.datasets import Dataset
import json

from svbop.evaluation import check_promise, evaluate_beyond, read_calibration, test_risk
from svbop.io import SetFiles, atomic_path, load_score_arrays, load_score_groups, read_json_object, write_tsv
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
risk_tree = None
row_arrays, promises = {}, []  # the test rows' weights / group columns; each promise checked on them
for method, path in zip(snakemake.params.calibrated, snakemake.input.calibration):
    extra[tuple(method)] = read_calibration(path)
    if method[0].startswith("risk_"):  # risk control's promise, E[loss] <= alpha, checked on the test rows
        if method[0].startswith("risk_hierarchical_") and risk_tree is None:
            risk_tree = Dataset.load(snakemake.input.dataset).hierarchy
        checked = test_risk(read_json_object(path, "the calibration record"), sets[tuple(method)], y, risk_tree)
        extra[tuple(method)].update(checked)
        extra[tuple(method)]["calibrated"] += (f"; promise E[loss] <= {checked['target_risk']:g}: mean loss on the "
                                               f"test rows {checked['test_risk']:.4f}")
    if method[0].startswith("label_shift_"):  # label shift: the test rows' coverage, their class frequencies
        record = read_json_object(path, "the calibration record")
        checked = check_promise(record, sets[tuple(method)], y)
        promises.append({"method": method[0], "param": method[1], "promise": "label_shift", **checked,
                         **{k: record[k] for k in ("estimator", "weights", "calibration_freq", "estimated_test_freq")}})
        extra[tuple(method)]["calibrated"] += (f"; promise coverage >= {checked['target_pct']:.4g} % under the"
                                               f" estimated shift: test coverage {checked['coverage_pct']:.2f} %")
    if method[0].startswith(("weighted_", "conditional_")):  # covariate shift, overlapping groups: checked here
        record = read_json_object(path, "the calibration record")
        key = "w_test" if record["promise"] == "weighted" else "Phi_test"
        if key not in row_arrays:
            (row_arrays[key],) = load_score_arrays(snakemake.input.scores, key)
        checked = check_promise(record, sets[tuple(method)], y, weights=row_arrays.get("w_test"),
                                group_columns=row_arrays.get("Phi_test"))
        promises.append({"method": method[0], "param": method[1], "promise": record["promise"], **checked})
        if record["promise"] == "weighted":
            text = (f"; promise coverage under the weights >= {checked['target_pct']:.4g} %: weighted coverage of "
                    f"the test rows {checked['weighted_coverage_pct']:.2f} %")
        else:
            worst = next((g for g in checked["groups"] if g["name"] == checked["worst_group"]), None)
            text = (f"; promise coverage >= {checked['target_pct']:.4g} % in each of {len(checked['groups'])} "
                    "groups: " + (f"lowest on the test rows {worst['coverage_pct']:.2f} % ({worst['name']}, "
                                  f"{worst['n']:,} rows)" if worst else "no group has test rows"))
        extra[tuple(method)]["calibrated"] += text
    if not extra[tuple(method)].pop("reached"):  # no parameter reaches 1 - epsilon: a row without numbers
        unreachable.append(tuple(method))
rows = evaluate_beyond(sets, y, snakemake.params.utilities, dataset=snakemake.params.dataset, extra=extra,
                       unreachable=unreachable, groups=groups, group_names=group_names, X=X)
write_tsv(snakemake.output[0], rows)
logging.info("%d methods x %d utilities on %d test rows -> %s", len(rows), len(snakemake.params.utilities), len(y),
             snakemake.output[0])
with atomic_path(snakemake.output.promises) as tmp:  # the page's block of promises (svbop.report.promises)
    tmp.write_text(json.dumps({"dataset": snakemake.params.dataset, "n_test": int(len(y)), "promises": promises},
                              indent=2) + "\n")
