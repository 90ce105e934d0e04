# Report: tables, figures and the self-contained HTML page results/report.html.


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


rule plot_utilities:
    input:
        library_sources("utilities", "report/__init__", "report/figures"),
    output:
        report(
            "results/figures/utilities_K{K}.png",
            caption="../../report/captions/utilities.rst",
            category="Figures",
            labels={"figure": "g(s) at K={K}"},
        ),
    params:
        utilities=config["utilities"],
        K=lambda wc: int(wc.K),
    log:
        "results/logs/plot_utilities/K{K}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/plot_utilities.py"


rule tables:
    input:
        metrics=expand("results/{dataset}/metrics.tsv", dataset=DATASETS),
        summaries=expand("results/{dataset}/summary.json", dataset=DATASETS),
        code=library_sources("report/__init__", "report/tables"),
    output:
        table1=report(
            "results/tables/table1_datasets.tsv",
            caption="../../report/captions/table1.rst",
            category="Tables",
            labels={"table": "Table 1: datasets"},
        ),
        table3=report(
            "results/tables/table3_utilities.csv",
            caption="../../report/captions/metrics.rst",
            category="Tables",
            labels={"table": "Table 3: utilities (long format, as the paper's CSV)"},
        ),
    log:
        "results/logs/tables/tables.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/tables.py"


rule report_html:
    input:
        metrics=expand("results/{dataset}/metrics.tsv", dataset=DATASETS),
        summaries=expand("results/{dataset}/summary.json", dataset=DATASETS),
        tables=rules.tables.output,
        figure=f"results/figures/utilities_K{config['report']['figure_K']}.png",
        template="report/templates/report.html.j2",
        code=library_sources("report/__init__", "report/html", "report/tables"),
    output:
        report(
            "results/report.html",
            caption="../../report/captions/report.rst",
            category="Report",
            labels={"page": "results/report.html"},
        ),
    params:
        config=config,
        utilities=config["utilities"],
        title=config["report"]["title"],
    log:
        "results/logs/report_html/report.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/report_html.py"
