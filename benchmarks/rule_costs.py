"""What each rule of a pipeline run cost: wall and CPU seconds and peak memory, per dataset.

Reads Snakemake's ``benchmark:`` files of a finished run (``results/benchmarks/<rule>/*.tsv``,
one per job) with :func:`svbop.timing.rule_costs` and prints a Markdown table per dataset: jobs,
summed wall and CPU seconds, the longest job and the largest peak resident memory of any job.
Wall seconds add up job by job (jobs that ran side by side count twice), so the run's own
wall time (printed by Snakemake) is shorter when ``--cores`` > 1.

    python benchmarks/rule_costs.py rehearsal_lshtc1 rehearsal_dmoz [--bench results/benchmarks]
"""

from __future__ import annotations

import argparse

from svbop.timing import rule_costs


def markdown(df) -> str:
    lines = ["| rule | jobs | wall s | longest job s | CPU s | peak RSS MB |", "|---|---:|---:|---:|---:|---:|"]
    for r in df.itertuples():
        lines.append(f"| {r.rule} | {r.jobs} | {r.wall_s:,.0f} | {r.max_job_wall_s:,.0f} | {r.cpu_s:,.0f} | {r.peak_rss_mb:,.0f} |")
    lines.append(f"| **total** | {df.jobs.sum()} | {df.wall_s.sum():,.0f} | | {df.cpu_s.sum():,.0f} | {df.peak_rss_mb.max():,.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", help="dataset names (config keys)")
    parser.add_argument("--bench", default="results/benchmarks", help="the run's benchmarks folder")
    args = parser.parse_args()
    costs = rule_costs(args.bench, args.datasets)
    for name in args.datasets + [""]:
        part = costs[costs.dataset == name]
        if len(part):
            print(f"\n### {name or 'shared rules (tables, report)'}\n")
            print(markdown(part))


if __name__ == "__main__":
    main()
