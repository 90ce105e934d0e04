# Prediction: class probabilities of the held-out rows, then one set per test row for every
# method of the paper's Table 3 (SVBOP-Full per utility; threshold, top-s, ICP baselines).


rule score_flat:
    input:
        model="results/{dataset}/models/flat.npz",
        features=features_file,
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        code=library_sources("linear"),
    output:
        "results/{dataset}/scores/flat.npz",
    resources:
        mem_mb=4000,
        runtime=30,
    log:
        "results/logs/score_flat/{dataset}.log",
    benchmark:
        "results/benchmarks/score_flat/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/score_flat.py"


rule predict_svbop_full:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("search", "_prefix", "utilities", "sets"),
    output:
        "results/{dataset}/predictions/svbop_full/{utility}.npz",
    params:
        utility=lambda wc: UTILITIES[wc.utility],
    resources:
        mem_mb=4000,
        runtime=30,
    log:
        "results/logs/predict_svbop_full/{dataset}_{utility}.log",
    benchmark:
        "results/benchmarks/predict_svbop_full/{dataset}_{utility}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_svbop_full.py"


rule predict_threshold:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("baselines", "_prefix", "utilities", "sets"),
    output:
        sets="results/{dataset}/predictions/threshold/{utility}.npz",
        tuning="results/{dataset}/predictions/threshold/{utility}.tsv",
    params:
        utility=lambda wc: UTILITIES[wc.utility],
        grid=config["baselines"]["threshold_grid"],
    log:
        "results/logs/predict_threshold/{dataset}_{utility}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_threshold.py"


rule predict_top_s:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("baselines", "_prefix", "sets"),
    output:
        "results/{dataset}/predictions/top_s/{s}.npz",
    params:
        s=lambda wc: int(wc.s),
    log:
        "results/logs/predict_top_s/{dataset}_{s}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_top_s.py"


rule predict_icp:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("baselines", "_prefix", "sets"),
    output:
        "results/{dataset}/predictions/icp/{epsilon}.npz",
    params:
        epsilon=lambda wc: ICP_EPSILONS[wc.epsilon],
    log:
        "results/logs/predict_icp/{dataset}_{epsilon}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_icp.py"
