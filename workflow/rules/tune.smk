# Hyper-parameters chosen on the validation rows, as the paper did (its appendix; Table 5 lists its
# values), one job per grid point (so a cluster runs them in parallel), each with its log and benchmark:
# - flat: {C: auto} (and/or eps: auto) trains one flat model per point of `tuning: {C_grid, eps_grid}`
#   on the training rows and keeps the smallest validation log-loss (svbop.tuning says why);
#   train_flat_part and train_flat read the choice from results/{dataset}/tuning/flat.json.
# - hf: {C, eps, max_leaves: auto} does the same per tree kind (a predefined and a 2-means tree are
#   different models; a predefined tree has no max_leaves): results/{dataset}/tuning/hf_{tree}.json,
#   read by build_tree, train_tree_part and train_tree.
# - hsg: {k, ef: auto} queries the one index (M, efC fixed: never rebuilt) at each (k, ef) on the
#   validation rows and keeps the cheapest point whose mean utility under the run's first utility is
#   within tuning.hsg_tolerance of SVBOP-Full's: results/{dataset}/tuning/hsg.json, read by predict_svbop_hsg.


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


rule tune_hf_point:
    input:
        features=features_file,
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        code=library_sources("linear", "trees", "tuning"),
    output:
        point="results/{dataset}/tuning/hf_{tree}/{point}.json",
    params:
        hf=lambda wc: dataset_config(wc)["hf"],
        point=lambda wc: svbop.tuning.parse_point_label(wc.point, svbop.tuning.tree_keys(wc.tree), integer=("max_leaves",)),
        seed=lambda wc: split_seed(wc.dataset),
    wildcard_constraints:
        tree="predefined|kmeans",
        point="C_[0-9][0-9.e+-]*_eps_[0-9][0-9.e+-]*(_max_leaves_[0-9]+)?",
    threads: lambda wc: dataset_config(wc)["hf"]["threads"]
    resources:
        mem_mb=lambda wc: dataset_config(wc)["hf"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["hf"]["runtime"],
    log:
        "results/logs/tune_hf_point/{dataset}_{tree}_{point}.log",
    benchmark:
        "results/benchmarks/tune_hf_point/{dataset}_{tree}_{point}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/tune_hf_point.py"


rule tune_hf:
    input:
        points=tuning_points_hf,
        code=library_sources("tuning"),
    output:
        choice="results/{dataset}/tuning/hf_{tree}.json",
        table="results/{dataset}/tuning/hf_{tree}.tsv",
    params:
        tuned=lambda wc: [k for k in svbop.tuning.tree_keys(wc.tree) if dataset_config(wc)["hf"].get(k) == "auto"],
    wildcard_constraints:
        tree="predefined|kmeans",
    log:
        "results/logs/tune_hf/{dataset}_{tree}.log",
    benchmark:
        "results/benchmarks/tune_hf/{dataset}_{tree}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/tune_hf.py"


rule tune_hsg_point:
    input:
        model="results/{dataset}/models/flat.npz",
        index="results/{dataset}/indexes/hnsw.bin",
        index_data="results/{dataset}/indexes/hnsw.bin.dat",
        index_sidecar="results/{dataset}/indexes/hnsw.bin.json",
        features=features_file,
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        calibration=temperature_input,
        code=library_sources("hsg", "_hsg_kernels", "_kernels", "search", "index", "linear", "metrics", "tuning"),
    output:
        point="results/{dataset}/tuning/hsg/{point}.json",
    params:
        point=lambda wc: svbop.tuning.parse_point_label(wc.point, ("k", "ef"), integer=("k", "ef")),
        utility=config["utilities"][0],
        engine=lambda wc: dataset_config(wc)["hsg"]["engine"],
    wildcard_constraints:
        point="k_[0-9]+_ef_(none|[0-9]+)",
    threads: 1
    resources:
        mem_mb=lambda wc: dataset_config(wc)["hsg"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["hsg"]["runtime"],
    log:
        "results/logs/tune_hsg_point/{dataset}_{point}.log",
    benchmark:
        "results/benchmarks/tune_hsg_point/{dataset}_{point}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/tune_hsg_point.py"


rule tune_hsg:
    input:
        points=tuning_points_hsg,
        model="results/{dataset}/models/flat.npz",
        features=features_file,
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        calibration=temperature_input,
        code=library_sources("full", "_kernels", "search", "linear", "metrics", "tuning"),
    output:
        choice="results/{dataset}/tuning/hsg.json",
        table="results/{dataset}/tuning/hsg.tsv",
    params:
        utility=config["utilities"][0],
        tolerance=config["tuning"]["hsg_tolerance"],
        tuned=lambda wc: [k for k in svbop.tuning.HSG_TUNED_KEYS if dataset_config(wc)["hsg"].get(k) == "auto"],
    resources:
        mem_mb=lambda wc: dataset_config(wc)["hsg"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["hsg"]["runtime"],
    log:
        "results/logs/tune_hsg/{dataset}.log",
    benchmark:
        "results/benchmarks/tune_hsg/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/tune_hsg.py"
