"""Glue: the self-contained HTML report results/report.html (rule report_html)."""

import logging

from svbop.logs import to_log_file
from svbop.report import build_report, read_metrics

to_log_file(snakemake.log[0])
build_report(
    snakemake.output[0],
    summaries=snakemake.input.summaries,
    metrics=read_metrics(snakemake.input.metrics),
    figures={"utilities": snakemake.input.figure},
    config=snakemake.params.config,
    utilities=snakemake.params.utilities,
    title=snakemake.params.title,
    template=snakemake.input.template,
)
logging.info("report of %d datasets -> %s", len(snakemake.input.summaries), snakemake.output[0])
