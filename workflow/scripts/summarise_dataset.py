"""Glue: the dataset's row of the paper's Table 2 (K, D, sizes) with the flat model's accuracy and the time
spent training every model it needs and computing its features (rule summarise_dataset). A model's outputs
have no features or model of ours: D and the training time are None, and the summary says so."""

import json
import logging

from svbop.datasets import Dataset, load_split
from svbop.evaluation import dataset_summary, read_seconds
from svbop.io import atomic_path, load_score_arrays
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
dataset = Dataset.load(snakemake.input.dataset)
P_test, y_test = load_score_arrays(snakemake.input.scores, "P_test", "y_test")


def listed(files):
    """A rule input that may be empty, as a list."""
    return [files] if isinstance(files, str) else list(files)


model_info = listed(snakemake.input.model_info)
if model_info:
    with open(model_info[0]) as fh:
        info = json.load(fh)
    # training: the flat model, and the CNN when its hidden layer is the features (the sum of its epochs);
    # features: the features job's wall time (Snakemake's benchmark), less the CNN's training counted above
    parts = {"flat": float(info["train_seconds"])}
    history = listed(snakemake.input.cnn_history)  # empty unless the features are a CNN's hidden layer
    if history:
        parts = {"cnn": sum(read_seconds(path) for path in history), **parts}
    features_seconds = max(0.0, read_seconds(snakemake.input.features_benchmark) - parts.get("cnn", 0.0))
    n_features = info["D"]
else:  # a model's outputs: trained elsewhere, no features of ours
    parts, features_seconds, n_features = {}, None, None
summary = dataset_summary(
    dataset=snakemake.params.dataset, title=snakemake.params.title, n_classes=dataset.n_classes,
    n_features=n_features, split=load_split(snakemake.input.split),
    P_test=P_test, y_test=y_test, synthetic=dataset.synthetic, description=dataset.description,
    features=snakemake.params.features, train_parts=parts, features_seconds=features_seconds,
)
calibration = listed(snakemake.input.calibration)
if calibration:
    with open(calibration[0]) as fh:
        record = json.load(fh)
    summary["calibration"] = {k: record[k] for k in ("method", "temperature", "outputs") if k in record}
    if "origin" in record:
        summary["origin"] = record["origin"]
if not model_info:
    summary["model_outputs"] = True
with atomic_path(snakemake.output[0]) as tmp:
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
logging.info("%s: K=%d, D=%s, top-1 %.2f%%, training %s", summary["dataset"], summary["K"], summary["D"],
             summary["top1_pct"], "not ours (model outputs)" if not model_info else f"{summary['train_seconds']:.1f} s")
