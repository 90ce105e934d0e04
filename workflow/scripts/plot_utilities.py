"""Glue: the paper's figure of g(s) for the configured utilities (rule plot_utilities)."""

import logging

from svbop.logs import to_log_file
from svbop.report import plot_utilities, save_figure

to_log_file(snakemake.log[0])
save_figure(plot_utilities(snakemake.params.utilities, K=snakemake.params.K), snakemake.output[0])
logging.info("g(s) of %d utilities at K=%d -> %s", len(snakemake.params.utilities), snakemake.params.K, snakemake.output[0])
