"""Glue: the paper's tables from the metrics files, each beside the paper's values, as CSV and
LaTeX; the status of every dataset; the paper's claims checked (rule tables)."""

import json
import logging

from svbop.io import atomic_path
from svbop.logs import to_log_file
from svbop.report import metrics_long, read_metrics, read_summaries, table2, write_table
from svbop.report.compare import (
    check_claims,
    read_train_seconds,
    table2_vs_paper,
    table3_vs_paper,
    table4_vs_paper,
    table5_vs_paper,
)
from svbop.report.status import dataset_domain, dataset_status, paper_link

to_log_file(snakemake.log[0])
params = snakemake.params
summaries = read_summaries(snakemake.input.summaries)
metrics = read_metrics(snakemake.input.metrics) if snakemake.input.metrics else None
links = {name: paper_link(cfg) for name, cfg in params.datasets.items()}
write_table(table2(summaries), snakemake.output.table2, index=False)
out = iter(snakemake.output.compared)
tables = {"table2": table2_vs_paper(summaries, links)}
if metrics is not None:
    write_table(metrics_long(metrics), snakemake.output.table3, index=False)
    tables["table3"] = table3_vs_paper(metrics, links)
    tables["table4"] = table4_vs_paper(metrics, read_train_seconds(params.train_time_files), links,
                                       features_seconds={s["dataset"]: s.get("features_seconds") for s in summaries})
    domains = {name: dataset_domain(cfg) for name, cfg in params.datasets.items()}
    claims = check_claims(metrics, summaries, links=links, domains=domains)
else:  # nothing ran: empty tables with their headers
    import pandas as pd

    write_table(pd.DataFrame(columns=["dataset", "method", "param", "eval_utility", "utility_pct"]),
                snakemake.output.table3, index=False)
    tables["table3"] = pd.DataFrame(columns=["dataset", "method", "param", "eval_utility", "ours", "paper", "diff"])
    tables["table4"] = pd.DataFrame(columns=["dataset", "algorithm", "utility"])
    claims = []
tables["table5"] = table5_vs_paper(params.datasets, [d for d in params.run if d not in params.not_run], links,
                                   tuned=params.tuned)
for name in ("table2", "table3", "table4", "table5"):
    for _ in (".csv", ".tex"):
        write_table(tables[name], next(out), index=False)
write_table(dataset_status(params.datasets, params.run, params.not_run, missing=params.missing), next(out), index=False)
with atomic_path(next(out)) as tmp:
    tmp.write_text(json.dumps(claims, indent=2, ensure_ascii=False) + "\n")
logging.info("tables of %d datasets; claims: %s", len(summaries), "; ".join(c["verdict"] for c in claims))
