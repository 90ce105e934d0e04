"""Command line: ``svbop utilities``, ``svbop predict``, ``svbop evaluate``, ``svbop check-config``."""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

from . import __version__
from .io import load_npy, load_scores, load_sets, save_sets
from .metrics import check_labels, mean_scores
from .search import predict_sets
from .utilities import STANDARD_UTILITIES, utility, utility_table


def _utilities(args) -> int:
    rows = utility_table(args.spec or STANDARD_UTILITIES, K=args.K)
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    header = ["utility", "g(s)", "g(1)", f"g({args.K})", "decreasing", "g(1)=1", "g>=1/s", "(1/x)-convex", "early stop"]
    table = [
        [
            r["spec"],
            r["formula"],
            f"{r['g(1)']:.4f}",
            f"{r['g(K)']:.4f}",
            yes(r["strictly_decreasing"]),
            yes(r["g1_is_one"]),
            yes(r["lower_bounded_by_precision"]),
            yes(r["one_over_x_convex"]),
            yes(r["early_stop_valid"]),
        ]
        for r in rows
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *table)]
    print(f"Properties of set utilities for K={args.K} (checked exactly over s = 1..K)")
    for line in [header, ["-" * w for w in widths], *table]:
        print("  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip())
    return 0


def _predict(args) -> int:
    if os.path.exists(args.output) and os.path.samefile(args.output, args.probs):
        raise ValueError(f"{args.output}: --output is the input file; choose another name (it would be overwritten)")
    P = load_scores(args.probs, key=args.key)
    u = utility(args.utility)
    try:
        sets = predict_sets(P, u, n_jobs=args.jobs)
    except ValueError as exc:  # a negative score or a zero row: name the file it came from
        raise ValueError(f"{args.probs}: {exc}") from None
    save_sets(args.output, sets)
    print(
        f"{len(sets)} sets for {args.utility!r} -> {args.output} "
        f"(mean size {sets.sizes.mean():.3f}, mean expected utility {sets.expected_utility.mean():.4f})"
    )
    return 0


def _evaluate(args) -> int:
    sets = load_sets(args.sets)
    if len(sets) == 0:
        raise ValueError(f"{args.sets}: no sets (nothing to evaluate)")
    y = _load_labels(args.labels)
    check_labels(y, (len(sets), sets.n_classes), name=args.labels)
    scores = mean_scores(sets, y, args.utility)
    for k, v in scores.items():
        print(f"{k}\t{v:.4f}")
    return 0


def _check_config(args) -> int:
    from .config import check_config, check_yaml, load_yaml, merge_configs, validate_config

    merged: dict = {}
    for path in args.files:
        check_yaml(path)
        merged = merge_configs(merged, load_yaml(path) or {})
    validate_config(merged, args.schema) if args.schema else validate_config(merged)
    check_config(merged)
    print(f"config ok ({', '.join(args.files)}): {len(merged.get('run') or [])} datasets in run, "
          f"{len(merged.get('datasets') or {})} configured")
    return 0


def _load_labels(path: str) -> np.ndarray:
    """True class indices: a ``.npy`` array or a text file with one index per line."""
    if path.endswith(".npy"):
        return load_npy(path, "label file (.npy)")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # an empty file: counted below
            return np.loadtxt(path, dtype=np.int64, ndmin=1)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: expected one integer class index per line ({exc})") from None


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="svbop", description="Bayes-optimal set-valued prediction (Mortier et al., 2021)")
    ap.add_argument("--version", action="version", version=f"svbop {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("utilities", help="print the set utilities and their properties")
    p.add_argument("--K", type=int, default=100, help="number of classes (default 100)")
    p.add_argument("--spec", action="append", help="utility spec (repeatable; default: the standard ones)")
    p.set_defaults(func=_utilities)
    p = sub.add_parser("predict", help="Bayes-optimal sets from a probability matrix")
    p.add_argument("probs", help="probabilities (.npy, .npz, .csv, .tsv, .txt), one row per sample")
    p.add_argument("--utility", "-u", required=True, help="utility spec, e.g. 'fbeta:beta=1'")
    p.add_argument("--output", "-o", required=True, help="output .npz (with expected utilities) or .csv/.txt")
    p.add_argument("--key", help="array name inside an .npz input")
    p.add_argument("--jobs", "-j", type=int, default=1, help="threads (-1: all cores)")
    p.set_defaults(func=_predict)
    p = sub.add_parser("evaluate", help="mean utility, recall and set size of saved sets")
    p.add_argument("sets", help="sets written by 'svbop predict'")
    p.add_argument("labels", help="true class indices (.npy or text, one per line)")
    p.add_argument("--utility", "-u", action="append", default=[], help="utility spec (repeatable)")
    p.set_defaults(func=_evaluate)
    p = sub.add_parser("check-config", help="check workflow config files (YAML syntax, schema, cross-field rules)")
    p.add_argument("files", nargs="+", help="config files, merged in order as Snakemake merges --configfile files")
    p.add_argument("--schema", help="JSON schema (default: the workflow's config.schema.yaml)")
    p.set_defaults(func=_check_config)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"svbop: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # unreadable or unwritable files: the file and the system's reason
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"svbop: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
