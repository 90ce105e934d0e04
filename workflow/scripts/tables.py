"""Glue: the paper's Table 1 (datasets) and Table 3 (long format, as the paper's CSV) (rule tables)."""

import logging

from svbop.logs import to_log_file
from svbop.report import metrics_long, read_metrics, read_summaries, table1, write_table

to_log_file(snakemake.log[0])
summaries = read_summaries(snakemake.input.summaries)
write_table(table1(summaries), snakemake.output.table1, index=False)
write_table(metrics_long(read_metrics(snakemake.input.metrics)), snakemake.output.table3, index=False)
logging.info("Table 1 and Table 3 of %d datasets -> %s, %s", len(summaries), *snakemake.output)
