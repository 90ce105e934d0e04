# Evaluation: every method's test sets under every utility (the paper's Table 3), with the SVBOP
# methods' test time per sample and HSG's and HF's agreement with SVBOP-Full (Table 4), and the
# dataset summary (the paper's Table 2, with the time spent training its models and computing its features).


rule evaluate:
    input:
        sets=lambda wc: list(predictions(wc.dataset).values()),
        tuning=lambda wc: expand("results/{d}/predictions/threshold/{u}.tsv", d=wc.dataset, u=UTILITIES),
        timings=lambda wc: list(timings(wc.dataset).values()),
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("metrics", "evaluation", "sets", "timing", "io", "_kernels"),
    output:
        report(
            "results/{dataset}/metrics.tsv",
            caption="../../report/captions/metrics.rst",
            category="Metrics",
            labels={"dataset": "{dataset}", "table": "metrics"},
        ),
    params:
        dataset=lambda wc: wc.dataset,
        utilities=list(UTILITIES.values()),
        methods=lambda wc: list(predictions(wc.dataset)),  # (method, param), in the order of input.sets
        timed=lambda wc: list(timings(wc.dataset)),  # (method, param), in the order of input.timings
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/evaluate/{dataset}.log",
    benchmark:
        "results/benchmarks/evaluate/{dataset}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/evaluate.py"


rule summarise_dataset:
    input:
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        scores="results/{dataset}/scores/flat.npz",
        # our flat model's D and training time (none for a model's outputs: trained elsewhere)
        model_info=lambda wc: [] if is_model_outputs(wc.dataset) else f"results/{wc.dataset}/models/flat.json",
        calibration=lambda wc: calibration_records().get(wc.dataset, []),
        # the CNN whose hidden layer is the features: its training is part of the training time
        cnn_history=lambda wc: cnn_history(wc.dataset),
        # the features job's wall time (a Snakemake benchmark file is a product of its rule)
        features_benchmark=lambda wc: [] if is_model_outputs(wc.dataset) else features_benchmark(wc.dataset),
        code=library_sources("evaluation"),
    output:
        "results/{dataset}/summary.json",
    params:
        dataset=lambda wc: wc.dataset,
        title=lambda wc: dataset_config(wc).get("title", wc.dataset),
        features=lambda wc: "model outputs" if is_model_outputs(wc.dataset) else dataset_config(wc)["features"]["kind"],
    log:
        "results/logs/summarise_dataset/{dataset}.log",
    benchmark:
        "results/benchmarks/summarise_dataset/{dataset}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/summarise_dataset.py"


# Beyond the paper (config `methods:`): every kind of set of one dataset - the paper's SVBOP-Full,
# threshold, top-s and ICP, and the methods beyond it - under every utility, with its coverage,
# worst-class coverage and set sizes. Apart from metrics.tsv (the paper's Tables 3 and 4).
rule evaluate_beyond:
    input:
        sets=lambda wc: [*beyond_compared(wc.dataset).values(), *beyond_predictions(wc.dataset).values()],
        calibration=lambda wc: list(beyond_calibration(wc.dataset).values()),
        scores="results/{dataset}/scores/flat.npz",
        # the hierarchy of the top-node grouping (methods.mondrian.by), for every method's worst group coverage
        # and of risk control's hierarchical loss (its mean loss on the test rows)
        dataset=lambda wc: f"data/{wc.dataset}/dataset.npz" if "predicted_top_node" in mondrian_groupings(wc.dataset)
        or any(k[0].startswith("risk_hierarchical_") for k in beyond_predictions(wc.dataset)) else [],
        code=library_sources("metrics", "evaluation", "sets", "io", "_kernels", "conformal"),
    output:
        report(
            "results/{dataset}/beyond.tsv",
            caption="../../report/captions/beyond.rst",
            category="Beyond the paper",
            labels={"dataset": "{dataset}", "table": "every kind of set"},
        ),
        # weighted and conditional conformal sets' promises, checked on the test rows (the page's block)
        promises="results/{dataset}/promises.json",
    params:
        dataset=lambda wc: wc.dataset,
        utilities=list(UTILITIES.values()),
        # (method, param), in the order of input.sets and of input.calibration
        methods=lambda wc: [*beyond_compared(wc.dataset), *beyond_predictions(wc.dataset)],
        calibrated=lambda wc: list(beyond_calibration(wc.dataset)),
        groupings=lambda wc: mondrian_groupings(wc.dataset),
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/evaluate_beyond/{dataset}.log",
    benchmark:
        "results/benchmarks/evaluate_beyond/{dataset}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/evaluate_beyond.py"


# The tree's guaranteed sets beside SVBOP-HF's Bayes-optimal sets: coverage, set size, time per row.
rule evaluate_tree_sets:
    input:
        sets=lambda wc: [*tree_sets(wc.dataset).values(), *(
            f"results/{wc.dataset}/predictions/{m}/{u}.npz" for m in svbop_methods(wc.dataset) if m.startswith("svbop_hf_")
            for u in UTILITIES)],
        records=lambda wc: [*(p[: -len(".npz")] + ".json" for p in tree_sets(wc.dataset).values()), *(
            f"results/{wc.dataset}/predictions/{m}/{u}.json" for m in svbop_methods(wc.dataset) if m.startswith("svbop_hf_")
            for u in UTILITIES)],
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        code=library_sources("tree_sets", "sets", "io"),
    output:
        "results/{dataset}/tree_sets.tsv",
    params:
        dataset=lambda wc: wc.dataset,
        methods=lambda wc: [*tree_sets(wc.dataset), *((m, u) for m in svbop_methods(wc.dataset) if m.startswith("svbop_hf_")
                                                    for u in UTILITIES)],
    log:
        "results/logs/evaluate_tree_sets/{dataset}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/evaluate_tree_sets.py"

