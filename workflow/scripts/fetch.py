"""Glue: one raw file (rule fetch) or weights file (rule fetch_weights) from its URL(s), a local
path, or a manual download, checksummed; a failure is recorded for the report, then re-raised."""

from pathlib import Path

from svbop.download import fetch
from svbop.logs import to_log_file
from svbop.report.status import WEIGHTS_OWNER, failure_path, failure_recorded

to_log_file(snakemake.log[0])
wildcards = snakemake.wildcards
if "dataset" in wildcards.keys():
    record, stage = failure_path(wildcards.dataset, f"fetch.{wildcards.file}"), f"fetch {wildcards.file}"
else:
    record, stage = failure_path(WEIGHTS_OWNER, wildcards.weights), f"fetch_weights {wildcards.weights}"
spec = dict(snakemake.params.spec)
if isinstance(spec.get("url"), list):  # mirrors, tried in order
    spec["urls"] = spec.pop("url")
if "deadline_min" in spec:
    spec["deadline"] = 60.0 * spec.pop("deadline_min")
if getattr(snakemake.params, "produced", False):
    # a file this run writes (rule fetch's input): the digest recorded for its last version is the
    # pipeline's own record, not a pin; it is recorded anew for the file as it is now
    Path(f"{snakemake.output[0]}.sha256").unlink(missing_ok=True)
with failure_recorded(record, stage=stage, log=snakemake.log[0]):
    fetch(snakemake.output[0], where=snakemake.params.where, **spec)
