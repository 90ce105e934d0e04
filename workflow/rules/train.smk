# Models: the flat liblinear model (L2-regularised logistic regression, dual solver -s 7,
# one-vs-rest) that SVBOP-Full, SVBOP-HSG and the baselines share, and the probabilistic trees of
# SVBOP-HF (a predefined hierarchy or hierarchical balanced 2-means, one liblinear classifier per
# internal node). Both train in parts, one job each (flat: ranges of classes; tree: groups of
# nodes of similar cost), so they spread over cores here and over nodes with the SLURM profile;
# a merge job joins the parts.


rule train_flat_part:
    input:
        features=features_file,
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        # flat: {C: auto} / {eps: auto}: the values chosen on the validation rows (rules/tune.smk)
        tuned=tuned_flat,
        code=library_sources("linear", "tuning"),
    output:
        model=temp("results/{dataset}/models/flat/part_{part}.npz"),
        info="results/{dataset}/models/flat/part_{part}.json",
    params:
        flat=lambda wc: dataset_config(wc)["flat"],
        part=lambda wc: int(wc.part),
        parts=lambda wc: dataset_config(wc)["flat"]["parts"],
    threads: lambda wc: dataset_config(wc)["flat"]["threads"]
    resources:
        mem_mb=lambda wc: dataset_config(wc)["flat"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["flat"]["runtime"],
    log:
        "results/logs/train_flat_part/{dataset}_{part}.log",
    benchmark:
        "results/benchmarks/train_flat_part/{dataset}_{part}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/train_flat_part.py"


rule train_flat:
    input:
        parts=flat_parts,
        infos=lambda wc: [p.replace(".npz", ".json") for p in flat_parts(wc)],
        tuned=tuned_flat,
        code=library_sources("linear", "tuning"),
    output:
        model="results/{dataset}/models/flat.npz",
        info="results/{dataset}/models/flat.json",
    params:
        flat=lambda wc: dataset_config(wc)["flat"],
    resources:
        mem_mb=lambda wc: dataset_config(wc)["flat"]["mem_mb"],
    log:
        "results/logs/train_flat/{dataset}.log",
    benchmark:
        "results/benchmarks/train_flat/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/train_flat.py"


rule build_tree:
    input:
        features=features_file,
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        # hf: {max_leaves: auto} (and C, eps): the values chosen on the validation rows (rules/tune.smk)
        tuned=tuned_hf,
        code=library_sources("trees", "tuning"),
    output:
        tree="results/{dataset}/models/tree_{tree}.npz",
        info="results/{dataset}/models/tree_{tree}.json",
    params:
        hf=lambda wc: dataset_config(wc)["hf"],
        seed=lambda wc: split_seed(wc.dataset),
    resources:
        mem_mb=lambda wc: dataset_config(wc)["hf"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["hf"]["runtime"],
    log:
        "results/logs/build_tree/{dataset}_{tree}.log",
    benchmark:
        "results/benchmarks/build_tree/{dataset}_{tree}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/build_tree.py"


rule train_tree_part:
    input:
        tree="results/{dataset}/models/tree_{tree}.npz",
        features=features_file,
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        tuned=tuned_hf,
        code=library_sources("linear", "trees", "tuning"),
    output:
        model=temp("results/{dataset}/models/hf_{tree}/part_{part}.npz"),
        info="results/{dataset}/models/hf_{tree}/part_{part}.json",
    params:
        hf=lambda wc: dataset_config(wc)["hf"],
        part=lambda wc: int(wc.part),
        parts=lambda wc: dataset_config(wc)["hf"]["parts"],
    threads: lambda wc: dataset_config(wc)["hf"]["threads"]
    resources:
        mem_mb=lambda wc: dataset_config(wc)["hf"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["hf"]["runtime"],
    log:
        "results/logs/train_tree_part/{dataset}_{tree}_{part}.log",
    benchmark:
        "results/benchmarks/train_tree_part/{dataset}_{tree}_{part}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/train_tree_part.py"


rule train_tree:
    input:
        parts=tree_parts,
        infos=lambda wc: [p.replace(".npz", ".json") for p in tree_parts(wc)],
        tree_info="results/{dataset}/models/tree_{tree}.json",
        tuned=tuned_hf,
        code=library_sources("linear", "trees", "tuning"),
    output:
        model="results/{dataset}/models/hf_{tree}.npz",
        info="results/{dataset}/models/hf_{tree}.json",
    params:
        hf=lambda wc: dataset_config(wc)["hf"],
    resources:
        mem_mb=lambda wc: dataset_config(wc)["hf"]["mem_mb"],
    log:
        "results/logs/train_tree/{dataset}_{tree}.log",
    benchmark:
        "results/benchmarks/train_tree/{dataset}_{tree}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/train_tree.py"
