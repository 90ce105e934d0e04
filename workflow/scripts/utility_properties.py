"""Glue: the property table of the set utilities for one K (rule utility_properties)."""

import logging

from svbop import STANDARD_UTILITIES
from svbop.logs import to_log_file
from svbop.report import write_utility_table

to_log_file(snakemake.log[0])
specs = snakemake.params.specs or STANDARD_UTILITIES
write_utility_table(snakemake.output.table, specs, K=snakemake.params.K)
logging.info("wrote %s (%d utilities, K=%d)", snakemake.output.table, len(specs), snakemake.params.K)
