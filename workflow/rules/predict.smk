# Prediction: one set per test row for every method of the paper's Tables 3 and 4. SVBOP-Full,
# SVBOP-HSG (HNSW index over the flat model) and SVBOP-HF (per tree) go from the features to the
# sets, per utility, each timed on one thread (a JSON beside the sets: the paper's test time per
# sample); the baselines (threshold, top-s, ICP) start from the flat model's class probabilities
# of the held-out rows (score_flat), stored in float32 (svbop.io.SCORES_DTYPE: 1.6 GB for LSHTC1's
# test rows instead of 3.4 GB) and without zlib, computed in blocks of rows. Ties that float32's
# rounding creates go to the lower class index in every baseline; the SVBOP rules never read these
# matrices (they score the model in float64).

# Library files every timed SVBOP rule runs (Algorithm 1, its kernels, the timing, the loaders).
SEARCH_CODE = ("_kernels", "search", "_prefix", "utilities", "sets", "io", "timing", "datasets/splits")


rule score_flat:
    input:
        model="results/{dataset}/models/flat.npz",
        features=features_file,
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        code=library_sources("linear", "io", "datasets/splits"),
    output:
        "results/{dataset}/scores/flat.npz",
    wildcard_constraints:
        dataset=scores_unless_calibrated(),
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/score_flat/{dataset}.log",
    benchmark:
        "results/benchmarks/score_flat/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/score_flat.py"


# A dataset's probabilities and labels saved as a trained model's outputs would be (one .npy per part):
# the quickstart reads the digits' back through format.kind model_outputs, the way your own model's come in.
rule export_model_outputs:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("io"),
    output:
        scores="results/{dataset}/outputs/{part}_probabilities.npy",
        labels="results/{dataset}/outputs/{part}_labels.npy",
    wildcard_constraints:
        part="validation|calibration|test",
    log:
        "results/logs/export_model_outputs/{dataset}_{part}.log",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/export_model_outputs.py"


# calibrate: temperature on a dataset of our own model: its probabilities before calibration.
use rule score_flat as score_flat_uncalibrated with:
    output:
        "results/{dataset}/scores/uncalibrated.npz",
    wildcard_constraints:
        dataset=datasets_regex([d for d in CALIBRATED if d not in MODEL_OUTPUTS]),
    log:
        "results/logs/score_flat/{dataset}_uncalibrated.log",
    benchmark:
        "results/benchmarks/score_flat/{dataset}_uncalibrated.tsv"


# The probabilities every set is made from, calibrated (calibrate: temperature, fitted on the validation
# rows) or as given (calibrate: none, a model's outputs), with the record the report reads: temperature,
# ECE and NLL before and after, the reliability diagram's points, and what calibration changed in
# SVBOP-Full's sets (utility, mean size) on the same test rows.
rule calibrate_scores:
    input:
        unpack(calibration_inputs),
        code=library_sources("calibration", "io", "search", "metrics", "datasets/outputs", "datasets/splits"),
    output:
        scores="results/{dataset}/scores/flat.npz",
        record="results/{dataset}/calibration.json",
    params:
        method=lambda wc: svbop.config.calibrate_method(dataset_config(wc)),
        outputs=lambda wc: dataset_config(wc)["format"]["outputs"] if is_model_outputs(wc.dataset) else "probabilities",
        model_outputs=lambda wc: is_model_outputs(wc.dataset),
        utilities=list(UTILITIES.values()),
    wildcard_constraints:
        dataset=datasets_regex(sorted(set(CALIBRATED) | set(MODEL_OUTPUTS))),
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/calibrate_scores/{dataset}.log",
    benchmark:
        "results/benchmarks/calibrate_scores/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/calibrate_scores.py"


rule predict_svbop_full:
    input:
        model="results/{dataset}/models/flat.npz",
        features=features_file,
        split="data/{dataset}/split.npz",
        calibration=temperature_input,
        code=library_sources("full", *SEARCH_CODE, "linear", "trees"),
    output:
        sets="results/{dataset}/predictions/svbop_full/{utility}.npz",
        timing="results/{dataset}/predictions/svbop_full/{utility}.json",
    params:
        utility=lambda wc: UTILITIES[wc.utility],
        method="svbop_full",
        repeats=config["timing"]["repeats"],
    wildcard_constraints:
        dataset=datasets_regex([d for d in config["datasets"] if d not in MODEL_OUTPUTS]),
    threads: 1
    resources:
        mem_mb=lambda wc: dataset_config(wc)["flat"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["flat"]["runtime"],
    log:
        "results/logs/predict_svbop_full/{dataset}_{utility}.log",
    benchmark:
        "results/benchmarks/predict_svbop_full/{dataset}_{utility}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_svbop_full.py"


# SVBOP-Full as the paper runs it (its cost model, and napkinXC's): per test row all K
# probabilities (softmax over all K) and a full sort, then Algorithm 1. Same sets as
# predict_svbop_full; timed the same way, so Table 4 shows speed-ups over both.
use rule predict_svbop_full as predict_svbop_full_naive with:
    output:
        sets="results/{dataset}/predictions/svbop_full_naive/{utility}.npz",
        timing="results/{dataset}/predictions/svbop_full_naive/{utility}.json",
    params:
        utility=lambda wc: UTILITIES[wc.utility],
        method="svbop_full_naive",
        repeats=config["timing"]["repeats"],
    log:
        "results/logs/predict_svbop_full_naive/{dataset}_{utility}.log",
    benchmark:
        "results/benchmarks/predict_svbop_full_naive/{dataset}_{utility}.tsv"


# SVBOP-Full on a model's outputs: the Bayes-optimal set of every test row from its (calibrated)
# probabilities, svbop.predict_sets, timed the same way (the time per sample excludes the model's
# own forward pass, which ran elsewhere: Table 4 says so).
rule predict_svbop_full_probabilities:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources(*SEARCH_CODE),
    output:
        sets="results/{dataset}/predictions/svbop_full/{utility}.npz",
        timing="results/{dataset}/predictions/svbop_full/{utility}.json",
    params:
        utility=lambda wc: UTILITIES[wc.utility],
        repeats=config["timing"]["repeats"],
    wildcard_constraints:
        dataset=datasets_regex(MODEL_OUTPUTS),
    threads: 1
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/predict_svbop_full_probabilities/{dataset}_{utility}.log",
    benchmark:
        "results/benchmarks/predict_svbop_full_probabilities/{dataset}_{utility}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_svbop_full_probabilities.py"


rule predict_svbop_hsg:
    input:
        model="results/{dataset}/models/flat.npz",
        index="results/{dataset}/indexes/hnsw.bin",
        index_data="results/{dataset}/indexes/hnsw.bin.dat",
        index_sidecar="results/{dataset}/indexes/hnsw.bin.json",
        features=features_file,
        split="data/{dataset}/split.npz",
        calibration=temperature_input,
        # hsg: {k: auto} / {ef: auto}: the values chosen on the validation rows (rules/tune.smk)
        tuned=tuned_hsg,
        code=library_sources("hsg", *SEARCH_CODE, "index", "linear", "hf", "trees", "tuning"),
    output:
        sets="results/{dataset}/predictions/svbop_hsg/{utility}.npz",
        timing="results/{dataset}/predictions/svbop_hsg/{utility}.json",
    params:
        utility=lambda wc: UTILITIES[wc.utility],
        hsg=lambda wc: {key: dataset_config(wc)["hsg"][key] for key in ("k", "ef")},
        engine=lambda wc: dataset_config(wc)["hsg"]["engine"],
        repeats=config["timing"]["repeats"],
    threads: 1
    resources:
        mem_mb=lambda wc: dataset_config(wc)["hsg"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["hsg"]["runtime"],
    log:
        "results/logs/predict_svbop_hsg/{dataset}_{utility}.log",
    benchmark:
        "results/benchmarks/predict_svbop_hsg/{dataset}_{utility}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_svbop_hsg.py"


rule predict_svbop_hf:
    input:
        model="results/{dataset}/models/hf_{tree}.npz",
        features=features_file,
        split="data/{dataset}/split.npz",
        code=library_sources("hf", *SEARCH_CODE, "trees", "linear"),
    output:
        sets="results/{dataset}/predictions/svbop_hf_{tree}/{utility}.npz",
        timing="results/{dataset}/predictions/svbop_hf_{tree}/{utility}.json",
    params:
        utility=lambda wc: UTILITIES[wc.utility],
        repeats=config["timing"]["repeats"],
    threads: 1
    resources:
        mem_mb=lambda wc: dataset_config(wc)["hf"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["hf"]["runtime"],
    log:
        "results/logs/predict_svbop_hf/{dataset}_{tree}_{utility}.log",
    benchmark:
        "results/benchmarks/predict_svbop_hf/{dataset}_{tree}_{utility}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_svbop_hf.py"


# Guaranteed sets from each tree (hf.conformal, hf.risk_control): conformal sets and risk control calibrated
# on the calibration rows through the tree's own probabilities, no rows x classes matrix (svbop.tree_sets).
rule predict_tree_sets:
    input:
        model="results/{dataset}/models/hf_{tree}.npz",
        features=features_file,
        dataset="data/{dataset}/dataset.npz",
        split="data/{dataset}/split.npz",
        code=library_sources("tree_sets", "hf", "trees", "conformal", "_kernels", "sets"),
    output:
        sets="results/{dataset}/predictions/tree_{name}_{tree}/{epsilon}.npz",
        record="results/{dataset}/predictions/tree_{name}_{tree}/{epsilon}.json",
    params:
        level=lambda wc: METHOD_EPSILONS[wc.epsilon],
        method=lambda wc: f"tree_{wc.name}",
    wildcard_constraints:
        name="lac|aps|raps|saps|topk|risk_miscoverage|risk_hierarchical",
        tree="predefined|kmeans",
    threads: 1
    resources:
        mem_mb=lambda wc: dataset_config(wc)["hf"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["hf"]["runtime"],
    log:
        "results/logs/predict_tree_sets/{dataset}_{name}_{tree}_{epsilon}.log",
    benchmark:
        "results/benchmarks/predict_tree_sets/{dataset}_{name}_{tree}_{epsilon}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_tree_sets.py"


rule predict_threshold:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("baselines", "_prefix", "utilities", "sets", "_kernels"),
    output:
        sets="results/{dataset}/predictions/threshold/{utility}.npz",
        tuning="results/{dataset}/predictions/threshold/{utility}.tsv",
    params:
        utility=lambda wc: UTILITIES[wc.utility],
        grid=config["baselines"]["threshold_grid"],
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/predict_threshold/{dataset}_{utility}.log",
    benchmark:
        "results/benchmarks/predict_threshold/{dataset}_{utility}.tsv",
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
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/predict_top_s/{dataset}_{s}.log",
    benchmark:
        "results/benchmarks/predict_top_s/{dataset}_{s}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_top_s.py"


rule predict_icp:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("baselines", "conformal", "_prefix", "sets"),
    output:
        "results/{dataset}/predictions/icp/{epsilon}.npz",
    params:
        epsilon=lambda wc: ICP_EPSILONS[wc.epsilon],
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/predict_icp/{dataset}_{epsilon}.log",
    benchmark:
        "results/benchmarks/predict_icp/{dataset}_{epsilon}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_icp.py"


# --- beyond the paper (config `methods:`; none of these run with config.yaml's defaults) --------
# Further kinds of sets from the same class probabilities as the baselines, calibrated like ICP
# on the split's calibration rows; the report compares them with the paper's methods in its
# section "Beyond the paper", apart from Tables 3 and 4. A JSON beside each calibrated method's
# sets records what was calibrated (the score's threshold, or the family's parameter).


rule predict_conformal:
    input:
        scores="results/{dataset}/scores/flat.npz",
        # the class hierarchy of the conformal hierarchy-restricted sets
        dataset=lambda wc: f"data/{wc.dataset}/dataset.npz" if wc.score.startswith("hierarchical_") else [],
        code=library_sources("baselines", "conformal", "_prefix", "sets",
                             "evaluation"),
    output:
        sets="results/{dataset}/predictions/conformal_{score}/{epsilon}.npz",
        calibration="results/{dataset}/predictions/conformal_{score}/{epsilon}.json",
    params:
        epsilon=lambda wc: METHOD_EPSILONS[wc.epsilon],
        score=lambda wc: conformal_method(wc.score, METHODS, config["seed"])["score"],
        class_conditional=lambda wc: conformal_method(wc.score, METHODS, config["seed"])["class_conditional"],
        options=lambda wc: conformal_method(wc.score, METHODS, config["seed"])["options"],
        empty=METHODS["empty"],
    wildcard_constraints:
        score="(lac|aps|raps|saps|topk|margin|aps_deterministic|raps_deterministic|saps_deterministic)"
              "(_cc|_clustered|_rc3p)?|aps_top1|raps_top1|hierarchical_[0-9]+",
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/predict_conformal/{dataset}_{score}_{epsilon}.log",
    benchmark:
        "results/benchmarks/predict_conformal/{dataset}_{score}_{epsilon}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_conformal.py"


# Bayes-optimal sets with a coverage guarantee: the family's parameter calibrated at epsilon.
use rule predict_conformal as predict_coverage with:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("baselines", "conformal", "_prefix", "sets", "search", "utilities",
                             "_kernels", "evaluation"),
    output:
        sets="results/{dataset}/predictions/coverage_{family}/{epsilon}.npz",
        calibration="results/{dataset}/predictions/coverage_{family}/{epsilon}.json",
    params:
        epsilon=lambda wc: METHOD_EPSILONS[wc.epsilon],
        score=lambda wc: wc.family,
        class_conditional=False,
        options=lambda wc: {"gamma": METHODS["credal"]["gamma"]} if wc.family == "credal" else {},
        empty=METHODS["empty"],
    wildcard_constraints:
        family="fbeta|credal",
    log:
        "results/logs/predict_coverage/{dataset}_{family}_{epsilon}.log",
    benchmark:
        "results/benchmarks/predict_coverage/{dataset}_{family}_{epsilon}.tsv",


# Mondrian conformal sets: one threshold per group of rows known at test time (the top-1 class, the
# top-level node above it, or the dataset's format.group_column, carried in the scores file), calibrated on
# the calibration rows of each group.
use rule predict_conformal as predict_mondrian with:
    input:
        scores="results/{dataset}/scores/flat.npz",
        dataset=lambda wc: f"data/{wc.dataset}/dataset.npz" if wc.by == "predicted_top_node" else [],
        code=library_sources("baselines", "conformal", "_prefix", "sets", "metrics", "evaluation"),
    output:
        sets="results/{dataset}/predictions/mondrian_{mscore}_{by}/{epsilon}.npz",
        calibration="results/{dataset}/predictions/mondrian_{mscore}_{by}/{epsilon}.json",
    params:
        epsilon=lambda wc: METHOD_EPSILONS[wc.epsilon],
        score=lambda wc: wc.mscore,
        class_conditional=False,
        options=lambda wc: conformal_method(wc.mscore, METHODS, config["seed"])["options"],
        empty=METHODS["empty"],
        by=lambda wc: wc.by,
    wildcard_constraints:
        mscore="lac|aps|raps|saps|topk|margin",
        by="predicted_class|predicted_top_node|group_column",
    log:
        "results/logs/predict_mondrian/{dataset}_{mscore}_{by}_{epsilon}.log",
    benchmark:
        "results/benchmarks/predict_mondrian/{dataset}_{mscore}_{by}_{epsilon}.tsv",


# Conformal risk control: E[loss] <= alpha (= each methods epsilon) for a loss of methods.risk_control.
rule predict_risk:
    input:
        scores="results/{dataset}/scores/flat.npz",
        dataset=lambda wc: f"data/{wc.dataset}/dataset.npz" if risk_method(wc.risk)["loss"] == "hierarchical"
        else [],
        code=library_sources("conformal", "_prefix", "sets", "evaluation"),
    output:
        sets="results/{dataset}/predictions/{risk}/{epsilon}.npz",
        calibration="results/{dataset}/predictions/{risk}/{epsilon}.json",
    params:
        alpha=lambda wc: METHOD_EPSILONS[wc.epsilon],
        loss=lambda wc: risk_method(wc.risk)["loss"],
        score=lambda wc: risk_method(wc.risk)["score"],
        cost=METHODS["risk_control"]["cost"],
        options=lambda wc: conformal_method(risk_method(wc.risk)["score"], METHODS, config["seed"])["options"],
    wildcard_constraints:
        risk="risk_(miscoverage|class_cost|hierarchical)_(lac|aps|raps|saps|topk|margin)",
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/predict_risk/{dataset}_{risk}_{epsilon}.log",
    benchmark:
        "results/benchmarks/predict_risk/{dataset}_{risk}_{epsilon}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_risk.py"


# Weighted conformal sets under covariate shift: calibration and test rows weighted by their likelihood ratios.
rule predict_weighted:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("conformal", "_prefix", "sets", "evaluation"),
    output:
        sets="results/{dataset}/predictions/weighted_{wname}/{epsilon}.npz",
        calibration="results/{dataset}/predictions/weighted_{wname}/{epsilon}.json",
    params:
        epsilon=lambda wc: METHOD_EPSILONS[wc.epsilon],
        method=lambda wc: conformal_method(wc.wname, METHODS, config["seed"]),
        empty=METHODS["empty"],
    wildcard_constraints:
        wname="((lac|aps|raps|saps|topk|margin)_cc|lac|(aps|raps|saps)(_deterministic)?|topk|margin)",
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/predict_weighted/{dataset}_{wname}_{epsilon}.log",
    benchmark:
        "results/benchmarks/predict_weighted/{dataset}_{wname}_{epsilon}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_weighted.py"


# Conformal sets under label shift: class weights q(y)/p(y) estimated from the test rows' outputs (BBSE or EM),
# then one weighted threshold per candidate class (Podkopaev and Ramdas 2021).
rule predict_label_shift:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("conformal", "_prefix", "sets", "evaluation"),
    output:
        sets="results/{dataset}/predictions/label_shift_{lname}/{epsilon}.npz",
        calibration="results/{dataset}/predictions/label_shift_{lname}/{epsilon}.json",
    params:
        epsilon=lambda wc: METHOD_EPSILONS[wc.epsilon],
        method=lambda wc: conformal_method(wc.lname, METHODS, config["seed"]),
        estimator=METHODS["label_shift"]["estimator"],
        empty=METHODS["empty"],
    wildcard_constraints:
        lname="(lac|(aps|raps|saps)(_deterministic)?|topk|margin)",
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/predict_label_shift/{dataset}_{lname}_{epsilon}.log",
    benchmark:
        "results/benchmarks/predict_label_shift/{dataset}_{lname}_{epsilon}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_label_shift.py"


# Conformal sets covering within every one of the user's overlapping groups (group indicator columns).
rule predict_conditional:
    input:
        scores="results/{dataset}/scores/flat.npz",
        code=library_sources("conformal", "_prefix", "sets", "evaluation"),
    output:
        sets="results/{dataset}/predictions/conditional_{cscore}/{epsilon}.npz",
        calibration="results/{dataset}/predictions/conditional_{cscore}/{epsilon}.json",
    params:
        epsilon=lambda wc: METHOD_EPSILONS[wc.epsilon],
        score=lambda wc: wc.cscore,
        options=lambda wc: conformal_method(wc.cscore, METHODS, config["seed"])["options"],
        empty=METHODS["empty"],
    wildcard_constraints:
        cscore="lac|aps|raps|saps|topk|margin",
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/predict_conditional/{dataset}_{cscore}_{epsilon}.log",
    benchmark:
        "results/benchmarks/predict_conditional/{dataset}_{cscore}_{epsilon}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_conditional.py"


# Sets restricted to unions of at most max_nodes nodes of the dataset's own hierarchy.
rule predict_hierarchical:
    input:
        scores="results/{dataset}/scores/flat.npz",
        dataset="data/{dataset}/dataset.npz",
        code=library_sources("hierarchical", "_kernels", "_prefix", "search", "datasets/base", "utilities", "sets"),
    output:
        "results/{dataset}/predictions/hierarchical_{max_nodes}/{hutility}.npz",
    params:
        utility=lambda wc: HIERARCHICAL_UTILITIES[wc.hutility],
        max_nodes=lambda wc: int(wc.max_nodes),
    wildcard_constraints:
        max_nodes="[0-9]+",
        hutility="|".join(re.escape(label) for label in HIERARCHICAL_UTILITIES) or "(?!)",
    resources:
        mem_mb=lambda wc: dataset_config(wc)["scores"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["scores"]["runtime"],
    log:
        "results/logs/predict_hierarchical/{dataset}_{max_nodes}_{hutility}.log",
    benchmark:
        "results/benchmarks/predict_hierarchical/{dataset}_{max_nodes}_{hutility}.tsv",
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/predict_hierarchical.py"
