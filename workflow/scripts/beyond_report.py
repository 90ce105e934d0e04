"""Glue: every kind of set of every dataset in one table, and the figure of coverage against mean set
size (rule beyond_report; the report's section "Beyond the paper")."""

import logging

from svbop.report.beyond import read_beyond
from svbop.report.figures import plot_coverage_size, save_figure
from svbop.report.model import write_every_set
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
frame = read_beyond(snakemake.input.beyond, snakemake.params.utilities)
write_every_set(snakemake.output.table, frame)
save_figure(plot_coverage_size(frame, snakemake.params.titles, paper=not snakemake.params.model_page), snakemake.output.figure)
logging.info("%d methods on %d datasets -> %s, %s", len(frame), frame["dataset"].nunique(), snakemake.output.table,
             snakemake.output.figure)
