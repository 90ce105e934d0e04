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
            labels={"figure": "Figure 1 (left): g(s) at K={K}"},
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


rule plot_utility_families:
    input:
        library_sources("utilities", "report/__init__", "report/figures"),
    output:
        fbeta=report(
            f"results/figures/fbeta_family_K{config['report']['figure_K']}.png",
            caption="../../report/captions/families.rst",
            category="Figures",
            labels={"figure": "Figure 1 (right): the F-beta family"},
        ),
        genreject=report(
            "results/figures/genreject_family.png",
            caption="../../report/captions/genreject.rst",
            category="Figures",
            labels={"figure": "Figure 3: the generalised reject option"},
        ),
    params:
        betas=config["report"]["fbeta_betas"],
        K=config["report"]["figure_K"],
        Ks=config["report"]["genreject_K"],
    log:
        "results/logs/plot_utility_families/families.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/plot_families.py"


rule illustrate:
    input:
        unpack(illustration_inputs),
        code=library_sources("search", "report/__init__", "report/illustrations"),
    output:
        records="results/illustrations/{name}.json",
        figure=report(
            "results/illustrations/{name}.png",
            caption="../../report/captions/illustrations.rst",
            category="Figures",
            labels={"figure": "Figure 2: {name}"},
        ),
    params:
        illustration=lambda wc: illustrations()[wc.name],
        title=lambda wc: config["datasets"][illustrations()[wc.name]["dataset"]].get("title")
        or illustrations()[wc.name]["dataset"],
        kind=lambda wc: wc.name,
    wildcard_constraints:
        name="entropy|image_top",
    log:
        "results/logs/illustrate/{name}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/illustrate.py"


use rule illustrate as illustrate_texts with:
    output:
        records="results/illustrations/{name}.json",
    wildcard_constraints:
        name="text_top",


rule tables:
    input:
        metrics=expand("results/{dataset}/metrics.tsv", dataset=DATASETS),
        summaries=expand("results/{dataset}/summary.json", dataset=DATASETS),
        train_times=lambda wc: sorted({f for d in DATASETS for fs in train_time_files(d).values() for f in fs}),
        # flat/hf/hsg `auto`: the tuning records, for Table 5 (rules/tune.smk)
        tuning=lambda wc: tuning_records(),
        code=library_sources(
            "report/__init__", "report/tables", "report/paper", "report/compare", "report/status", "tuning"
        ),
    output:
        table2=report(
            "results/tables/table2_datasets.tsv",
            caption="../../report/captions/table2.rst",
            category="Tables",
            labels={"table": "Table 2: datasets"},
        ),
        table3=report(
            "results/tables/table3_utilities.csv",
            caption="../../report/captions/metrics.rst",
            category="Tables",
            labels={"table": "Table 3: utilities (long format, as the paper's CSV)"},
        ),
        # each of the paper's Tables 2-5 beside ours (CSV in Snakemake's report, and LaTeX)
        compared=[
            f
            for name, number in (("table2", 2), ("table3", 3), ("table4", 4), ("table5", 5))
            for f in (
                report(
                    f"results/tables/{name}_vs_paper.csv",
                    caption="../../report/captions/comparison.rst",
                    category="Tables",
                    labels={"table": f"Table {number} beside the paper"},
                ),
                f"results/tables/{name}_vs_paper.tex",
            )
        ]
        + ["results/tables/dataset_status.csv", "results/tables/claims.json"],
    # large dicts print as their size and digest in Snakemake's reasons (svbop.config.Summarised)
    params:
        datasets=Summarised(config["datasets"]),
        run=config["run"],
        not_run=Summarised(NOT_RUN),
        missing=Summarised(MISSING),
        train_time_files=lambda wc: Summarised({d: train_time_files(d) for d in DATASETS}),
        tuned=lambda wc: tuned_datasets(),
    log:
        "results/logs/tables/tables.log",
    benchmark:
        "results/benchmarks/tables/tables.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/tables.py"


# Beyond the paper (config `methods:`): every kind of set of every dataset in one table, and the
# figure of coverage against mean set size; the report's section apart from Tables 3 and 4.
rule beyond_report:
    input:
        beyond=expand("results/{dataset}/beyond.tsv", dataset=DATASETS),
        code=library_sources("evaluation", "report/__init__", "report/beyond", "report/names", "report/figures",
                             "report/model"),
    output:
        table=report(
            "results/tables/beyond_every_set.csv",
            caption="../../report/captions/beyond.rst",
            category="Beyond the paper",
            labels={"table": "every kind of set"},
        ),
        figure=report(
            "results/figures/beyond_coverage_size.png",
            caption="../../report/captions/beyond_figure.rst",
            category="Beyond the paper",
            labels={"figure": "coverage against mean set size"},
        ),
    params:
        utilities=config["utilities"],
        titles=lambda wc: {d: config["datasets"][d].get("title") or d for d in DATASETS},
        # the page about a model: its legend names the kinds of set without the paper
        model_page=model_page(),
    log:
        "results/logs/beyond_report/beyond.log",
    benchmark:
        "results/benchmarks/beyond_report/beyond.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/beyond_report.py"


# The page about a model (every dataset of the run a model's outputs, svbop report): which sets to use, each
# class's coverage by name and example rows, beside calibration, Table 3 and every kind of set.
rule describe_model:
    input:
        scores="results/{dataset}/scores/flat.npz",
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        sets=lambda wc: [*beyond_compared(wc.dataset).values(), *beyond_predictions(wc.dataset).values()],
        calibration=lambda wc: list(beyond_calibration(wc.dataset).values()),
        # several models on the same rows (svbop report): every model shows the example rows of the first
        shared=lambda wc: [] if config["report"].get("examples_from", "") in ("", wc.dataset)
                          else [f"results/{config['report']['examples_from']}/examples.json"],
        code=library_sources("report/model", "report/names", "metrics", "io"),
    output:
        classes="results/tables/class_coverage_{dataset}.tsv",
        examples="results/{dataset}/examples.json",
    params:
        methods=lambda wc: [*beyond_compared(wc.dataset), *beyond_predictions(wc.dataset)],
        calibrated=lambda wc: list(beyond_calibration(wc.dataset)),
        picked_on=lambda wc: config["report"].get("examples_from", ""),
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/describe_model/{dataset}.log",
    benchmark:
        "results/benchmarks/describe_model/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/describe_model.py"


# The level chosen in the browser: the calibration and test rows as the page's script needs them to compute
# LAC (ICP), deterministic APS and class-conditional LAC at any level from 0.01 to 0.30, and SVBOP-Full's own sets
# (svbop/report/live.py).
rule live_data:
    input:
        scores="results/{dataset}/scores/flat.npz",
        examples="results/{dataset}/examples.json",
        code=library_sources("report/live", "conformal", "_prefix", "utilities", "search"),
    output:
        "results/{dataset}/live.json",
    params:
        utilities=config["utilities"],
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/live_data/{dataset}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/live_data.py"


rule choose_sets:
    input:
        beyond=expand("results/{dataset}/beyond.tsv", dataset=DATASETS),
        code=library_sources("report/model", "report/beyond", "report/names"),
    output:
        "results/tables/choose_sets.csv",
    params:
        utilities=config["utilities"],
        epsilons=coverage_epsilons(),
    log:
        "results/logs/choose_sets/choose_sets.log",
    benchmark:
        "results/benchmarks/choose_sets/choose_sets.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/choose_sets.py"


rule report_html:
    input:
        metrics=expand("results/{dataset}/metrics.tsv", dataset=DATASETS),
        summaries=expand("results/{dataset}/summary.json", dataset=DATASETS),
        # the paper's tables and figures: not on the page about a model, which draws its own utilities figure
        tables=rules.tables.output if not model_page() else [],
        figure=f"results/figures/utilities_K{config['report']['figure_K']}.png" if not model_page() else [],
        families=rules.plot_utility_families.output if not model_page() else [],
        illustrations=lambda wc: [f for fs in illustration_files().values() for f in fs],
        train_times=rules.tables.input.train_times,
        template="report/templates/report.html.j2",
        # its includes: the CSS and the page about a model, one file per section
        template_parts=["report/templates/style.html.j2", *sorted(
            f"report/templates/model/{f}" for f in os.listdir("report/templates/model") if f.endswith(".html.j2"))],
        beyond=lambda wc: rules.beyond_report.output if beyond_enabled() and DATASETS else [],
        # optional (report: scaling): benchmarks/bench_scaling.py's results, drawn in Table 4's section
        scaling=lambda wc: [config["report"]["scaling"]] if config["report"].get("scaling") else [],
        # calibrated datasets and model outputs: the section "Calibration of the probabilities"
        calibration=lambda wc: list(calibration_records().values()),
        # flat/hf/hsg `auto`: the tuning records, for Table 5 (rules/tune.smk)
        tuning=lambda wc: tuning_records(),
        # the page about a model (every dataset a model's outputs): which sets to use, classes, example rows
        model=lambda wc: model_page_files(),
        # guaranteed sets from the trees (hf.conformal, hf.risk_control), beside SVBOP-HF's
        tree_sets=lambda wc: [f"results/{d}/tree_sets.tsv" for d in DATASETS if tree_sets(d)],
        code=library_sources(
            "report/__init__", "report/html", "report/tables", "report/compare", "report/paper", "report/status",
            "report/beyond", "report/figures", "report/model", "report/live", "report/models", "tuning",
        ),
    output:
        report(
            "results/report.html",
            caption="../../report/captions/report.rst",
            category="Report",
            labels={"page": "results/report.html"},
        ),
    params:
        config=Summarised(config),
        utilities=config["utilities"],
        title=config["report"]["title"],
        not_run=Summarised(NOT_RUN),
        missing=Summarised(MISSING),
        illustrations=lambda wc: Summarised(illustration_files()),
        train_time_files=rules.tables.params.train_time_files,
        scaling=config["report"].get("scaling"),
        calibrated=lambda wc: list(calibration_records()),
        tuned=lambda wc: tuned_datasets(),
        # the page a failed run left (Snakefile, onerror): out of date once this report is written
        partial=PARTIAL_REPORT,
        beyond_tables=lambda wc: [f"results/{d}/beyond.tsv" for d in DATASETS] if beyond_enabled() else [],
        beyond_skipped=lambda wc: {d: beyond_skipped(d) for d in DATASETS} if beyond_enabled() else {},
        model_page=lambda wc: model_page(),
        epsilons=coverage_epsilons(),
    log:
        "results/logs/report_html/report.log",
    benchmark:
        "results/benchmarks/report_html/report.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/report_html.py"



# The report's first screen, kept in the repository (report/screenshot.png). Not part of `all`
# (Chromium may be absent); ask for it by name:
#   snakemake --cores 1 report/screenshot.png --configfile workflow/configs/quickstart.yaml
# (the target before --configfile, which takes every file name after it)
# Without Chromium the run stops before any job, saying how to install it (the screenshot in the
# repository is left as it is: common.smk, chromium_required).
rule report_screenshot:
    input:
        chromium_required,
        html="results/report.html",
        code=library_sources("report/browser"),
    output:
        png="report/screenshot.png",
    params:
        size=(1280, 900),
    log:
        "results/logs/report_screenshot/screenshot.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/report_screenshot.py"
