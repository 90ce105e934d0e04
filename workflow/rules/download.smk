# Acquisition: raw data -> one parsed dataset file per dataset, and its seeded split.
# (Downloads with checksums arrive here with the datasets of the paper; the quickstart's
# sources need no network.)


rule prepare_dataset:
    input:
        library_sources("io", "datasets/__init__", "datasets/base", "datasets/builtin", "datasets/synthetic"),
    output:
        "data/{dataset}/dataset.npz",
    params:
        source=lambda wc: dataset_config(wc)["source"],
        seed=config["seed"],
    log:
        "results/logs/prepare_dataset/{dataset}.log",
    benchmark:
        "results/benchmarks/prepare_dataset/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/prepare_dataset.py"


rule split_dataset:
    input:
        dataset="data/{dataset}/dataset.npz",
        code=library_sources("datasets/splits"),
    output:
        "data/{dataset}/split.npz",
    params:
        sizes=lambda wc: {k: v for k, v in dataset_config(wc)["split"].items() if k != "seed"},
        seed=lambda wc: split_seed(wc.dataset),
    log:
        "results/logs/split_dataset/{dataset}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/split_dataset.py"
