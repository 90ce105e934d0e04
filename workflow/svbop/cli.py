"""Command line: ``svbop utilities``, ``svbop predict``, ``svbop evaluate``, ``svbop check-config``, ``svbop report``,
``svbop docs``, ``svbop stream``."""

from __future__ import annotations

import argparse
import errno
import os
import stat
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


#: ``svbop predict --method``: what each method needs (required options) and takes (optional ones).
_METHOD_OPTIONS = {
    "bayes": ({"utility"}, set()),
    "conformal": ({"epsilon", "calibration", "calibration_labels"},
                  {"score", "class_conditional", "clustered", "rc3p", "k_reg", "lam", "gamma", "empty",
                   "calibration_key", "hierarchy", "hierarchy_format", "max_nodes", "deterministic", "randomized",
                   "seed", "weights", "calibration_weights", "label_shift", "class_weights", "label_noise",
                   "p_values", "smoothed"}),
    "hierarchical": ({"utility", "hierarchy"}, {"hierarchy_format", "max_nodes"}),
    "risk": ({"alpha", "calibration", "calibration_labels"},
             {"loss", "cost", "score", "k_reg", "lam", "empty", "calibration_key", "hierarchy", "hierarchy_format"}),
    "conditional": ({"epsilon", "calibration", "calibration_labels", "group_columns", "calibration_group_columns"},
                    {"score", "k_reg", "lam", "empty", "calibration_key"}),
}


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_method_options(args) -> None:
    """Every option the method needs is given, and none that it ignores (one-line errors)."""
    required, optional = _METHOD_OPTIONS[args.method]
    for name in sorted(required):
        if getattr(args, name) is None:
            raise ValueError(f"--method {args.method} needs {_option(name)}")
    for name in sorted(set().union(*(r | o for r, o in _METHOD_OPTIONS.values())) - required - optional):
        if getattr(args, name) not in (None, False):
            users = [m for m, (r, o) in _METHOD_OPTIONS.items() if name in r | o]
            raise ValueError(f"{_option(name)} is for --method {' or '.join(users)}, not {args.method}")


def _conformal(args, P: np.ndarray):
    from .baselines import ConformalSetPredictor

    score = args.score or "lac"
    hierarchical = {}
    if score == "hierarchical":  # unions of at most --max-nodes nodes of --hierarchy, with coverage
        if args.hierarchy is None:
            raise ValueError("--score hierarchical needs --hierarchy (a class tree over the columns 0 .. K-1)")
        hierarchical = {"hierarchy": _read_tree(args, P.shape[1]),
                        "max_nodes": 1 if args.max_nodes is None else args.max_nodes}
    elif args.hierarchy is not None or args.max_nodes is not None or args.hierarchy_format is not None:
        raise ValueError(f"--hierarchy, --hierarchy-format and --max-nodes are for --score hierarchical with --method "
                         f"conformal, not --score {score}")
    if args.class_conditional + args.clustered + args.rc3p > 1:
        raise ValueError("--class-conditional, --clustered and --rc3p: give one (--clustered and --rc3p are"
                         " class-conditional by clusters, and with rank limits)")
    if args.deterministic and score not in ("aps", "raps", "saps"):
        raise ValueError(f"--deterministic is for --score aps, raps or saps (their randomised score is the default),"
                         f" not --score {score}")
    if args.randomized and score != "topk":
        raise ValueError(f"--randomized is for --score topk (aps, raps and saps are randomised unless --deterministic),"
                         f" not --score {score}")
    predictor = ConformalSetPredictor(
        args.epsilon, score=score,
        class_conditional="clustered" if args.clustered else "rc3p" if args.rc3p else args.class_conditional,
        k_reg=1 if args.k_reg is None else args.k_reg, lam=args.lam,
        empty=args.empty, gamma=args.gamma, **hierarchical,
        randomized=False if args.deterministic else True if args.randomized else None,
        random_state=0 if args.seed is None else args.seed, label_noise=_label_noise(args, P.shape[1]),
    )
    P_cal = load_scores(args.calibration, key=args.calibration_key)
    y_cal = _load_labels(args.calibration_labels)
    if P_cal.shape[1] != P.shape[1]:
        raise ValueError(f"{args.calibration}: {P_cal.shape[1]} classes, but {args.probs} has {P.shape[1]}")
    check_labels(y_cal, P_cal.shape, name=args.calibration_labels)
    if (args.weights is None) != (args.calibration_weights is None):
        raise ValueError("--weights and --calibration-weights go together (the test and the calibration rows' "
                         "likelihood ratios)")
    weighted = args.weights is not None
    w_cal = _load_rows(args.calibration_weights, "--calibration-weights", P_cal.shape[0], args.calibration) \
        if weighted else None
    w_test = _load_rows(args.weights, "--weights", P.shape[0], args.probs) if weighted else None
    shift = {}
    if args.label_shift is not None and args.class_weights is not None:
        raise ValueError("--label-shift estimates the class weights that --class-weights gives: pass one or the other")
    if args.class_weights is not None:
        shift["class_weights"] = _load_rows(args.class_weights, "--class-weights", P.shape[1], "the classes of "
                                            + args.probs)
    elif args.label_shift is not None:
        from .conformal import estimate_label_shift

        try:
            shift["class_weights"] = estimate_label_shift(P_cal, y_cal, P, args.label_shift)
        except ValueError as exc:
            raise ValueError(f"--label-shift {args.label_shift}: {exc}") from None
    try:
        predictor.fit(P_cal, y_cal, **({"weights": w_cal} if weighted else {}), **shift)
    except ValueError as exc:
        raise ValueError(f"{args.calibration}: {exc}") from None
    if getattr(args, "p_values", None) is not None:  # before predict: the same uniforms as its sets' (a copy's)
        import copy

        from .io import atomic_path

        try:
            p_values = copy.deepcopy(predictor).predict_p(P, smoothed=bool(args.smoothed))
        except ValueError as exc:
            raise ValueError(f"--p-values: {exc}") from None
        with atomic_path(os.path.abspath(args.p_values)) as tmp, open(tmp, "wb") as fh:
            np.save(fh, p_values)
    try:
        sets = predictor.predict(P, **({"weights": w_test} if weighted else {}))
    except ValueError as exc:
        raise ValueError(f"{args.probs}: {exc}") from None
    kind = {True: " class-conditional", "clustered": " clustered class-conditional",
            "rc3p": " class-conditional (RC3P)"}.get(predictor.class_conditional, "")
    what = f"conformal {'randomised ' if predictor.randomized else ''}{predictor.score}{kind}"
    if score == "hierarchical":
        what += f" over at most {predictor.max_nodes} node(s) of {args.hierarchy}"
    if weighted:
        what += " weighted for covariate shift"
    if shift:
        w = shift["class_weights"]
        what += (f" under label shift (class weights {'by ' + args.label_shift.upper() if args.label_shift else 'given'}"
                 f", {w.min():.3g}..{w.max():.3g})")
    if predictor.label_noise is not None:
        what += " covering the clean label (noisy calibration labels)"
    calibrated = (f"{'delta' if predictor.score == 'credal' else 'beta'} = {predictor.parameter_:.6g}"
                  if hasattr(predictor, "parameter_") else f"q = {predictor.quantile_:.6g}")
    return sets, f"{what} at epsilon={args.epsilon} ({calibrated}, {len(y_cal)} calibration rows)"


def _label_noise(args, K: int):
    """``--label-noise``: a uniform noise rate (a number), or a file of the ``K x K`` transition matrix."""
    if args.label_noise is None:
        return None
    from .conformal.label_noise import check_label_noise

    try:
        rate = float(args.label_noise)
    except ValueError:
        M = _load_rows(args.label_noise, "--label-noise", K, "the classes of " + args.probs)
        return check_label_noise(M, f"{args.label_noise}: --label-noise")
    return check_label_noise(rate, "--label-noise")


def _load_rows(path: str, option: str, n: int, beside: str) -> np.ndarray:
    """A file of one number (or, 2-D, one row of numbers) per row: ``.npy``, or text with one row
    per line (columns split at whitespace or commas); ``n`` rows, as many as ``beside`` has."""
    if path.endswith(".npy"):
        values = load_npy(path, f"{option} file (.npy)")
    else:
        if not os.path.isfile(path):
            raise ValueError(f"{path}: {option}: no such file")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                with open(path, encoding="utf-8") as f:
                    values = np.loadtxt((line.replace(",", " ") for line in f), dtype=np.float64, ndmin=1)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: {option}: expected numbers, one row per line ({exc})") from None
    if values.shape[0] != n:
        raise ValueError(f"{path}: {option} has {values.shape[0]} rows but {beside} has {n}")
    return values


def _calibration_rows(args, P: np.ndarray):
    P_cal = load_scores(args.calibration, key=args.calibration_key)
    y_cal = _load_labels(args.calibration_labels)
    if P_cal.shape[1] != P.shape[1]:
        raise ValueError(f"{args.calibration}: {P_cal.shape[1]} classes, but {args.probs} has {P.shape[1]}")
    check_labels(y_cal, P_cal.shape, name=args.calibration_labels)
    return P_cal, y_cal


def _risk(args, P: np.ndarray):
    """Conformal risk control: E[--loss] <= --alpha (svbop.conformal.RiskControlSetPredictor)."""
    from .conformal import RiskControlSetPredictor

    loss = args.loss or "miscoverage"
    options = {}
    if loss == "class_cost":
        if args.cost is None:
            raise ValueError("--loss class_cost needs --cost (one cost per class, one per line or .npy)")
        options["cost"] = _load_rows(args.cost, "--cost", P.shape[1], f"{args.probs} (columns)")
    elif args.cost is not None:
        raise ValueError(f"--cost is for --loss class_cost, not --loss {loss}")
    if loss == "hierarchical":
        if args.hierarchy is None:
            raise ValueError("--loss hierarchical needs --hierarchy (a class tree over the columns 0 .. K-1)")
        options["hierarchy"] = _read_tree(args, P.shape[1])
    elif args.hierarchy is not None or args.hierarchy_format is not None:
        raise ValueError(f"--hierarchy is for --loss hierarchical with --method risk, not --loss {loss}")
    predictor = RiskControlSetPredictor(args.alpha, loss, args.score or "lac", k_reg=1 if args.k_reg is None
                                        else args.k_reg, lam=args.lam, empty=args.empty or "keep", **options)
    P_cal, y_cal = _calibration_rows(args, P)
    try:
        predictor.fit(P_cal, y_cal)
    except ValueError as exc:
        raise ValueError(f"{args.calibration}: {exc}") from None
    try:
        sets = predictor.predict(P)
    except ValueError as exc:
        raise ValueError(f"{args.probs}: {exc}") from None
    return sets, (f"conformal risk control of {loss} at alpha={args.alpha} ({predictor.score}, lambda = "
                  f"{predictor.lambda_:.6g}, {len(y_cal)} calibration rows)")


def _conditional(args, P: np.ndarray):
    """Coverage 1 - epsilon within every group column (svbop.conformal.ConditionalSetPredictor)."""
    from .conformal import ConditionalSetPredictor

    predictor = ConditionalSetPredictor(args.epsilon, args.score or "lac", k_reg=1 if args.k_reg is None else
                                        args.k_reg, lam=args.lam, empty=args.empty or "top1")
    P_cal, y_cal = _calibration_rows(args, P)
    Phi_cal = _load_rows(args.calibration_group_columns, "--calibration-group-columns", P_cal.shape[0],
                         args.calibration)
    Phi = _load_rows(args.group_columns, "--group-columns", P.shape[0], args.probs)
    try:
        predictor.fit(P_cal, y_cal, Phi_cal)
    except ValueError as exc:
        raise ValueError(f"{args.calibration_group_columns}: {exc}") from None
    try:
        sets = predictor.predict(P, Phi)
    except ValueError as exc:
        raise ValueError(f"{args.group_columns}: {exc}") from None
    return sets, (f"conformal {predictor.score} covering 1 - {args.epsilon} in each of {predictor.n_groups_} group "
                  f"column(s) ({len(y_cal)} calibration rows)")



def _read_tree(args, K: int):
    """``--hierarchy`` over the probability matrix's classes, its columns, named ``0 .. K-1``."""
    from .datasets import read_hierarchy

    return read_hierarchy(None, {"format": args.hierarchy_format or "edges", "file": args.hierarchy},
                          [str(c) for c in range(K)], where=args.hierarchy)


def _hierarchical(args, P: np.ndarray, u):
    from .hierarchical import predict_sets_hierarchical

    tree = _read_tree(args, P.shape[1])
    max_nodes = 1 if args.max_nodes is None else args.max_nodes
    if max_nodes < 1:
        raise ValueError(f"--max-nodes must be >= 1, got {max_nodes}")
    try:
        sets = predict_sets_hierarchical(P, u, tree, max_nodes)
    except ValueError as exc:
        raise ValueError(f"{args.probs}: {exc}") from None
    return sets, f"{args.utility!r} over at most {max_nodes} node(s) of {args.hierarchy}"


#: Inputs of ``svbop predict``: option (as the user writes it) and attribute of ``args``.
_PREDICT_INPUTS = (("probs", "probs"), ("--calibration", "calibration"),
                   ("--calibration-labels", "calibration_labels"), ("--hierarchy", "hierarchy"),
                   ("--weights", "weights"), ("--calibration-weights", "calibration_weights"), ("--cost", "cost"),
                   ("--class-weights", "class_weights"),
                   ("--group-columns", "group_columns"), ("--calibration-group-columns", "calibration_group_columns"))


def _check_inputs(args, inputs) -> None:
    """Every input that exists is a regular file (``/dev/zero`` never ends, a FIFO may never
    answer); a missing one is left to its reader, which names it."""
    for option, attr in inputs:
        names = getattr(args, attr)
        for name in names if isinstance(names, list) else [names]:
            if name is None:
                continue
            try:
                mode = os.stat(name).st_mode
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise ValueError(f"{name}: {option}: cannot read ({exc.strerror or exc})") from None
            if not stat.S_ISREG(mode):
                raise ValueError(f"{name}: {option} is not a regular file")


def _output_path(args, path: str, option: str, inputs) -> str:
    """An output path (``option``: ``--output``, ``--coverage``) with its folder resolved
    (``new/../x.npz`` is ``./x.npz``, whether or not ``new/`` exists); refused when it is any of
    ``inputs`` (``(option, attribute of args)``; unset ones skipped), however named (a link, a
    ``..``, a hard link)."""
    folder, name = os.path.split(os.path.abspath(path))
    out = os.path.join(os.path.realpath(folder), name)
    real = os.path.realpath(out)  # a link at the output's name: where it points
    for in_option, attr in inputs:
        given = getattr(args, attr)
        if given is None:
            continue
        same = os.path.realpath(given) == real
        if not same and os.path.exists(out) and os.path.exists(given):
            same = os.path.samefile(out, given)
        if same:
            raise ValueError(f"{path}: {option} is the input file ({in_option}); choose another name "
                             "(it would be overwritten)")
    return out


def _predict(args) -> int:
    _check_method_options(args)
    _check_inputs(args, _PREDICT_INPUTS)
    output = _output_path(args, args.output, "--output", _PREDICT_INPUTS)
    if getattr(args, "smoothed", False) and args.p_values is None:
        raise ValueError("--smoothed is for --p-values (the smoothed conformal p-values)")
    if getattr(args, "p_values", None) is not None:
        p_path = _output_path(args, args.p_values, "--p-values", _PREDICT_INPUTS)
        if not p_path.endswith(".npy"):
            raise ValueError(f"{args.p_values}: --p-values writes a .npy file (rows x classes); name it FILE.npy")
        if p_path == output:
            raise ValueError(f"{args.p_values}: --p-values is the --output file; choose another name")
        given = [_option(k) for k in ("weights", "label_shift", "class_weights", "label_noise", "clustered", "rc3p")
                 if getattr(args, k, None) not in (None, False)]
        if given or (args.score or "lac") in ("fbeta", "credal", "hierarchical"):
            what = ", ".join(given) if given else f"--score {args.score}"
            raise ValueError(f"--p-values is for the ranked scores, marginal or --class-conditional; not with {what}")
    P = load_scores(args.probs, key=args.key)
    u = utility(args.utility) if args.utility is not None else None
    if args.method == "conformal":
        sets, what = _conformal(args, P)
    elif args.method == "risk":
        sets, what = _risk(args, P)
    elif args.method == "conditional":
        sets, what = _conditional(args, P)
    elif args.method == "hierarchical":
        sets, what = _hierarchical(args, P, u)
    else:
        try:
            sets = predict_sets(P, u, n_jobs=args.jobs)
        except ValueError as exc:  # a negative score or a zero row: name the file it came from
            raise ValueError(f"{args.probs}: {exc}") from None
        what = repr(args.utility)
    save_sets(output, sets)
    eu = "" if sets.expected_utility is None else f", mean expected utility {sets.expected_utility.mean():.4f}"
    print(f"{len(sets)} sets for {what} -> {args.output} (mean size {sets.sizes.mean():.3f}{eu})")
    return 0


def _evaluate(args) -> int:
    _check_inputs(args, (("sets", "sets"), ("labels", "labels")))
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
    from .config import check_config, check_yaml, load_yaml, merge_configs, replace_file_lists, validate_config

    _check_inputs(args, (("files", "files"), ("--schema", "schema")))
    merged: dict = {}
    loaded = []
    for path in args.files:
        check_yaml(path)
        loaded.append(load_yaml(path) or {})
        merged = merge_configs(merged, loaded[-1])
    replace_file_lists(merged, loaded[1:])  # as the Snakefile: a later file's `files:` replaces the first's
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
    p = sub.add_parser("predict", help="sets from a probability matrix (Bayes-optimal, conformal or hierarchical)")
    p.add_argument("probs", help="probabilities (.npy, .npz, .csv, .tsv, .txt), one row per sample")
    p.add_argument("--method", "-m", choices=sorted(_METHOD_OPTIONS), default="bayes",
                   help="bayes: the Bayes-optimal set of --utility (default); conformal: split-conformal sets "
                        "calibrated on --calibration/--calibration-labels; hierarchical: the best union of at most "
                        "--max-nodes nodes of --hierarchy under --utility; risk: conformal risk control, "
                        "E[--loss] <= --alpha; conditional: coverage 1 - epsilon within every --group-columns group")
    p.add_argument("--utility", "-u", help="utility spec, e.g. 'fbeta:beta=1' (bayes, hierarchical)")
    p.add_argument("--output", "-o", required=True, help="output .npz (with expected utilities) or .csv/.txt")
    p.add_argument("--key", help="array name inside an .npz input")
    p.add_argument("--jobs", "-j", type=int, default=1, help="threads (-1: all cores; bayes)")
    g = p.add_argument_group("conformal")
    g.add_argument("--epsilon", type=float, help="significance level in (0, 1): coverage >= 1 - epsilon")
    g.add_argument("--score", choices=("lac", "aps", "raps", "saps", "topk", "margin", "fbeta", "credal",
                                       "hierarchical"),
                   help="conformity score (default lac; aps, raps, saps: randomised unless --deterministic; "
                        "fbeta/credal: Bayes-optimal sets with a coverage guarantee; "
                        "hierarchical: unions of at most --max-nodes nodes of --hierarchy)")
    g.add_argument("--class-conditional", action="store_true",
                   help="one threshold per class (lac, aps, raps, saps, topk, margin)")
    g.add_argument("--clustered", action="store_true",
                   help="one threshold per cluster of classes (Ding et al. 2023; few calibration rows per class)")
    g.add_argument("--rc3p", action="store_true",
                   help="one threshold and one rank limit per class (RC3P, Shi et al. 2024)")
    g.add_argument("--deterministic", action="store_true",
                   help="aps, raps, saps: the deterministic score (it covers more than 1 - epsilon)")
    g.add_argument("--randomized", action="store_true",
                   help="topk: the randomised score rank - u (TorchCP's default; exact coverage)")
    g.add_argument("--seed", type=int, help="seed of the randomised scores and the clustered split (default 0)")
    g.add_argument("--k-reg", type=int, help="raps: ranks not penalised (default 1)")
    g.add_argument("--lam", type=float, help="raps: penalty per rank beyond --k-reg (default 0); "
                                             "saps: the weight of a rank (default 0.2)")
    g.add_argument("--gamma", type=float, help="credal: the family's fixed gamma > 0")
    g.add_argument("--empty", choices=("top1", "keep"),
                   help="an empty set becomes the top class or stays (default: stays for randomised scores, "
                        "else the top class)")
    g.add_argument("--calibration", help="calibration probabilities (same formats as probs)")
    g.add_argument("--p-values", metavar="FILE",
                   help="conformal: also write every class's conformal p-value (.npy, rows x classes; the set at "
                        "--epsilon is the classes whose p-value is above it, or the top class when none is and "
                        "--empty top1): marginal or --class-conditional, the ranked scores")
    g.add_argument("--smoothed", action="store_true",
                   help="conformal, --p-values: smoothed p-values (ties broken by a uniform per row: exactly "
                        "uniform for the true class under exchangeability)")
    g.add_argument("--calibration-labels", help="calibration class indices (.npy or text, one per line)")
    g.add_argument("--calibration-key", help="array name inside an .npz calibration file")
    g.add_argument("--weights", help="conformal, covariate shift: the test rows' likelihood ratios (one per line or "
                                     ".npy), with --calibration-weights")
    g.add_argument("--calibration-weights", help="conformal, covariate shift: the calibration rows' likelihood ratios")
    g.add_argument("--label-shift", choices=("bbse", "em"),
                   help="conformal, label shift: estimate the class weights q(y)/p(y) from the rows of probs (BBSE or "
                        "EM) and calibrate one weighted threshold per class (Podkopaev and Ramdas 2021)")
    g.add_argument("--class-weights", help="conformal, label shift: the class weights q(y)/p(y), one per class (one "
                                           "per line or .npy)")
    g.add_argument("--label-noise", help="conformal, noisy calibration labels: a uniform noise rate in [0, 1), or a "
                                         "file of the K x K transition matrix P(noisy l | clean k); the sets cover the "
                                         "clean label")
    g = p.add_argument_group("risk control and group columns")
    g.add_argument("--alpha", type=float, help="risk: the level of the expected loss")
    g.add_argument("--loss", choices=("miscoverage", "class_cost", "hierarchical"),
                   help="risk: the loss (default miscoverage; class_cost needs --cost, hierarchical --hierarchy)")
    g.add_argument("--cost", help="risk, class_cost: one cost per class (one per line or .npy)")
    g.add_argument("--group-columns", help="conditional: the test rows' 0/1 group indicators (one row per line, "
                                           "columns split at spaces or commas, or a 2-D .npy)")
    g.add_argument("--calibration-group-columns", help="conditional: the calibration rows' group indicators")
    g = p.add_argument_group("hierarchical")
    g.add_argument("--hierarchy", help="class tree over the columns, named 0 .. K-1 (default format: edges, "
                                       "'parent child' per line)")
    g.add_argument("--hierarchy-format", choices=("edges", "lshtc_paths", "nested_lists", "taxonomy"),
                   help="format of --hierarchy (default edges)")
    g.add_argument("--max-nodes", type=int, help="largest number of tree nodes a set may join (default 1)")
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
    p = sub.add_parser("report", help="the pipeline's HTML report for a model's outputs (probabilities or logits)",
                       description="Runs the project's workflow on one model_outputs dataset per --test (each model) and "
                                   "writes DIR/report.html. The guide to this command and its page: "
                                   "'svbop docs your_model' (it comes with the package; 'svbop docs' lists every "
                                   "page and where they are).")
    p.add_argument("--test", nargs=2, metavar=("SCORES", "LABELS"), required=True, action="append",
                   help="the test rows' scores (.npy, .npz, .csv, .tsv) and labels (.npy, or one per line); repeat it "
                        "for several models scored on the same rows (one --name each, in the same order)")
    p.add_argument("--validation", nargs=2, metavar=("SCORES", "LABELS"), action="append",
                   help="rows for the temperature and the threshold baseline (default: split off --test); with "
                        "several models, once for all or once per --test")
    p.add_argument("--calibration", nargs=2, metavar=("SCORES", "LABELS"), action="append",
                   help="rows for the conformal methods (default: split off --test); with several models, once for "
                        "all or once per --test")
    p.add_argument("--outputs", choices=("auto", "logits", "probabilities"), default="auto",
                   help="what the scores are (auto: probabilities when every row is non-negative and sums to 1)")
    p.add_argument("--calibrate", choices=("temperature", "venn_abers", "conftemp", "none"), default="temperature",
                   help="temperature scaling fitted on the validation rows before any set is made (default), or"
                        " one-vs-rest inductive Venn-Abers (venn_abers), or conformal temperature scaling"
                        " (conftemp: ConfTS, as TorchCP fits it), or none")
    p.add_argument("--class-names", help="one class name per line, in the scores' column order")
    p.add_argument("--hierarchy", help="a class tree over the classes (adds hierarchy-restricted sets)")
    p.add_argument("--hierarchy-format", choices=("edges", "lshtc_paths", "nested_lists", "taxonomy"),
                   help="format of --hierarchy (default edges)")
    for part in ("test", "validation", "calibration"):
        p.add_argument(f"--{part}-groups", metavar="GROUPS",
                       help=f"one group per {part} row (.npy, or one per line: e.g. a site or a subpopulation); "
                            "adds conformal sets calibrated per group and the coverage of each group"
                            + ("; groups go with every part of rows you give: with --test-groups, also "
                               "--validation-groups when you give --validation and --calibration-groups when you "
                               "give --calibration (each part's rows need their groups)" if part == "test" else ""))
    row_files = {"weights": "likelihood ratio w(x) = dP_test(x) / dP_calibration(x) (.npy, or one number per line; "
                            "finite, >= 0): adds weighted conformal sets under covariate shift and their coverage "
                            "under the weights",
                 "group-columns": "membership in each group (.npy of 0/1, or CSV/TSV of 0/1 with a header naming "
                                  "the groups; a row may be in several): adds conformal sets covering in every group "
                                  "and each group's coverage"}
    for option, what in row_files.items():
        for part in ("test", "validation", "calibration"):
            names = (f"--{option}", f"--test-{option}") if part == "test" else (f"--{part}-{option}",)
            p.add_argument(*names, dest=f"{part}_{option.replace('-', '_')}", metavar=option.upper().replace("-", "_"),
                           help=f"per {part} row, its {what}; like the groups, it goes with every part of rows you give "
                                f"(with --{option}, also --validation-{option} when you give --validation and "
                                f"--calibration-{option} when you give --calibration)" if part == "test"
                           else f"as --{option}, for the --{part} rows")
    p.add_argument("--epsilon", type=float, action="append",
                   help="significance level of the conformal methods (repeatable; default 0.1)")
    p.add_argument("--label-shift", choices=("bbse", "em"),
                   help="label shift: estimate the class weights q(y)/p(y) from the test rows' outputs (bbse: "
                        "Lipton et al. 2018; em: Saerens et al. 2002) and add LAC and APS sets calibrated under them "
                        "(Podkopaev and Ramdas 2021); the page shows the estimated class frequencies beside the "
                        "calibration ones")
    p.add_argument("--name", action="append",
                   help="the model's key in the report (default: model); once per --test, in the same order")
    p.add_argument("--title", help="the dataset's title in the report")
    p.add_argument("--ordered", action="store_true",
                   help="the test rows are in time order: adds the page's stream section (conformal test "
                        "martingales with their alarm, and the windowed coverage of ACI, DtACI and PID)")
    p.add_argument("--test-times", metavar="TIMES",
                   help="with --ordered: one time per test row (numbers or ISO dates, .npy or one per line), "
                        "checked to be in order")
    p.add_argument("--stream-window", type=int, metavar="N",
                   help="with --ordered: the rows of a coverage window (default 500)")
    p.add_argument("--cores", type=int, default=1, help="Snakemake's --cores, >= 1 (default 1)")
    p.add_argument("--output", "-o", required=True, metavar="DIR",
                   help="folder for report.html, tables/, figures/, svbop_report.log and .yaml; the workflow's "
                        "working files go into DIR/.svbop (a second run reuses them)")
    p.set_defaults(func=_report)
    p = sub.add_parser("docs", help="the documentation that comes with svbop: list its pages, or print one",
                       description="Without PAGE: where svbop's documentation is on this machine (it comes with the "
                                   "package, from a wheel too) and its pages. With PAGE (e.g. your_model): that page, "
                                   "as Markdown, on standard output.")
    p.add_argument("page", nargs="?", help="a page's name, e.g. your_model (the guide to 'svbop report')")
    p.set_defaults(func=_docs)
    p = sub.add_parser("stream", help="adaptive conformal sets for rows in order (coverage under drift)",
                       description="Adaptive conformal inference (Gibbs and Candes 2021): calibrated once on "
                                   "--calibration, then each row of PROBS, in order, gets the set at the working "
                                   "level, and its label (LABELS) moves the level. Writes the sets and, per row, "
                                   "the level, the set size, whether it covered, and the running coverage.")
    p.add_argument("probs", help="the stream's probabilities (.npy, .npz, .csv, .tsv, .txt), rows in order")
    p.add_argument("labels", help="the stream's class indices (.npy or text, one per line), same order")
    p.add_argument("--calibration", required=True, help="calibration probabilities (same formats)")
    p.add_argument("--calibration-labels", required=True, help="calibration class indices")
    p.add_argument("--epsilon", type=float, required=True, help="target miscoverage in (0, 1)")
    p.add_argument("--score", choices=("lac", "aps", "raps", "saps", "topk", "margin", "fbeta", "credal"),
                   default="lac", help="conformity score (default lac; deterministic: the level adapts)")
    p.add_argument("--step", type=float, default=0.02, help="the level's learning rate in (0, 1] (default 0.02)")
    p.add_argument("--method", choices=("aci", "dtaci", "pid"), default="aci",
                   help="aci (default); dtaci: experts over several steps, reweighted (Gibbs and Candes 2024); pid: "
                        "ACI plus an integrator of the errors (Angelopoulos et al. 2023); dtaci and pid: the ranked "
                        "scores only")
    p.add_argument("--seed", type=int, help="dtaci: the seed of the expert drawn for each row (default 0)")
    p.add_argument("--martingale", choices=("simple_jumper", "power"),
                   help="also an exchangeability alarm: this conformal test martingale over the online p-values of "
                        "the rows' LAC scores (calibration rows first); adds the columns p_value and martingale to "
                        "--coverage and reports the first row at or above 1/--delta")
    p.add_argument("--delta", type=float, default=0.01,
                   help="--martingale: the alarm's level in (0, 1) (alarm at 1/delta; default 0.01)")
    p.add_argument("--k-reg", type=int, help="raps: ranks not penalised (default 1)")
    p.add_argument("--lam", type=float, help="raps: penalty per rank beyond --k-reg (default 0); "
                                             "saps: the weight of a rank (default 0.2)")
    p.add_argument("--gamma", type=float, help="credal: the family's fixed gamma > 0")
    p.add_argument("--empty", choices=("top1", "keep"), default="top1",
                   help="an empty set at a level below 1 becomes the top class (default) or stays empty")
    p.add_argument("--key", help="array name inside an .npz input")
    p.add_argument("--calibration-key", help="array name inside an .npz calibration file")
    p.add_argument("--output", "-o", required=True, help="the sets (.npz, or .csv/.txt)")
    p.add_argument("--coverage", required=True, help="per-row TSV: row, alpha, size, covered, running_coverage")
    p.set_defaults(func=_stream)
    return ap


def _stream(args) -> int:
    """``svbop stream``: adaptive conformal sets for rows taken in order, and the running coverage."""
    from .conformal import AdaptiveConformalSetPredictor
    from .io import atomic_path
    from .metrics import running_coverage

    inputs = (("probs", "probs"), ("labels", "labels"), ("--calibration", "calibration"),
              ("--calibration-labels", "calibration_labels"))
    _check_inputs(args, inputs)
    output = _output_path(args, args.output, "--output", inputs)
    coverage_path = _output_path(args, args.coverage, "--coverage", inputs)
    if os.path.realpath(output) == os.path.realpath(coverage_path):
        raise ValueError(f"{args.coverage}: --coverage is the --output file; choose another name")
    aci = AdaptiveConformalSetPredictor(
        args.epsilon, score=args.score, step=args.step, k_reg=1 if args.k_reg is None else args.k_reg,
        lam=args.lam, empty=args.empty, gamma=args.gamma, method=getattr(args, "method", "aci"),
        random_state=0 if getattr(args, "seed", None) is None else args.seed,
    )
    alarm = None
    if getattr(args, "martingale", None) is not None:
        from .conformal import ExchangeabilityMartingale

        alarm = ExchangeabilityMartingale(args.martingale, delta=args.delta)  # --delta checked before any work
    P_cal = load_scores(args.calibration, key=args.calibration_key)
    y_cal = _load_labels(args.calibration_labels)
    check_labels(y_cal, P_cal.shape, name=args.calibration_labels)
    P = load_scores(args.probs, key=args.key)
    if P_cal.shape[1] != P.shape[1]:
        raise ValueError(f"{args.calibration}: {P_cal.shape[1]} classes, but {args.probs} has {P.shape[1]}")
    y = _load_labels(args.labels)
    check_labels(y, P.shape, name=args.labels)
    try:
        aci.fit(P_cal, y_cal)
    except ValueError as exc:
        raise ValueError(f"{args.calibration}: {exc}") from None
    try:
        sets = aci.update(P, y)
    except ValueError as exc:
        raise ValueError(f"{args.probs}: {exc}") from None
    save_sets(output, sets)
    hit = sets.contains(y)
    running = running_coverage(sets, y)
    if alarm is not None:
        from .conformal import online_p_values
        from .conformal.scores import _lac_scores

        p = online_p_values(np.concatenate([_lac_scores(P_cal, y_cal), _lac_scores(P, y)]), n_initial=y_cal.size,
                            random_state=0 if args.seed is None else args.seed)
        path = alarm.run(p)
    with atomic_path(coverage_path) as tmp, open(tmp, "w") as fh:
        fh.write("row\talpha\tsize\tcovered\trunning_coverage" + ("\tp_value\tmartingale" if alarm else "") + "\n")
        for i, (a, size, h, r) in enumerate(zip(aci.alphas_, sets.sizes, hit, running)):
            extra = f"\t{p[i]:.6g}\t{path[i]:.6g}" if alarm is not None else ""
            fh.write(f"{i}\t{a:.6g}\t{size}\t{int(h)}\t{r:.6f}{extra}\n")
    cov = float(hit.mean()) if hit.size else float("nan")
    print(f"{len(sets)} sets of adaptive conformal {aci.score} at epsilon={args.epsilon} (step {aci.step:g},"
          f" {len(y_cal)} calibration rows) -> {args.output}; coverage {cov:.4f} (target {1 - args.epsilon:.4f}),"
          f" mean size {sets.sizes.mean() if len(sets) else float('nan'):.3f}, final level {aci.alpha_:.4f};"
          f" running coverage -> {args.coverage}")
    if alarm is not None:
        print(f"exchangeability ({args.martingale} martingale, delta={args.delta:g}): " + (
            f"first alarm at row {alarm.alarm_} (martingale >= {1 / args.delta:g})" if alarm.alarm_ >= 0
            else f"no alarm (largest martingale {float(path.max()) if path.size else 1.0:.3g} < {1 / args.delta:g})"))
    return 0


def _docs(args) -> int:
    """``svbop docs [PAGE]``: the packaged documentation's folder and pages, or one page's text."""
    from ._resources import doc_pages, docs_folder

    pages = doc_pages()
    if args.page is None:
        print(f"svbop's documentation: {docs_folder()}")
        width = max(map(len, pages), default=0)
        for name, (_, title) in pages.items():
            print(f"  {name:<{width}}  {title}")
        print("Print a page with: svbop docs PAGE (e.g. svbop docs your_model)")
        return 0
    name = args.page.removesuffix(".md")
    if name not in pages:
        raise ValueError(f"PAGE: no page {args.page!r}; the pages are {', '.join(pages)}")
    sys.stdout.write(pages[name][0].read_text(encoding="utf-8"))
    return 0


def _report(args) -> int:
    from .report.run import main as report_main

    return report_main(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"svbop: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # unreadable or unwritable files: the file and the system's reason
        where = f"{exc.filename}: " if exc.filename else ""
        fix = "; free some space and rerun (finished steps are kept)" if exc.errno == errno.ENOSPC else ""
        print(f"svbop: error: {where}{exc.strerror or exc}{fix}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's status for SIGINT; nothing half-written is kept
        print("svbop: interrupted; rerun the same command to go on", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
