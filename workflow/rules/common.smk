# Shared helpers: config lookups, the experiment's axes, and input functions used by the rule files.

import os

import svbop
import svbop.config
import svbop.conformal
import svbop.datasets
import svbop.download
import svbop.evaluation
import svbop.report.browser
import svbop.report.illustrations
import svbop.report.status
import svbop.tuning
from snakemake.exceptions import WorkflowError
from svbop.config import Summarised
from svbop.conformal.methods import conformal_method, risk_method
from snakemake.logging import logger

# The library's own files, inputs of the rules that use them (a code change reruns what it affects):
# workflow/svbop in a checkout; the installed package's folder when the workflow runs from a wheel's
# copy (svbop report, svbop/_resources.py).
LIBRARY = os.path.dirname(os.path.abspath(svbop.__file__))
if not os.path.relpath(LIBRARY).startswith(".."):
    LIBRARY = os.path.relpath(LIBRARY)


def library_sources(*modules):
    """Library files a rule depends on, so that a code change reruns what it affects."""
    out = []
    for m in ("__init__",) + modules:  # a package (svbop/conformal/) stands for all its modules
        package = os.path.join(LIBRARY, m)
        out += sorted(os.path.join(package, f) for f in os.listdir(package) if f.endswith(".py")) \
            if os.path.isdir(package) else [f"{LIBRARY}/{m}.py"]
    return out


# --- the experiment's axes ------------------------------------------------------------------

# (run names keys of datasets: checked by svbop.config.check_config in the Snakefile)
# A dataset whose manual or local files are missing is not run (missing_data: skip): the report
# lists it with the file, where to put it and where to get it. missing_data: stop fails instead.
# MISSING: the files a person must fetch, of every configured dataset (run or not), for the report.
MISSING = {_name: svbop.report.status.missing_inputs(_name, _cfg) for _name, _cfg in config["datasets"].items()}
NOT_RUN = {}
for _name in config["run"]:
    _missing = MISSING[_name]
    if _missing:
        NOT_RUN[_name] = _missing
        _where = svbop.report.status.describe_missing(_missing)
        if config["missing_data"] == "stop":
            raise ValueError(f"config: run: {_name!r}: missing {_where} (or set missing_data: skip)")
        logger.warning(f"Not running dataset {_name!r} (missing_data: skip): missing {_where}")
DATASETS = [name for name in config["run"] if name not in NOT_RUN]

# A trained model's outputs (format.kind: model_outputs): no features, no model of ours; every set is
# made from its probabilities. CALIBRATED: datasets whose probabilities are calibrated first (calibrate:
# temperature; the default for model outputs, none for the paper's datasets: svbop.config.calibrate_method).
MODEL_OUTPUTS = [d for d, c in config["datasets"].items() if svbop.config.is_model_outputs(c)]
CALIBRATED = [d for d, c in config["datasets"].items() if svbop.config.calibrate_method(c) != "none"]


def datasets_regex(names):
    """A wildcard constraint matching exactly these dataset keys (nothing when there are none)."""
    return "|".join(re.escape(n) for n in names) or "(?!)"


def is_model_outputs(dataset):
    return dataset in MODEL_OUTPUTS


def scores_unless_calibrated():
    """Datasets whose probabilities the flat model gives as they are (score_flat writes scores/flat.npz)."""
    return datasets_regex([d for d in config["datasets"] if d not in MODEL_OUTPUTS and d not in CALIBRATED])


# Utility labels (the paper's names, e.g. fbeta_1, credal_2.2_1.2) name files; specs drive svbop.
# Every spec was parsed by svbop.config.check_config in the Snakefile (a bad one named with its key).
UTILITIES = {svbop.utility(_spec).label: _spec for _spec in config["utilities"]}


def epsilon_label(epsilon):
    """ICP significance level as in the paper's tables: 0.1 -> "0.10", 0.01 -> "0.01"."""
    text = f"{epsilon:.2f}"
    return text if float(text) == epsilon else repr(float(epsilon))


ICP_EPSILONS = {epsilon_label(e): e for e in config["baselines"]["icp_epsilon"]}
TOP_S = [str(s) for s in config["baselines"]["top_s"]]

# Beyond the paper (config `methods:`, all off in config.yaml): further kinds of sets from the flat
# model's probabilities, and the report's section comparing them with the paper's methods.
METHODS = config["methods"]
# conformal methods' significance levels: methods.epsilon, or the paper's ICP levels
METHOD_EPSILONS = {epsilon_label(e): e for e in (METHODS["epsilon"] or config["baselines"]["icp_epsilon"])}
# conformal scores by file name: aps, raps, ..., aps_deterministic (one threshold), lac_cc, aps_cc, ... (one per
# class), lac_clustered, ... (one per cluster of classes); svbop.conformal.pipeline_predictor reads them
MAX_NODES = [str(n) for n in METHODS["hierarchical"]["max_nodes"]]
# conformal hierarchy-restricted sets: one method per max_nodes of methods.hierarchical (1 when none is set)
CONFORMAL_SCORES = [
    *(s for s in METHODS["conformal"] if s != "hierarchical"),
    *(f"hierarchical_{n}" for n in (MAX_NODES or ["1"]) if "hierarchical" in METHODS["conformal"]),
    *(f"{score}_cc" for score in METHODS["class_conditional"]),
    *(f"{score}_clustered" for score in METHODS["clustered"]),
    *(f"{score}_rc3p" for score in METHODS.get("rc3p", [])),
]
COVERAGE_FAMILIES = list(METHODS["coverage"])
# conformal risk control: one method risk_<loss>_<score> per loss and score, alpha = each methods epsilon
RISK_METHODS = [f"risk_{loss}_{score}" for loss in METHODS["risk_control"]["losses"]
                for score in METHODS["risk_control"]["scores"]]
# weighted conformal sets under covariate shift: one method weighted_<name> per conformal method of
# methods.weighted (the weights: the model_outputs parts' weights files)
WEIGHTED_METHODS = [f"weighted_{name}" for name in METHODS["weighted"]["scores"]]
# conformal sets under label shift: one method label_shift_<name> per score of methods.label_shift (the class
# weights: estimated from the test rows' outputs by methods.label_shift.estimator)
LABEL_SHIFT_METHODS = [f"label_shift_{name}" for name in METHODS["label_shift"]["scores"]]
# coverage in every one of overlapping groups: one method conditional_<score> per score of methods.conditional
# (the groups: the model_outputs parts' group_columns files)
CONDITIONAL_METHODS = [f"conditional_{score}" for score in METHODS["conditional"]["scores"]]
# Mondrian (group-conditional) conformal sets: one method per score and grouping known at test time
MONDRIAN_BY = list(METHODS["mondrian"]["by"])
MONDRIAN_SCORES = list(METHODS["mondrian"]["scores"]) if MONDRIAN_BY else []
HIERARCHICAL_UTILITIES = {  # label -> spec, as UTILITIES
    svbop.utility(_spec).label: _spec for _spec in METHODS["hierarchical"]["utilities"] or config["utilities"]
}


wildcard_constraints:
    dataset="[A-Za-z0-9][A-Za-z0-9._-]*",
    file="[^/]+",
    weights="[A-Za-z0-9][A-Za-z0-9._-]*",
    utility="|".join(re.escape(label) for label in UTILITIES),
    s="[0-9]+",
    part="[0-9]+",
    tree="predefined|kmeans",
    epsilon="[0-9.e-]+",


def dataset_config(wildcards):
    return config["datasets"][wildcards.dataset]


def split_sizes(name):
    """The split's sizes of a dataset, as split_dataset takes them. With split.calibration set to auto (a model's
    outputs), also rows_per_class, the calibration rows one conformal threshold per class needs at the run's
    smallest epsilon (svbop.datasets.calibration_share)."""
    sizes = {k: v for k, v in config["datasets"][name]["split"].items() if k != "seed"}
    if sizes.get("calibration") == "auto":
        sizes["rows_per_class"] = svbop.conformal.min_calibration_rows(
            min([*METHOD_EPSILONS.values(), *ICP_EPSILONS.values()]))
    return sizes


def split_seed(name):
    return config["datasets"][name]["split"].get("seed", config["seed"])


# --- acquisition ----------------------------------------------------------------------------


def file_spec(dataset, name):
    """Config of one raw file, with a relative local `path` made absolute (it is linked)."""
    spec = dict(config["datasets"][dataset]["files"][name])
    if "path" in spec:
        spec["path"] = os.path.abspath(os.path.expanduser(spec["path"]))
    return spec


def produced_file(wildcards):
    """A file's `path:` when another rule of this run writes it (a relative path under results/, e.g. the
    digits' probabilities read back as a model's outputs): an input of rule fetch, so it is made first."""
    path = config["datasets"][wildcards.dataset]["files"][wildcards.file].get("path")
    return [path] if path is not None and svbop.report.status.pipeline_product(path) else []


def fetch_runtime(spec):
    """Minutes a fetch job may run (SLURM): every URL's deadline, plus room for verifying."""
    urls = spec.get("url") or []
    urls = [urls] if isinstance(urls, str) else urls
    deadline = spec.get("deadline_min", svbop.download.DEFAULT_DEADLINE / 60)
    return int(max(1, len(urls)) * deadline + 30)


def weights_spec(name):
    """Config of one weights file; a local `path` replaces the url (an offline machine)."""
    if name not in config["weights"]:
        raise ValueError(f"config: weights: no entry {name!r} (known: {', '.join(config['weights']) or 'none'})")
    spec = dict(config["weights"][name])
    if "path" in spec:
        spec.pop("url", None)
        spec["path"] = os.path.abspath(os.path.expanduser(spec["path"]))
    return spec


def vgg16_weights(wildcards):
    """The weights file of a vgg16 features job (none for random weights)."""
    name = dataset_config(wildcards)["features"]["weights"]
    if name.lower() == "none":
        return []
    return f"data/pretrained/{svbop.config.vgg16_weights_key(name)}.pth"


def downloaded_files(dataset):
    return [f"data/{dataset}/downloads/{name}" for name in config["datasets"][dataset]["files"]]


def raw_folder(wildcards):
    """The raw folder a parsed dataset is read from (nothing for builtin/synthetic sources)."""
    return [] if "format" not in dataset_config(wildcards) else f"data/{wildcards.dataset}/raw"


def reader_modules():
    return sorted({f"datasets/{module}" for module, _ in svbop.datasets.FORMATS.values()})


# --- file names -----------------------------------------------------------------------------


def features_file(wildcards):
    kind = config["datasets"][wildcards.dataset]["features"]["kind"]
    return f"results/{wildcards.dataset}/features/{kind}.npz"


# flat: {C: auto} / {eps: auto}, hf: {C, eps, max_leaves: auto}, hsg: {k, ef: auto}: the values chosen on the
# validation rows (rules/tune.smk, svbop.tuning)


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


def tuning_points_hf(wildcards):
    """One result file per grid point of a tree model with an `auto` value (hf: {C, eps, max_leaves})."""
    keys = svbop.tuning.tree_keys(wildcards.tree)
    grid = svbop.tuning.hf_grid(dataset_config(wildcards)["hf"], config["tuning"], wildcards.tree)
    return [
        f"results/{wildcards.dataset}/tuning/hf_{wildcards.tree}/{svbop.tuning.point_label(p, keys)}.json"
        for p in grid
    ]


def tuned_hf(wildcards):
    """The tuning record a tree model's `auto` values come from (nothing when none is auto for it)."""
    if svbop.tuning.is_hf_tuned(dataset_config(wildcards)["hf"], wildcards.tree):
        return [f"results/{wildcards.dataset}/tuning/hf_{wildcards.tree}.json"]
    return []


def tuning_points_hsg(wildcards):
    """One result file per (k, ef) of a dataset whose hsg has an `auto` value."""
    grid = svbop.tuning.hsg_grid(dataset_config(wildcards)["hsg"], config["tuning"])
    return [
        f"results/{wildcards.dataset}/tuning/hsg/{svbop.tuning.point_label(p, ('k', 'ef'))}.json" for p in grid
    ]


def tuned_hsg(wildcards):
    """The tuning record SVBOP-HSG's `auto` k/ef come from (nothing when neither is auto)."""
    if svbop.tuning.is_hsg_tuned(dataset_config(wildcards)["hsg"]):
        return [f"results/{wildcards.dataset}/tuning/hsg.json"]
    return []


def tuned_datasets():
    """dataset -> {model: its tuning record} (model: flat, hsg, hf_<tree>), for the datasets of this run
    with an `auto` value of an enabled model (Table 5)."""
    out = {}
    for d in DATASETS:
        if is_model_outputs(d):
            continue
        cfg, records = config["datasets"][d], {}
        if svbop.tuning.is_tuned(cfg["flat"]):
            records["flat"] = f"results/{d}/tuning/flat.json"
        if cfg["hsg"]["enabled"] and svbop.tuning.is_hsg_tuned(cfg["hsg"]):
            records["hsg"] = f"results/{d}/tuning/hsg.json"
        if cfg["hf"]["enabled"]:
            for tree in cfg["hf"]["trees"]:
                if svbop.tuning.is_hf_tuned(cfg["hf"], tree):
                    records[f"hf_{tree}"] = f"results/{d}/tuning/hf_{tree}.json"
        if records:
            out[d] = records
    return out


def tuning_records():
    """Every tuning record of tuned_datasets(), as a rule's input."""
    return [path for records in tuned_datasets().values() for path in records.values()]


def flat_parts(wildcards):
    """The flat model's parts (class ranges), one training job each."""
    n = config["datasets"][wildcards.dataset]["flat"]["parts"]
    return [f"results/{wildcards.dataset}/models/flat/part_{i}.npz" for i in range(n)]


def tree_parts(wildcards):
    """A tree model's parts (groups of internal nodes), one training job each."""
    n = config["datasets"][wildcards.dataset]["hf"]["parts"]
    return [f"results/{wildcards.dataset}/models/hf_{wildcards.tree}/part_{i}.npz" for i in range(n)]


def approximate_models(dataset):
    """SVBOP-HSG's index and SVBOP-HF's tree models, where the dataset's config enables them."""
    cfg = config["datasets"][dataset]
    out = []
    if cfg["hsg"]["enabled"]:
        out.append(f"results/{dataset}/indexes/hnsw.bin")
    if cfg["hf"]["enabled"]:
        for tree in cfg["hf"]["trees"]:
            out += [f"results/{dataset}/models/tree_{tree}.npz", f"results/{dataset}/models/hf_{tree}.npz"]
    return out


def svbop_methods(dataset):
    """The SVBOP methods run on one dataset: Full (ours and as in the paper), and HSG and HF (per
    tree) where enabled; a model's outputs: Full from its probabilities only."""
    cfg = config["datasets"][dataset]
    if is_model_outputs(dataset):
        return ["svbop_full"]
    methods = ["svbop_full", "svbop_full_naive"]
    if cfg["hsg"]["enabled"]:
        methods.append("svbop_hsg")
    if cfg["hf"]["enabled"]:
        methods += [f"svbop_hf_{tree}" for tree in ("predefined", "kmeans") if tree in cfg["hf"]["trees"]]
    return methods


def timings(dataset):
    """Timing JSON of every SVBOP prediction job of one dataset: {(method, utility label): path}."""
    return {
        (method, label): f"results/{dataset}/predictions/{method}/{label}.json"
        for method in svbop_methods(dataset)
        for label in UTILITIES
    }


def predictions(dataset):
    """Every method of the paper's Tables 3 and 4 for one dataset: {(method, param): path}."""
    out = {}
    for method in svbop_methods(dataset):
        for label in UTILITIES:
            out[method, label] = f"results/{dataset}/predictions/{method}/{label}.npz"
    for label in UTILITIES:
        out["threshold", label] = f"results/{dataset}/predictions/threshold/{label}.npz"
    for s in TOP_S:
        out["top_s", s] = f"results/{dataset}/predictions/top_s/{s}.npz"
    for eps in ICP_EPSILONS:
        out["icp", eps] = f"results/{dataset}/predictions/icp/{eps}.npz"
    return out


def tree_sets(dataset):
    """The guaranteed sets from each tree of a dataset (hf.conformal, hf.risk_control): {(method, param): path},
    method tree_<score>_<tree> or tree_risk_<loss>_<tree>, param the level's label."""
    cfg = config["datasets"][dataset]
    if is_model_outputs(dataset) or not cfg["hf"]["enabled"]:
        return {}
    out = {}
    for tree in cfg["hf"]["trees"]:
        names = [*(f"tree_{s}" for s in cfg["hf"]["conformal"]), *(f"tree_risk_{l}" for l in cfg["hf"]["risk_control"])]
        for name in names:
            for eps in METHOD_EPSILONS:
                out[f"{name}_{tree}", eps] = f"results/{dataset}/predictions/{name}_{tree}/{eps}.npz"
    return out


def tree_sets_results(dataset):
    """The tree's guaranteed sets, their records and results/<dataset>/tree_sets.tsv (none when not configured)."""
    sets = tree_sets(dataset)
    if not sets:
        return []
    return [*sets.values(), *(p[: -len(".npz")] + ".json" for p in sets.values()), f"results/{dataset}/tree_sets.tsv"]


def beyond_enabled():
    """Whether any method beyond the paper is configured (config `methods:`)."""
    return bool(CONFORMAL_SCORES or COVERAGE_FAMILIES or MAX_NODES or MONDRIAN_BY or RISK_METHODS
                or WEIGHTED_METHODS or CONDITIONAL_METHODS)


def model_page():
    """Whether the report is the page about a model: every dataset of the run is a model's outputs and the
    kinds of sets beyond the paper are configured (svbop report): its own sections instead of the paper's."""
    return bool(DATASETS) and all(is_model_outputs(d) for d in DATASETS) and beyond_enabled()


def coverage_epsilons():
    """Every coverage level asked, as significance levels: methods.epsilon and baselines.icp_epsilon."""
    return sorted({float(e) for e in [*METHOD_EPSILONS.values(), *ICP_EPSILONS.values()]})


def model_page_files():
    """What the page about a model reads beyond the paper's page (none for the paper's page)."""
    if not model_page():
        return []
    return ["results/tables/choose_sets.csv",
            *(f for d in DATASETS for f in (f"results/tables/class_coverage_{d}.tsv", f"results/{d}/examples.json",
                                            f"results/{d}/live.json", f"results/{d}/promises.json"))]


def beyond_skipped(dataset):
    """Methods beyond the paper that do not apply to a dataset: {method family: reason}."""
    out = {}
    hierarchy = svbop.config.has_hierarchy(config["datasets"][dataset])
    if (MAX_NODES or "hierarchical" in METHODS["conformal"]) and not hierarchy:
        out["hierarchical"] = ("this dataset has no class hierarchy (give its config entry a hierarchy: key to get "
                               "sets restricted to the hierarchy's nodes)")
    if any(m.startswith("risk_hierarchical_") for m in RISK_METHODS) and not hierarchy:
        out["risk_hierarchical"] = ("risk control of the hierarchical loss needs a class hierarchy, which this dataset "
                                    "has not")
    if "predicted_top_node" in MONDRIAN_BY and not hierarchy:
        out["mondrian"] = ("grouping by the predicted top-level node needs a class hierarchy, which this dataset "
                           "has not (grouping by the predicted class still runs)")
    if "group_column" in MONDRIAN_BY and not svbop.config.has_group_column(config["datasets"][dataset]):
        out["mondrian_group_column"] = ("grouping by group_column: not applicable: no format.group_column (a column of "
                                        "the dataset's csv_text or model_outputs files naming each row's group)")
    if WEIGHTED_METHODS and not svbop.config.has_weights(config["datasets"][dataset]):
        out["weighted"] = ("weighted conformal sets: not applicable: no weights (give every model_outputs part a "
                           "weights file, one likelihood ratio per row; svbop report --weights)")
    if CONDITIONAL_METHODS and not svbop.config.has_group_columns(config["datasets"][dataset]):
        out["conditional"] = ("conditional conformal sets: not applicable: no group columns (give every "
                              "model_outputs part a group_columns file; svbop report --group-columns)")
    return out


def mondrian_groupings(dataset):
    """The groupings of methods.mondrian.by that apply to a dataset (the top node needs a hierarchy, the
    group column a format.group_column)."""
    skipped = beyond_skipped(dataset)
    return [by for by in MONDRIAN_BY if not (by == "predicted_top_node" and "mondrian" in skipped)
            and not (by == "group_column" and "mondrian_group_column" in skipped)]


def beyond_predictions(dataset):
    """The sets of every method beyond the paper on one dataset: {(method, param): path}."""
    out = {}
    for score in CONFORMAL_SCORES:
        if score.startswith("hierarchical_") and "hierarchical" in beyond_skipped(dataset):
            continue
        for eps in METHOD_EPSILONS:
            out[f"conformal_{score}", eps] = f"results/{dataset}/predictions/conformal_{score}/{eps}.npz"
    for family in COVERAGE_FAMILIES:
        for eps in METHOD_EPSILONS:
            out[f"coverage_{family}", eps] = f"results/{dataset}/predictions/coverage_{family}/{eps}.npz"
    for name in RISK_METHODS:
        if name.startswith("risk_hierarchical_") and "risk_hierarchical" in beyond_skipped(dataset):
            continue
        for eps in METHOD_EPSILONS:
            out[name, eps] = f"results/{dataset}/predictions/{name}/{eps}.npz"
    for family, names in (("weighted", WEIGHTED_METHODS), ("conditional", CONDITIONAL_METHODS),
                          ("label_shift", LABEL_SHIFT_METHODS)):
        if family not in beyond_skipped(dataset):
            for name in names:
                for eps in METHOD_EPSILONS:
                    out[name, eps] = f"results/{dataset}/predictions/{name}/{eps}.npz"
    for by in mondrian_groupings(dataset):
        for score in MONDRIAN_SCORES:
            for eps in METHOD_EPSILONS:
                out[f"mondrian_{score}_{by}", eps] = f"results/{dataset}/predictions/mondrian_{score}_{by}/{eps}.npz"
    if "hierarchical" not in beyond_skipped(dataset):
        for n in MAX_NODES:
            for label in HIERARCHICAL_UTILITIES:
                out[f"hierarchical_{n}", label] = f"results/{dataset}/predictions/hierarchical_{n}/{label}.npz"
    return out


def beyond_calibration(dataset):
    """The calibration record (JSON) of every calibrated method beyond the paper: {(method, param): path}."""
    return {key: path[: -len(".npz")] + ".json" for key, path in beyond_predictions(dataset).items()
            if not key[0].startswith("hierarchical_")}


def beyond_compared(dataset):
    """The paper's methods shown beside them (SVBOP-Full, threshold, top-s, ICP): {(method, param): path}."""
    return {key: path for key, path in predictions(dataset).items()
            if key[0] in svbop.evaluation.BEYOND_PAPER_METHODS}


def beyond_results(dataset):
    """Every artefact beyond the paper of one dataset (none when `methods:` configures nothing)."""
    if not beyond_enabled():
        return []
    return [*beyond_predictions(dataset).values(), *beyond_calibration(dataset).values(),
            f"results/{dataset}/beyond.tsv", f"results/{dataset}/promises.json"]


def dataset_results(dataset):
    """Every artefact of one dataset; all are targets, so deleting any of them reruns it (and only
    what depends on it) instead of being ignored as a missing intermediate."""
    if is_model_outputs(dataset):
        return [
            f"data/{dataset}/raw",
            f"data/{dataset}/dataset.npz",
            f"data/{dataset}/split.npz",
            f"results/{dataset}/scores/flat.npz",
            f"results/{dataset}/calibration.json",
            *predictions(dataset).values(),
            *timings(dataset).values(),
            f"results/{dataset}/metrics.tsv",
            f"results/{dataset}/summary.json",
            *beyond_results(dataset),
        ]
    kind = config["datasets"][dataset]["features"]["kind"]
    return [
        *([f"data/{dataset}/raw"] if "format" in config["datasets"][dataset] else []),
        f"data/{dataset}/dataset.npz",
        f"data/{dataset}/split.npz",
        f"results/{dataset}/features/{kind}.npz",
        *([f"results/{dataset}/models/cnn.pt"] if kind == "cnn" else []),
        f"results/{dataset}/models/flat.npz",
        *approximate_models(dataset),
        *tree_sets_results(dataset),
        f"results/{dataset}/scores/flat.npz",
        *([f"results/{dataset}/calibration.json"] if dataset in CALIBRATED else []),
        *predictions(dataset).values(),
        *timings(dataset).values(),
        f"results/{dataset}/metrics.tsv",
        f"results/{dataset}/summary.json",
        *beyond_results(dataset),
    ]


def calibration_records():
    """The calibration record of every dataset whose probabilities are calibrated (or are a model's outputs)."""
    return {d: f"results/{d}/calibration.json" for d in DATASETS if d in CALIBRATED or is_model_outputs(d)}


def calibration_inputs(wildcards):
    """What calibrate_scores reads: a model's outputs as given (dataset and split), or the flat model's
    probabilities before calibration."""
    d = wildcards.dataset
    if is_model_outputs(d):
        return {"dataset": f"data/{d}/dataset.npz", "split": f"data/{d}/split.npz"}
    return {"scores": f"results/{d}/scores/uncalibrated.npz"}


def temperature_input(wildcards):
    """The calibration record whose temperature SVBOP's rules apply to the flat model (calibrate: temperature)."""
    return [f"results/{wildcards.dataset}/calibration.json"] if wildcards.dataset in CALIBRATED else []


def utility_tables():
    return expand(
        "results/tables/utility_properties_K{K}.tsv", K=config["utility_table"]["K"]
    )


# --- report ---------------------------------------------------------------------------------


def cnn_history(dataset):
    """The training history of the CNN whose hidden layer is the dataset's features (features kind
    cnn: its epochs' seconds add up to its training time), or nothing."""
    if config["datasets"][dataset]["features"]["kind"] == "cnn":
        return [f"results/{dataset}/features/cnn_history.tsv"]
    return []


def features_benchmark(dataset):
    """Snakemake's benchmark of the dataset's features job (its wall-clock seconds, column s)."""
    kind = config["datasets"][dataset]["features"]["kind"]
    return f"results/benchmarks/features_{kind}/{dataset}.tsv"


def train_time_files(dataset):
    """Files whose seconds add up to each SVBOP method's training time (Table 4; svbop.evaluation.read_seconds):
    every model the method needs. Full = the flat model; HSG = the flat model it indexes + the index;
    HF = building its tree + training the nodes; and, where the features are a CNN's hidden layer
    (features kind cnn), the CNN's training for each of them."""
    if is_model_outputs(dataset):  # trained elsewhere: no training time of ours (Table 4: not applicable)
        return {}
    flat = f"results/{dataset}/models/flat.json"
    cnn = cnn_history(dataset)
    out = {"svbop_full": [*cnn, flat], "svbop_full_naive": [*cnn, flat]}
    for method in svbop_methods(dataset):
        if method == "svbop_hsg":
            out[method] = [*cnn, flat, f"results/{dataset}/indexes/hnsw.json"]
        elif method.startswith("svbop_hf_"):
            tree = method[len("svbop_hf_"):]
            out[method] = [*cnn, f"results/{dataset}/models/tree_{tree}.json", f"results/{dataset}/models/hf_{tree}.json"]
    return out


ILLUSTRATION_KINDS = {name: kind for name, (_, kind, _) in svbop.report.illustrations.ILLUSTRATIONS.items()}


def illustrations():
    """The paper's illustrations that can be drawn: {name: its report.illustrations config, with
    the dataset it is drawn from}: the configured one when it runs, else the first dataset of the
    run with inputs of the right kind (images, texts); illustrations with neither are left out."""
    out = {}
    for name, cfg in config["report"]["illustrations"].items():
        dataset = svbop.report.illustrations.illustration_dataset(name, cfg.get("dataset"), DATASETS, config["datasets"])
        if dataset is not None:
            out[name] = {**cfg, "dataset": dataset}
    return out


def illustration_inputs(wildcards):
    """The dataset, split, test probabilities (and raw folder, for image files) of an illustration."""
    d = illustrations()[wildcards.name]["dataset"]
    out = {"dataset": f"data/{d}/dataset.npz", "split": f"data/{d}/split.npz", "scores": f"results/{d}/scores/flat.npz"}
    if "format" in config["datasets"][d]:
        out["raw"] = f"data/{d}/raw"
    return out


def illustration_files():
    out = {}
    for name in illustrations():
        out[name] = [f"results/illustrations/{name}.json"]
        if ILLUSTRATION_KINDS[name] == "images":
            out[name].append(f"results/illustrations/{name}.png")
    return out


def chromium_required(wildcards):
    """No input; stops the run (before any job) with how to install Chromium when it is missing:
    rule report_screenshot takes report/screenshot.png with it."""
    if svbop.report.browser.chromium_executable() is None:
        raise WorkflowError(
            "report/screenshot.png is taken with headless Chromium, which is not installed: "
            "apt-get install chromium (Debian), or set SVBOP_CHROMIUM to a Chromium or Chrome binary"
        )
    return []


# --- after a failed run -------------------------------------------------------------------------


#: The page the failure path writes (Snakefile, onerror). Never results/report.html: that file is
#: made by rule report_html alone, so a page built after a failure never counts as its finished
#: output (a rerun after a config change then rebuilds the tables and the report, and
#: `snakemake --report` finds the provenance of every file). report_html deletes this page once the
#: whole report is written.
PARTIAL_REPORT = "results/report.partial.html"


def report_requested():
    """Whether this run was asked for the report (the default target, or results/report.html):
    a failed run of other targets (one dataset's files, say) leaves an existing report alone."""
    dag = getattr(workflow, "dag", None)
    rules_asked = {getattr(r, "name", str(r)) for r in (getattr(dag, "targetrules", None) or ())}
    files_asked = {str(f) for f in (getattr(dag, "targetfiles", None) or ())}
    if not rules_asked and not files_asked:
        return True
    return "all" in rules_asked or "results/report.html" in files_asked


def failed_jobs():
    """The jobs of this run that failed: [(rule, wildcards, log files)], read from Snakemake's
    scheduler (an internal attribute: [] where a Snakemake version lacks it)."""
    out = []
    for job in getattr(getattr(workflow, "scheduler", None), "failed", None) or ():
        for one in getattr(job, "jobs", None) or [job]:  # a group job: its members
            try:
                out.append((one.rule.name, dict(one.wildcards_dict), [str(f) for f in one.log]))
            except AttributeError:
                continue
    return sorted(out, key=lambda j: (j[0], sorted(j[1].items())))


def _dataset_of(wildcards):
    """The dataset a failed job belongs to (its `dataset` wildcard), "" for a weights download (its
    datasets find its record), None for a job of no dataset (figures, tables, the report)."""
    if "dataset" in wildcards:
        return wildcards["dataset"]
    return "" if "weights" in wildcards else None


def jobs_outside_datasets(jobs):
    """The failed jobs that belong to no dataset, as svbop.report.status.failure_summary wants them."""
    from svbop.report.status import log_failure

    out = []
    for rule, wildcards, logs in jobs:
        if _dataset_of(wildcards) is not None:
            continue
        name = rule + (f" ({', '.join(f'{k}={v}' for k, v in wildcards.items())})" if wildcards else "")
        reason = next((r for log in logs if (r := log_failure(log))), "")
        out.append({"job": name, "reason": reason.splitlines()[0] if reason else "", "log": ", ".join(logs)})
    return out


def partial_report(jobs=()):
    """The report of every dataset that finished, with the failed ones and their reasons.

    Called by the Snakefile's `onerror` handler: a failed download, unpacking or parse stops only
    its own dataset (with --keep-going, the default profile's setting, the others go on), its job
    records why (results/status/failed/), and this builds PARTIAL_REPORT (results/report.partial.html)
    from what finished; results/report.html is left to rule report_html. A dataset counts as failed
    when it has a record, one of its jobs failed in this run (`jobs`: failed_jobs(); older outputs
    of it may still be there), or its results are missing. The run still exits non-zero. The next
    `snakemake` retries the failed jobs only.
    """
    import svbop.report
    from svbop.report.compare import read_train_seconds
    from svbop.report.status import dataset_logs, describe_failure, failures, log_failure

    weights_of = {
        d: svbop.config.vgg16_weights_key(config["datasets"][d]["features"]["weights"])
        for d in DATASETS
        if config["datasets"][d]["features"]["kind"] == "vgg16"
        and config["datasets"][d]["features"]["weights"].lower() != "none"
    }
    records = failures(DATASETS, weights=weights_of)
    failed_here = {}  # dataset -> [(rule, its logs)] of its jobs that failed in this run
    for rule, wildcards, logs in jobs:
        if _dataset_of(wildcards):
            failed_here.setdefault(wildcards["dataset"], []).append((rule, logs))
    finished, failed = [], {}
    for d in DATASETS:
        needed = [f"results/{d}/metrics.tsv", f"results/{d}/summary.json"]
        needed += [f for fs in train_time_files(d).values() for f in fs]
        if d in records:
            failed[d] = describe_failure(records[d])
        elif d not in failed_here and all(os.path.exists(f) for f in needed):
            finished.append(d)
        else:
            logs = [*(log for _, ls in failed_here.get(d, []) for log in ls), *dataset_logs(d, DATASETS)]
            logged = [(log, r) for log in logs if (r := log_failure(log))]
            if logged:
                failed[d] = f"did not finish: {logged[0][1].splitlines()[0]} (log: {logged[0][0]})"
            elif d in failed_here:
                failed[d] = "did not finish: " + "; ".join(
                    f"job {rule} failed" + (f" (log: {', '.join(ls)})" if ls else "") for rule, ls in failed_here[d])
            else:
                failed[d] = ("did not finish: the run stopped before this dataset did (rerun snakemake; "
                             "--keep-going, the default profile's setting, goes on past a failed dataset)")
    figure_K = config["report"]["figure_K"]
    figures = {
        name: path
        for name, path in (
            ("utilities", f"results/figures/utilities_K{figure_K}.png"),
            ("fbeta_family", f"results/figures/fbeta_family_K{figure_K}.png"),
            ("genreject_family", "results/figures/genreject_family.png"),
        )
        if os.path.exists(path)
    }
    shown = {}
    for name, files in illustration_files().items():
        if illustrations()[name]["dataset"] in finished and all(os.path.exists(f) for f in files):
            shown[name] = {"records": files[0], "figure": files[1] if len(files) > 1 else None}
    svbop.report.build_report(
        PARTIAL_REPORT,
        summaries=[f"results/{d}/summary.json" for d in finished],
        metrics=[f"results/{d}/metrics.tsv" for d in finished] or None,
        figures=figures,
        config=config,
        utilities=config["utilities"],
        title=config["report"]["title"],
        template="report/templates/report.html.j2",
        not_run=NOT_RUN,
        missing=MISSING,
        failed=failed,
        train_seconds=read_train_seconds({d: train_time_files(d) for d in finished}),
        illustrations=shown,
        beyond=[f for d in finished if os.path.exists(f := f"results/{d}/beyond.tsv")] if beyond_enabled() else None,
        beyond_skipped={d: beyond_skipped(d) for d in finished} if beyond_enabled() else None,
        calibration={d: f for d, f in calibration_records().items() if d in finished and os.path.exists(f)},
        tuning={d: records for d, records in tuned_datasets().items() if d in finished},
    )
    return finished, failed
