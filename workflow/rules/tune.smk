# Hyper-parameters chosen on the validation rows, as the paper did (its appendix; Table 5 lists its
# values): a dataset's `flat: {C: auto}` (and/or `eps: auto`) trains one flat model per point of the
# grid `tuning: {C_grid, eps_grid}` on the training rows, one job each (so a cluster runs them in
# parallel), and keeps the point with the smallest validation log-loss (svbop.tuning says why).
# train_flat_part and train_flat then read the chosen values from results/{dataset}/tuning/flat.json.


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
