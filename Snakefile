# svbop: reproduce "Efficient set-valued prediction in multi-class classification"
# (Mortier, Wydmuch, Dembczynski, Hullermeier, Waegeman; DMKD 2021).
#
#   snakemake --cores 2                                   the experiment in config.yaml
#   snakemake --cores 2 --configfile workflow/configs/quickstart.yaml   offline quickstart
#   snakemake -n                                          show what would run
#   snakemake --report results/provenance.zip             Snakemake's provenance report
#
# Data flows one way: download -> features -> train (flat, trees) -> index -> predict -> evaluate -> report; one rule
# file per stage in workflow/rules/, the real work in the library workflow/svbop/. The page to
# read is results/report.html.

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger
from snakemake.utils import min_version

import svbop.config

min_version("9.0")

# A YAML syntax error in config.yaml is named with its line and column (Snakemake's own message
# names neither; for a file given with --configfile, run `svbop check-config config.yaml FILE`).
try:
    svbop.config.check_yaml("config.yaml")
except svbop.config.ConfigError as exc:
    raise WorkflowError(str(exc)) from None


configfile: "config.yaml"


# A --configfile entry for a built-in dataset that lists `files:` replaces the built-in file list
# (Snakemake would merge the two and still fetch the built-in files); other keys merge as usual.
try:
    for _name in svbop.config.replace_file_lists(
        config, [svbop.config.load_yaml(_path) for _path in workflow.overwrite_configfiles]
    ):
        logger.info(f"svbop: datasets.{_name}.files: the --configfile's file list replaces config.yaml's")
except svbop.config.ConfigError as exc:
    raise WorkflowError(str(exc)) from None


# The schema (defaults filled in) and the checks it cannot express, before any job: one line
# naming the key on error. See svbop/config.py.
try:
    svbop.config.validate_config(config, "workflow/schemas/config.schema.yaml")
    svbop.config.check_config(config)
except svbop.config.ConfigError as exc:
    raise WorkflowError(str(exc)) from None


report: "report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/download.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/tune.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/index.smk"
include: "workflow/rules/predict.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"


onerror:
    # One dataset's failure never hides the others: build the page of those that finished,
    # listing the failed ones with their reason, at results/report.partial.html (never
    # results/report.html, which only rule report_html writes: workflow/rules/common.smk,
    # partial_report). The summary names the failed datasets and any failed job that belongs to no
    # dataset (an illustration, the tables), so it agrees with the run's exit status.
    if report_requested():
        _jobs = failed_jobs()
        try:
            _finished, _failed = partial_report(_jobs)
        except Exception as exc:  # the run has failed already; say why the page could not be built
            logger.error(f"svbop: no partial report: {type(exc).__name__}: {exc}")
            _finished, _failed = None, None
        for _line in svbop.report.status.failure_summary(
            _finished, _failed, jobs_outside_datasets(_jobs), page=PARTIAL_REPORT,
            log=", ".join(map(str, log)) if isinstance(log, (list, tuple)) else log,
        ):
            logger.error(f"svbop: {_line}")


rule all:
    input:
        "results/report.html",
        [dataset_results(dataset) for dataset in DATASETS],
        # the paper's Table 1 at its K: not for the page about a model
        utility_tables() if not model_page() else [],
    default_target: True
