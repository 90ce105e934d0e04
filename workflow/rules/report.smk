# Report stage: tables and figures for results/report.html.


rule utility_properties:
    input:
        library_sources("utilities"),
    output:
        table="results/tables/utility_properties_K{K}.tsv",
    params:
        specs=config["utility_table"].get("specs"),
        K=lambda wc: int(wc.K),
    log:
        "results/logs/utility_properties/K{K}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/utility_properties.py"
