# Models: the flat liblinear model (L2-regularised logistic regression, dual solver -s 7,
# one-vs-rest) that SVBOP-Full and the baselines share.


rule train_flat:
    input:
        features=features_file,
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        code=library_sources("linear"),
    output:
        model="results/{dataset}/models/flat.npz",
        info="results/{dataset}/models/flat.json",
    params:
        flat=lambda wc: dataset_config(wc)["flat"],
    threads: lambda wc: config["datasets"][wc.dataset]["flat"]["threads"]
    resources:
        mem_mb=lambda wc: config["datasets"][wc.dataset]["flat"]["mem_mb"],
        runtime=lambda wc: config["datasets"][wc.dataset]["flat"]["runtime"],
    log:
        "results/logs/train_flat/{dataset}.log",
    benchmark:
        "results/benchmarks/train_flat/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/train_flat.py"
