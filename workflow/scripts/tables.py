"""Glue: the paper's Table 1 (datasets) and Table 3 (long format, as the paper's CSV) (rule tables)."""

import json
import logging

from svbop.io import atomic_path
from svbop.logs import to_log_file
from svbop.report import metrics_long, read_metrics, table1

to_log_file(snakemake.log[0])
summaries = [json.loads(open(path).read()) for path in snakemake.input.summaries]
with atomic_path(snakemake.output.table1) as tmp:
    table1(summaries).to_csv(tmp, sep="\t", index=False)
with atomic_path(snakemake.output.table3) as tmp:
    metrics_long(read_metrics(snakemake.input.metrics)).to_csv(tmp, index=False)
logging.info("Table 1 and Table 3 of %d datasets -> %s, %s", len(summaries), *snakemake.output)
