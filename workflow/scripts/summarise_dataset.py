"""Glue: the dataset's row of the paper's Table 2 (K, D, sizes) with the flat model's accuracy and the time
spent training every model it needs and computing its features (rule summarise_dataset)."""

import json
import logging

from svbop.datasets import Dataset, load_split
from svbop.evaluation import dataset_summary, read_seconds
from svbop.io import atomic_path, load_score_arrays
from svbop.logs import to_log_file

to_log_file(snakemake.log[0])
dataset = Dataset.load(snakemake.input.dataset)
P_test, y_test = load_score_arrays(snakemake.input.scores, "P_test", "y_test")
with open(snakemake.input.model_info) as fh:
    info = json.load(fh)
# training: the flat model, and the CNN when its hidden layer is the features (the sum of its epochs);
# features: the features job's wall time (Snakemake's benchmark), less the CNN's training counted above
parts = {"flat": float(info["train_seconds"])}
history = snakemake.input.cnn_history  # a list, empty unless the features are a CNN's hidden layer
history = [history] if isinstance(history, str) else list(history)
if history:
    parts = {"cnn": sum(read_seconds(path) for path in history), **parts}
features_seconds = max(0.0, read_seconds(snakemake.input.features_benchmark) - parts.get("cnn", 0.0))
summary = dataset_summary(
    dataset=snakemake.params.dataset, title=snakemake.params.title, n_classes=dataset.n_classes,
    n_features=info["D"], split=load_split(snakemake.input.split),
    P_test=P_test, y_test=y_test, synthetic=dataset.synthetic, description=dataset.description,
    features=snakemake.params.features, train_parts=parts, features_seconds=features_seconds,
)
with atomic_path(snakemake.output[0]) as tmp:
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
logging.info("%s: K=%d, D=%d, top-1 %.2f%%, training %.1f s (%s), features %.1f s", summary["dataset"], summary["K"],
             summary["D"], summary["top1_pct"], summary["train_seconds"], ", ".join(f"{k} {v:.1f}" for k, v in parts.items()),
             features_seconds)
