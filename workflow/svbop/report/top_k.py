"""``svbop report --test top_k.npz labels.npy``: a page about a model that gives each row its top-k
classes only (:class:`svbop.SparseOutputs`), at any ``K``, without the ``n x K`` matrix.

The workflow's page needs every class's score (temperature scaling, Bayes-optimal sets under a
utility, class-conditional thresholds); top-k outputs go through this shorter path instead, in one
process: the conformal sets whose score is defined on truncated outputs (a class outside the top-k
has probability 0; :mod:`svbop.conformal.lazy`), each at every ``--epsilon``, calibrated on the
``--calibration`` rows or on rows split off the test rows at random (seeded), with their coverage,
size and time.  Memory follows the top-k arrays: two copies of a row block at most beside them.
"""

from __future__ import annotations

import csv
import html
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from ..sparse_outputs import SparseOutputs, is_sparse_outputs_file

__all__ = ["TOP_K_METHODS", "NOT_ON_TOP_K", "is_top_k_run", "run_top_k", "main_top_k"]

#: The sets svbop report makes from top-k outputs: (key, label, ConformalSetPredictor options).
TOP_K_METHODS = (
    ("lac", "LAC (the paper's ICP)", {"score": "lac"}),
    ("aps", "APS (randomised)", {"score": "aps"}),
    ("raps", "RAPS (randomised, k_reg 1, lam 0.01)", {"score": "raps", "k_reg": 1, "lam": 0.01}),
    ("saps", "SAPS (randomised, lam 0.2)", {"score": "saps"}),
    ("topk", "top-k (randomised)", {"score": "topk", "randomized": True}),
)
#: What cannot be run on truncated outputs, and why (one line each, on the page and in the log).
NOT_ON_TOP_K = (
    "temperature scaling, Venn-Abers and ECE/NLL: they need every class's score (the page shows the outputs as given)",
    "Bayes-optimal sets under a utility (SVBOP-Full) and their coverage-guaranteed F-beta/credal sets: they weigh "
    "the whole distribution, which top-k outputs do not hold",
    "margin sets: a class outside the top-k scores the top probability, so every row whose top probability is"
    " below q would hold all K classes (svbop.conformal runs them; the page leaves them out)",
    "class-conditional, clustered and RC3P thresholds: at this K most classes have no calibration rows (every class"
    " in every set); conformal risk control, groups, weights and hierarchies: give the full outputs",
)
#: Calibration rows split off the test rows when none are given.
_CALIBRATION_SHARE = 0.1
_REFUSED = ("validation", "hierarchy", "class_names", "test_groups", "validation_groups", "calibration_groups",
            "test_weights", "validation_weights", "calibration_weights", "test_group_columns",
            "validation_group_columns", "calibration_group_columns", "label_shift", "ordered", "test_times",
            "stream_window")


def is_top_k_run(models) -> bool:
    """Whether the first model's test scores are a top-k ``.npz`` (``indices``, ``values``, ``K``)."""
    return is_sparse_outputs_file(models[0]["test"][0])


def _labels(path: str, n: int, K: int, flag: str) -> np.ndarray:
    from .._row_checks import check_labels
    from ..datasets.outputs import _read_labels

    y = _read_labels(Path(path))
    if y.size != n:
        raise ValueError(f"{flag}: {path}: {y.size:,} labels but the top-k file has {n:,} rows")
    return check_labels(y, (n, K), f"{flag}: {path}: labels")


def _outputs(path: str, flag: str, kind: str | None) -> SparseOutputs:
    if not is_sparse_outputs_file(path):
        raise ValueError(f"{flag}: {path}: not top-k outputs (an .npz with indices, values and K), while --test is;"
                         " give every part in the same form")
    try:
        return SparseOutputs.load(path, kind)
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None


def run_top_k(out: Path, test, calibration=None, *, epsilons=(0.1,), outputs: str = "auto", name: str = "model",
              title: str | None = None, seed: int = 0, echo=sys.stderr) -> Path:
    """Read and check the files, make every set of :data:`TOP_K_METHODS` at every level, write the page."""
    t0 = time.perf_counter()
    kind = None if outputs == "auto" else outputs
    src = _outputs(test[0], "--test", kind)
    n, K = src.shape
    y = _labels(test[1], n, K, "--test")
    split = "given"
    if calibration is not None:
        cal = _outputs(calibration[0], "--calibration", kind)
        if cal.n_classes != K:
            raise ValueError(f"--calibration: {calibration[0]}: K = {cal.n_classes:,} classes but --test has {K:,}")
        y_cal = _labels(calibration[1], len(cal), K, "--calibration")
        test_src, y_test = src, y
    else:  # rows split off the test rows at random (seeded): exchangeable with the rest
        n_cal = max(1, int(round(_CALIBRATION_SHARE * n)))
        if n - n_cal < 1:
            raise ValueError(f"--test: {test[0]}: {n} rows cannot be split into calibration and test rows; give "
                             "--calibration")
        perm = np.random.default_rng(seed).permutation(n)
        cal_rows, test_rows = np.sort(perm[:n_cal]), np.sort(perm[n_cal:])
        cal, y_cal = src.take(cal_rows), y[cal_rows]
        test_src, y_test = src.take(test_rows), y[test_rows]
        del src
        split = f"split off the test rows at random (seed {seed}): {n_cal:,} calibration rows, {n - n_cal:,} test rows"
    print(f"svbop report: top-k outputs: {len(test_src):,} test rows, "
          f"{len(cal):,} calibration rows, k = {test_src.k}, K = {K:,} ({time.perf_counter() - t0:.1f} s)", file=echo)
    inside = float(test_src.holds(y_test).mean())
    from ..conformal import ConformalSetPredictor

    rows = []
    for key, label, options in TOP_K_METHODS:
        for eps in epsilons:
            model = ConformalSetPredictor(eps, random_state=seed, **options)
            t = time.perf_counter()
            model.fit(cal, y_cal)
            fit_s = time.perf_counter() - t
            t = time.perf_counter()
            try:
                sets, failure = model.predict(test_src), ""
            except ValueError as exc:  # sets past the size bound: every class on many rows
                sets, failure = None, str(exc)
            pred_s = time.perf_counter() - t
            row = {"method": key, "label": label, "epsilon": eps, "q": model.quantile_,
                   "coverage_pct": float("nan"), "mean_size": float("nan"), "every_class_pct": float("nan"),
                   "fit_ms_per_row": 1e3 * fit_s / len(y_cal), "ms_per_row": 1e3 * pred_s / len(y_test),
                   "note": ""}
            if sets is not None:
                row.update(coverage_pct=100 * float(sets.contains(y_test).mean()),
                           mean_size=float(sets.sizes.mean()),
                           every_class_pct=100 * float((sets.sizes == K).mean()))
                if row["every_class_pct"] > 0:
                    row["note"] = "rows holding every class: the threshold reaches the classes outside the top-k"
            else:
                row["note"] = failure
            rows.append(row)
            print(f"svbop report: {label} at epsilon {eps:g}: coverage {row['coverage_pct']:.2f} %, mean size "
                  f"{row['mean_size']:.2f}, {row['ms_per_row']:.4f} ms a row", file=echo)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    (out / ".svbop").mkdir(exist_ok=True)
    _atomic(out / "tables" / "top_k_sets.csv", _csv(rows, name))
    record = {"kind": "top_k", "name": name, "K": K, "k": test_src.k, "n_test": len(y_test), "n_calibration": len(y_cal),
              "calibration": split, "label_in_top_k": inside, "methods": rows, "not_run": list(NOT_ON_TOP_K)}
    _atomic(out / ".svbop" / "top_k.json", json.dumps(record, indent=1, default=float) + "\n")
    page = out / "report.html"
    _atomic(page, _page(record, title or f"Conformal sets of {name} from its top-{test_src.k} outputs"))
    return page


def _atomic(path: Path, text: str) -> None:
    from ..io import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _csv(rows, name) -> str:
    import io

    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["model", "method", "epsilon", "q", "coverage_pct", "mean_size", "every_class_pct", "fit_ms_per_row",
                "ms_per_row", "note"])
    for r in rows:
        w.writerow([name, r["method"], r["epsilon"], f"{r['q']:.10g}", f"{r['coverage_pct']:.4f}",
                    f"{r['mean_size']:.4f}", f"{r['every_class_pct']:.4f}", f"{r['fit_ms_per_row']:.5f}",
                    f"{r['ms_per_row']:.5f}", r["note"]])
    return buf.getvalue()


def _page(record, title) -> str:
    e = html.escape
    body = []
    for r in record["methods"]:
        target = 100 * (1 - r["epsilon"])
        cov = "failed" if math.isnan(r["coverage_pct"]) else f"{r['coverage_pct']:.2f} %"
        body.append(f"<tr><td>{e(r['label'])}</td><td>{r['epsilon']:g} (target {target:.1f} %)</td>"
                    f"<td>{r['q']:.4g}</td><td>{cov}</td><td>{r['mean_size']:.2f}</td>"
                    f"<td>{r['every_class_pct']:.2f} %</td><td>{r['ms_per_row']:.4f}</td>"
                    f"<td class='note'>{e(r['note'])}</td></tr>")
    not_run = "".join(f"<li>{e(t)}</li>" for t in record["not_run"])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}}
table{{border-collapse:collapse;width:100%;table-layout:auto}}td,th{{border-bottom:1px solid #ddd;padding:4px 8px;
text-align:right;overflow-wrap:anywhere}}td:first-child,th:first-child,td.note{{text-align:left}}
td.note{{max-width:24em;font-size:90%}}</style></head><body>
<h1>{e(title)}</h1>
<p>{record['n_test']:,} test rows, {record['n_calibration']:,} calibration rows ({e(record['calibration'])});
each row gives its top {record['k']} of K = {record['K']:,} classes. A class outside a row's top-k has probability 0
for every score below, so every coverage promise holds for that score function; a threshold that reaches
those classes puts all of them in the set (shown as rows holding every class).
The label is among the top-{record['k']} in {100 * record['label_in_top_k']:.2f} % of the test rows: no set that stays
inside the top-k can cover more.</p>
<h2>Conformal sets from the top-k outputs</h2>
<table><thead><tr><th>method</th><th>&epsilon;</th><th>q</th><th>coverage</th><th>mean size</th>
<th>rows holding every class</th><th>ms a row</th><th>note</th></tr></thead><tbody>
{''.join(body)}
</tbody></table>
<h2>Not run on top-k outputs</h2><ul>{not_run}</ul>
<p>Tables: <code>tables/top_k_sets.csv</code>. Made by <code>svbop report</code> (svbop.report.top_k).</p>
</body></html>
"""


def main_top_k(args, models) -> int:
    """``svbop report`` on top-k outputs: checks, then :func:`run_top_k` (the output folder checked by the
    caller, :func:`svbop.report.run.main`)."""
    if len(models) > 1:
        raise ValueError("--test: top-k outputs are reported one model at a time (give one --test)")
    given = [o for o in _REFUSED if getattr(args, o, None)]
    if given:
        flags = ", ".join("--" + o.replace("_", "-") for o in given)
        raise ValueError(f"{flags}: not with top-k outputs (--test {models[0]['test'][0]} holds each row's top-k "
                         "classes); give the full outputs for these")
    out = Path(args.output).expanduser()  # checked by the caller (svbop.report.run.main)
    if getattr(args, "calibrate", "temperature") != "temperature" and args.calibrate != "none":
        raise ValueError(f"--calibrate {args.calibrate}: not with top-k outputs (it needs every class's score)")
    print("svbop report: top-k outputs: no recalibration (temperature scaling needs every class's score); "
          "the conformal sets defined on top-k outputs follow", file=sys.stderr)
    t0 = time.perf_counter()
    page = run_top_k(out, models[0]["test"], models[0]["calibration"], epsilons=args.epsilon or [0.1],
                     outputs=args.outputs, name=models[0]["name"], title=args.title)
    print(f"svbop report: {page} ({time.perf_counter() - t0:.0f} s)")
    return 0
