# Hyper-parameters chosen on the validation rows, as the paper did (its appendix; Table 5 lists its
# values): a dataset's `flat: {C: auto}` (and/or `eps: auto`) trains one flat model per point of the
# grid `tuning: {C_grid, eps_grid}` on the training rows, one job each (so a cluster runs them in
# parallel), and keeps the point with the smallest validation log-loss (svbop.tuning says why).
# train_flat_part and train_flat then read the chosen values from results/{dataset}/tuning/flat.json.


def tuning_points(wildcards):
    """One result file per grid point of a dataset whose flat model has an `auto` value."""
    grid = svbop.tuning.flat_grid(dataset_config(wildcards)["flat"], config["tuning"])
    return [
        f"results/{wildcards.dataset}/tuning/flat/C_{svbop.tuning.value_label(p['C'])}"
        f"_eps_{svbop.tuning.value_label(p['eps'])}.json"
        for p in grid
    ]


def tuned_flat(wildcards):
    """The tuning record the flat model's `auto` values come from (nothing when none is auto)."""
    if svbop.tuning.is_tuned(dataset_config(wildcards)["flat"]):
        return [f"results/{wildcards.dataset}/tuning/flat.json"]
    return []


def tuned_datasets():
    """dataset -> its tuning record, for the datasets of this run with an `auto` value (Table 5)."""
    return {
        d: f"results/{d}/tuning/flat.json"
        for d in DATASETS
        if not is_model_outputs(d) and svbop.tuning.is_tuned(config["datasets"][d]["flat"])
    }


rule tune_flat_point:
    input:
        features=features_file,
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        code=library_sources("linear", "tuning"),
    output:
        point="results/{dataset}/tuning/flat/C_{C}_eps_{eps}.json",
    params:
        flat=lambda wc: dataset_config(wc)["flat"],
        C=lambda wc: float(wc.C),
        eps=lambda wc: float(wc.eps),
    wildcard_constraints:
        C="[0-9][0-9.e+-]*",
        eps="[0-9][0-9.e+-]*",
    threads: lambda wc: dataset_config(wc)["flat"]["threads"]
    resources:
        mem_mb=lambda wc: dataset_config(wc)["flat"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["flat"]["runtime"],
    log:
        "results/logs/tune_flat_point/{dataset}_C_{C}_eps_{eps}.log",
    benchmark:
        "results/benchmarks/tune_flat_point/{dataset}_C_{C}_eps_{eps}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/tune_flat_point.py"


rule tune_flat:
    input:
        points=tuning_points,
        code=library_sources("tuning"),
    output:
        choice="results/{dataset}/tuning/flat.json",
        table="results/{dataset}/tuning/flat.tsv",
    params:
        tuned=lambda wc: [k for k in svbop.tuning.TUNED_KEYS if dataset_config(wc)["flat"].get(k) == "auto"],
    log:
        "results/logs/tune_flat/{dataset}.log",
    benchmark:
        "results/benchmarks/tune_flat/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/tune_flat.py"
