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

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


validate(config, schema="workflow/schemas/config.schema.yaml")


report: "report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/download.smk"
include: "workflow/rules/features.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/index.smk"
include: "workflow/rules/predict.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        "results/report.html",
        [dataset_results(dataset) for dataset in DATASETS],
        utility_tables(),
    default_target: True
