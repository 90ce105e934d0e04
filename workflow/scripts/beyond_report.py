"""Glue: every kind of set of every dataset in one table, and the figure of coverage against mean set
size (rule beyond_report; the report's section "Beyond the paper")."""

import logging

from svbop.io import atomic_path, escape_frame
from svbop.report.beyond import read_beyond
from svbop.report.figures import plot_coverage_size, save_figure
from svbop.report.model import plain_name
from svbop.report.names import method_name
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
frame = read_beyond(snakemake.input.beyond, snakemake.params.utilities)
# the keys (dataset, method, param) first, then the name the page shows (label), then the numbers
table = frame.copy()
table.insert(3, "label", [plain_name(method_name(m, p)) for m, p in zip(frame["method"], frame["param"])])
with atomic_path(snakemake.output.table) as tmp:
    escape_frame(table).to_csv(tmp, index=False)  # a name is never a formula
save_figure(plot_coverage_size(frame, snakemake.params.titles, paper=not snakemake.params.model_page), snakemake.output.figure)
logging.info("%d methods on %d datasets -> %s, %s", len(frame), frame["dataset"].nunique(), snakemake.output.table,
             snakemake.output.figure)
