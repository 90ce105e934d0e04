"""Glue: one raw file from its URL(s), a local path, or a manual download, checksummed (rule fetch)."""

from svbop.download import fetch
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
spec = dict(snakemake.params.spec)
spec.pop("size_mb", None)
if isinstance(spec.get("url"), list):  # mirrors, tried in order
    spec["urls"] = spec.pop("url")
fetch(snakemake.output[0], where=snakemake.params.where, **spec)
