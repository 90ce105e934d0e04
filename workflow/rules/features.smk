# Features: what the flat model sees. The paper's MNIST CNN (hidden layer) for images, tf-idf for
# term counts. Features are computed for every row; only training rows are used for fitting.


rule features_cnn:
    input:
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        code=library_sources("features/__init__", "features/cnn"),
    output:
        features="results/{dataset}/features/cnn.npz",
        model="results/{dataset}/models/cnn.pt",
        history="results/{dataset}/features/cnn_history.tsv",
    params:
        cnn=lambda wc: dataset_config(wc)["features"],
        seed=config["seed"],
    threads: 2
    resources:
        mem_mb=4000,
        runtime=120,
    log:
        "results/logs/features_cnn/{dataset}.log",
    benchmark:
        "results/benchmarks/features_cnn/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/features_cnn.py"


rule features_tfidf:
    input:
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        code=library_sources("features/__init__", "features/tfidf"),
    output:
        features="results/{dataset}/features/tfidf.npz",
    params:
        sublinear_tf=lambda wc: dataset_config(wc)["features"]["sublinear_tf"],
    resources:
        mem_mb=4000,
        runtime=30,
    log:
        "results/logs/features_tfidf/{dataset}.log",
    benchmark:
        "results/benchmarks/features_tfidf/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/features_tfidf.py"
