"""Glue: the F-beta family and the generalised reject option family of g(s) (rule plot_utility_families)."""

import logging

from svbop.logs import to_log_file
from svbop.report.figures import plot_fbeta_family, plot_genreject_family, save_figure

to_log_file(snakemake.log[0])
save_figure(plot_fbeta_family(snakemake.params.betas, K=snakemake.params.K), snakemake.output.fbeta)
save_figure(plot_genreject_family(snakemake.params.Ks), snakemake.output.genreject)
logging.info("F-beta family (betas %s, K=%d) and generalised reject family (K %s)", snakemake.params.betas,
             snakemake.params.K, snakemake.params.Ks)
