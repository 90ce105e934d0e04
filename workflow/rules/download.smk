# Acquisition: downloads (checksummed, resumable) -> raw folder (archives unpacked) -> one parsed
# dataset file per dataset -> its seeded split. Pre-trained weights (VGG16's) are fetched the same
# way into data/pretrained/. Datasets with a `source` (builtin, synthetic) need
# no download; the others list `files`, what to `unpack`, and the `format` to parse.


rule fetch:
    input:
        produced_file,
    output:
        "data/{dataset}/downloads/{file}",
    params:
        spec=lambda wc: file_spec(wc.dataset, wc.file),
        where=lambda wc: f"datasets.{wc.dataset}.files.{wc.file}",
        produced=lambda wc: bool(produced_file(wc)),
    resources:
        downloads=1,
        runtime=lambda wc: fetch_runtime(file_spec(wc.dataset, wc.file)),
    log:
        "results/logs/fetch/{dataset}/{file}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/fetch.py"


rule fetch_weights:
    output:
        "data/pretrained/{weights}.pth",
    params:
        spec=lambda wc: weights_spec(wc.weights),
        where=lambda wc: f"weights.{wc.weights}",
    resources:
        downloads=1,
        runtime=lambda wc: fetch_runtime(weights_spec(wc.weights)),
    log:
        "results/logs/fetch_weights/{weights}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/fetch.py"


rule unpack_dataset:
    input:
        downloads=lambda wc: downloaded_files(wc.dataset),
        code=library_sources("archives", "download"),
    output:
        directory("data/{dataset}/raw"),
    params:
        files=lambda wc: Summarised({name: file_spec(wc.dataset, name) for name in dataset_config(wc)["files"]}),
        unpack=lambda wc: dataset_config(wc)["unpack"],
        downloads=lambda wc: f"data/{wc.dataset}/downloads",
        where=lambda wc: f"datasets.{wc.dataset}",
    resources:
        runtime=120,
    log:
        "results/logs/unpack_dataset/{dataset}.log",
    benchmark:
        "results/benchmarks/unpack_dataset/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/unpack_dataset.py"


rule prepare_dataset:
    input:
        raw=raw_folder,
        code=library_sources(
            "io", "datasets/__init__", "datasets/base", "datasets/builtin", "datasets/synthetic",
            "datasets/read", "datasets/hierarchies", "datasets/_files", "datasets/splits", *reader_modules(),
        ),
    output:
        "data/{dataset}/dataset.npz",
    params:
        source=lambda wc: dataset_config(wc).get("source"),
        format=lambda wc: dataset_config(wc).get("format"),
        hierarchy=lambda wc: dataset_config(wc).get("hierarchy"),
        where=lambda wc: f"datasets.{wc.dataset}",
        seed=config["seed"],
        # split.small_classes: drop removes small classes here, before the split (None otherwise,
        # so other split settings do not rerun the parse)
        drop_small_classes=lambda wc: (
            {k: v for k, v in dataset_config(wc)["split"].items() if k in ("validation", "calibration", "test")}
            if dataset_config(wc)["split"].get("small_classes") == "drop" else None
        ),
    resources:
        mem_mb=lambda wc: dataset_config(wc)["features"]["mem_mb"],
        runtime=60,
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
        code=library_sources("datasets/splits", "datasets/outputs", "datasets/calibration_share"),
    output:
        "data/{dataset}/split.npz",
    params:
        sizes=lambda wc: split_sizes(wc.dataset),
        seed=lambda wc: split_seed(wc.dataset),
        model_outputs=lambda wc: is_model_outputs(wc.dataset),
    log:
        "results/logs/split_dataset/{dataset}.log",
    benchmark:
        "results/benchmarks/split_dataset/{dataset}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/split_dataset.py"
