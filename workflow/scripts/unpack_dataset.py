"""Glue: verify every download, then unpack archives / link files into the raw folder (rule unpack_dataset)."""

from svbop.archives import build_raw_folder
from svbop.download import verify
from svbop.logs import to_log_file
from svbop.report.status import failure_path, failure_recorded

to_log_file(snakemake.log[0])
files = snakemake.params.files
with failure_recorded(failure_path(snakemake.wildcards.dataset, "unpack_dataset"), stage="unpack_dataset",
                      log=snakemake.log[0]):
    # Files placed by hand are checked here too (the fetch job does not run when the file exists).
    for name, path in zip(files, snakemake.input.downloads):
        verify(path, sha256=files[name].get("sha256"), md5=files[name].get("md5"), git_blob=files[name].get("git_blob"),
               where=f"{snakemake.params.where}.files.{name}")
    build_raw_folder(snakemake.params.downloads, snakemake.output[0], list(files), snakemake.params.unpack)
