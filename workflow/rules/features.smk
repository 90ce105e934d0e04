# Features: what the flat model sees. The paper's MNIST CNN (hidden layer) for small images,
# VGG16's convolutional features for photographs, tf-idf for term counts, texts (words) and
# sequences (k-mers, plus Pfam domains for proteins), random binning features of the Laplacian
# kernel for dense vectors (ALOI), or the source's own features (raw). Features are computed for every row;
# only training rows are used for fitting.


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
        mem_mb=lambda wc: dataset_config(wc)["features"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["features"]["runtime"],
        gpu=lambda wc: dataset_config(wc)["features"]["gpu"],
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
        raw=lambda wc: raw_folder(wc) if dataset_config(wc)["features"].get("domains") else [],
        code=library_sources("features/__init__", "features/tfidf", "features/domains", "datasets/text"),
    output:
        features="results/{dataset}/features/tfidf.npz",
    params:
        features=lambda wc: dataset_config(wc)["features"],
    resources:
        mem_mb=lambda wc: dataset_config(wc)["features"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["features"]["runtime"],
    log:
        "results/logs/features_tfidf/{dataset}.log",
    benchmark:
        "results/benchmarks/features_tfidf/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/features_tfidf.py"


rule features_vgg16:
    input:
        dataset="data/{dataset}/dataset.npz",
        raw="data/{dataset}/raw",
        weights=vgg16_weights,
        code=library_sources("features/__init__", "features/cnn", "features/vgg16"),
    output:
        features="results/{dataset}/features/vgg16.npz",
    params:
        features=lambda wc: dataset_config(wc)["features"],
    threads: 2
    resources:
        mem_mb=lambda wc: dataset_config(wc)["features"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["features"]["runtime"],
        gpu=lambda wc: dataset_config(wc)["features"]["gpu"],
    log:
        "results/logs/features_vgg16/{dataset}.log",
    benchmark:
        "results/benchmarks/features_vgg16/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/features_vgg16.py"


rule features_raw:
    input:
        dataset="data/{dataset}/dataset.npz",
        code=library_sources("io", "features/raw"),
    output:
        features="results/{dataset}/features/raw.npz",
    resources:
        mem_mb=lambda wc: dataset_config(wc)["features"]["mem_mb"],
    log:
        "results/logs/features_raw/{dataset}.log",
    benchmark:
        "results/benchmarks/features_raw/{dataset}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/features_raw.py"


rule features_binning:
    input:
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        code=library_sources("features/__init__", "features/binning"),
    output:
        features="results/{dataset}/features/binning.npz",
    params:
        features=lambda wc: dataset_config(wc)["features"],
        seed=lambda wc: split_seed(wc.dataset),
    resources:
        mem_mb=lambda wc: dataset_config(wc)["features"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["features"]["runtime"],
    log:
        "results/logs/features_binning/{dataset}.log",
    benchmark:
        "results/benchmarks/features_binning/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/features_binning.py"
