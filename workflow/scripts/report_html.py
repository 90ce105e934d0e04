"""Glue: the self-contained HTML report results/report.html (rule report_html); it supersedes the page a
failed run left (results/report.partial.html), which is removed."""

import logging
import os

from svbop.logs import to_log_file
from svbop.report import build_report, read_metrics
from svbop.report.compare import read_train_seconds

to_log_file(snakemake.log[0])
out = snakemake.output[0]
tables = [t for t in snakemake.input.tables if t.endswith((".csv", ".tsv", ".tex", ".json"))]
illustrations = {
    name: {"records": files[0], "figure": files[1] if len(files) > 1 else None}
    for name, files in snakemake.params.illustrations.items()
}
model = None
if snakemake.params.model_page:  # every dataset a model's outputs: the page about the model (rule describe_model)
    files = list(snakemake.input.model)
    model = {"epsilons": snakemake.params.epsilons,
             "classes": {os.path.basename(f)[len("class_coverage_"):-len(".tsv")]: f for f in files if f.endswith(".tsv")},
             "examples": {os.path.basename(os.path.dirname(f)): f for f in files if f.endswith("examples.json")},
             "live": {os.path.basename(os.path.dirname(f)): f for f in files if f.endswith("live.json")},
             "promises": {os.path.basename(os.path.dirname(f)): f for f in files if f.endswith("promises.json")}}
    tables = [f for f in files if f.endswith((".csv", ".tsv"))]  # its own tables only (none of the paper's)
build_report(
    out,
    summaries=snakemake.input.summaries,
    metrics=read_metrics(snakemake.input.metrics) if snakemake.input.metrics else None,
    # the paper's figures; the page about a model draws its own utilities figure at the model's K
    figures={"utilities": snakemake.input.figure, "fbeta_family": snakemake.input.families[0],
             "genreject_family": snakemake.input.families[1]} if model is None else {},
    config=snakemake.params.config,
    utilities=snakemake.params.utilities,
    title=snakemake.params.title,
    template=snakemake.input.template,
    not_run=snakemake.params.not_run,
    missing=snakemake.params.missing,
    train_seconds=read_train_seconds(snakemake.params.train_time_files),
    illustrations=illustrations,
    downloads={os.path.basename(t): os.path.relpath(t, os.path.dirname(out))
               for t in [*tables, *(f for f in snakemake.input.beyond if f.endswith(".csv"))]},
    # beyond the paper (config `methods:`): its own section, none when no method is configured
    beyond=snakemake.params.beyond_tables or None,
    beyond_figure=next((f for f in snakemake.input.beyond if f.endswith(".png")), None),
    beyond_skipped=snakemake.params.beyond_skipped,
    scaling=snakemake.params.scaling,
    calibration=dict(zip(snakemake.params.calibrated, snakemake.input.calibration)),
    # flat: {C: auto}: the values chosen on the validation rows, in Table 5 (rules/tune.smk)
    tuning=snakemake.params.tuned,
    model=model,
    tree_sets=list(snakemake.input.tree_sets),
)
if os.path.exists(snakemake.params.partial):  # a failed run's page of what had finished: superseded
    os.remove(snakemake.params.partial)
    logging.info("removed %s (a failed run's partial page; %s replaces it)", snakemake.params.partial, out)
logging.info("report of %d datasets -> %s", len(snakemake.input.summaries), out)
