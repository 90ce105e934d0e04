# svbop: reproduce "Efficient set-valued prediction in multi-class classification"
# (Mortier, Wydmuch, Dembczynski, Hullermeier, Waegeman; DMKD 2021).
#
#   snakemake --cores 2            run the configured experiment (config.yaml)
#   snakemake -n                   show what would run
#
# Data flows one way: download -> parse -> features -> model -> predict -> evaluate -> report;
# one rule file per stage in workflow/rules/, the real work in the library workflow/svbop/.

from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


validate(config, schema="workflow/schemas/config.schema.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        utility_tables(),
    default_target: True
