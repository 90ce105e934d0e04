"""Glue: which sets to use (rule choose_sets): per coverage level asked and per utility, the method that meets it
with the smallest sets and its runners-up, from the table of every kind of set -> results/tables/choose_sets.csv."""

import logging

from svbop.logs import to_log_file
from svbop.report.beyond import beyond_table, read_beyond
from svbop.report.model import choose_sets, write_choose_sets

to_log_file(snakemake.log[0])
frame = read_beyond(snakemake.input.beyond, snakemake.params.utilities)
chosen = {d: choose_sets(beyond_table(frame, d, snakemake.params.utilities), snakemake.params.epsilons,
                         snakemake.params.utilities)
          for d in dict.fromkeys(frame["dataset"].astype(str))}
write_choose_sets(snakemake.output[0], chosen)
logging.info("%s", "; ".join(f"{d}: {g} -> {m}" for d, c in chosen.items()
                              for g, m in zip(c.loc[c["rank"] <= 1, "goal"], c.loc[c["rank"] <= 1, "method"])))
