"""The page about a model: what a run whose every dataset is a model's outputs (``format.kind:
model_outputs``, ``svbop report``) shows instead of the paper's sections.

Three things a practitioner asks of their model's sets, each computed here from the pipeline's files:

- **which sets to use** (:func:`choose_sets`): for each coverage level asked (``1 - epsilon``), the
  methods whose *promise* meets it (a guaranteed marginal coverage >= the level: conformal sets,
  Bayes-optimal sets with a coverage guarantee), smallest mean set size first; apart from them the
  methods without a guarantee that reached the level on the test rows; each with its test coverage, an
  estimate, and its Clopper-Pearson interval; for each utility the method with the largest mean
  utility (``tables/choose_sets.csv``);
- **the classes** (:func:`describe_model`): every method's coverage of each class, with each class's
  test and calibration rows, by name;
- **example rows** (:func:`describe_model`): a handful of test rows (the most uncertain, a wrong
  top-1, a confident one) with their most probable classes and every kind of set.

The choice reads the numbers as the page's table of every kind of set shows them (two decimals), so
the page, its table and the CSV agree to the digit.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import unescape_frame
from .names import utility_label, utility_name

__all__ = ["BASIS_GUARANTEED", "BASIS_REACHED", "BASIS_UTILITY", "CHOOSE_COLUMNS", "COVERAGE_CONFIDENCE",
           "CLASS_COVERAGE_COLUMNS", "EXAMPLES", "choose_sets", "clopper_pearson", "coverage_goal", "describe_model", "model_context",
           "plain_name", "plot_class_coverage", "promised_coverage", "read_class_coverage", "read_examples",
           "utility_goal", "write_choose_sets", "write_class_coverage", "write_every_set"]

#: The columns of ``tables/choose_sets.csv``: ``model`` names the model (with several models of one
#: ``svbop report``, their rows are one table); ``dataset`` (the same key), ``method`` and ``param`` are the keys
#: of ``tables/beyond_every_set.csv`` (a join on them gives every other number of the method); ``label`` is the
#: name the page shows.
CHOOSE_COLUMNS = ("model", "dataset", "goal", "rank", "basis", "method", "param", "label", "family", "n_test", "coverage_pct",
                  "coverage_low_pct", "coverage_high_pct", "mean_set_size", "utility_pct", "guaranteed_pct")

#: ``basis`` of a coverage goal's rows: the method promises the level (a guaranteed coverage >= it), or it has
#: no such promise and only reached the level on the test rows; of a utility goal's rows.
BASIS_GUARANTEED = "guaranteed"
BASIS_REACHED = "reached the level on these rows"
BASIS_UTILITY = "largest mean utility on these rows"

#: The confidence of the interval around each test coverage (Clopper-Pearson, two-sided).
COVERAGE_CONFIDENCE = 0.95

_SUB = re.compile(r"_\{([^}]*)\}")


def plain_name(name: str) -> str:
    """A display name as the page's text reads it: ``"SVBOP-Full-u_{F1}"`` -> ``"SVBOP-Full-uF1"`` (the
    text of :func:`svbop.report.names.html_name`'s ``u<sub>F1</sub>``)."""
    return _SUB.sub(r"\1", str(name))


def coverage_goal(epsilon: float) -> str:
    """``0.1`` -> ``"coverage >= 90%"``."""
    return f"coverage >= {round(100 * (1 - float(epsilon)), 6):g}%"


def utility_goal(spec_or_label: str) -> str:
    """``"fbeta:beta=1"`` -> ``"best F1 utility"``; ``"credal_2.2_1.2"`` -> ``"best u(δ=2.2,γ=1.2) utility"``."""
    inner = utility_name(spec_or_label)[len("u_{"):-1]
    return f"best {inner if re.fullmatch(r'F[0-9.]+|P|R', inner) else f'u({inner})'} utility"


def clopper_pearson(covered, n, confidence: float = COVERAGE_CONFIDENCE) -> tuple[np.ndarray, np.ndarray]:
    """The exact (Clopper-Pearson) binomial interval of a coverage, in %: ``covered`` of ``n`` test rows.

    Parameters
    ----------
    covered, n : int or array of int
        Rows whose set holds the true class, and rows.
    confidence : float
        Two-sided confidence, in (0, 1).

    Returns
    -------
    (low, high) : arrays of float
        The bounds in %; NaN where ``n`` is 0 or not known.
    """
    from scipy.stats import beta

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    k = np.asarray(covered, dtype=float)
    n = np.asarray(n, dtype=float)
    a = (1 - confidence) / 2
    with np.errstate(invalid="ignore"):
        ok = (n > 0) & (k >= 0) & (k <= n)
        low = np.where(ok & (k > 0), beta.ppf(a, np.maximum(k, 1), np.maximum(n - k + 1, 1)), 0.0)
        high = np.where(ok & (k < n), beta.ppf(1 - a, k + 1, np.maximum(n - k, 1)), 1.0)
    return np.where(ok, 100 * low, np.nan), np.where(ok, 100 * high, np.nan)


def promised_coverage(table: pd.DataFrame) -> pd.Series:
    """The marginal coverage (%) each method of a :func:`svbop.report.beyond.beyond_table` promises on new rows
    from the same distribution, NaN for none: its ``target_coverage_pct`` (1 - epsilon of a conformal method or a
    Bayes-optimal family calibrated to a coverage), unless it could not be calibrated (no numbers) or fell back to
    one marginal threshold within groups too small for their own (Mondrian sets that say "without coverage
    guaranteed": those groups, and so the whole, have no guarantee)."""
    target = pd.to_numeric(table["target_coverage_pct"], errors="coerce")
    calibrated = table["calibrated"].fillna("").astype(str) if "calibrated" in table.columns else pd.Series(
        "", index=table.index)
    broken = calibrated.str.contains("without coverage guaranteed") | calibrated.str.startswith("not ")
    broken |= pd.to_numeric(table["coverage_pct"], errors="coerce").isna()
    return target.where(~broken)


def _as_shown(values: pd.Series) -> pd.Series:
    """Numbers as the page writes them (``f"{v:.2f}"``, correctly rounded; numpy's ``round`` is not always)."""
    return pd.Series([float(f"{v:.2f}") if v == v else math.nan for v in values.astype(float)], index=values.index)


def choose_sets(table: pd.DataFrame, epsilons: Sequence[float], utilities: Sequence[str], *,
                runners_up: int = 2) -> pd.DataFrame:
    """Which sets to use: per goal, the choice and its runners-up.

    Parameters
    ----------
    table : DataFrame
        One dataset's table of every kind of set (:func:`svbop.report.beyond.beyond_table`):
        ``method`` (display name), ``key`` (``method/param``), ``family``, ``coverage_pct``, ``mean_size``,
        ``target_coverage_pct``, ``calibrated``, ``n_test`` and ``<label>_pct`` per utility; a method without
        numbers (not calibrated) is never chosen.
    epsilons : sequence of float
        The coverage levels asked, as significance levels: goal ``coverage >= 100 (1 - epsilon) %``
        (:func:`coverage_goal`). The choice is made by the methods' promises, never by the test rows: the
        methods whose guaranteed coverage (:func:`promised_coverage`) is at least the level, the smallest mean
        set size first (two decimals; then the exact size, then the larger promise); they are ranked 1, 2, ...
        (basis :data:`BASIS_GUARANTEED`). After them, apart, the methods with no such guarantee whose coverage
        of the test rows, at two decimals, reached the level (basis :data:`BASIS_REACHED`): what these rows
        show, not a promise about new rows.
    utilities : sequence of str
        Utility specs or labels: goal ``best <u> utility`` (:func:`utility_goal`), won by the
        largest mean utility (two decimals; then the smaller mean size).
    runners_up : int
        How many methods follow the first of each list.

    Returns
    -------
    DataFrame
        One row per (goal, rank), goals in the order: coverage levels from the lowest, then the
        utilities: ``goal``, ``rank`` (1 = the choice; the methods reached on the rows continue the count),
        ``basis``, ``method`` and ``param`` (the keys of the table of every kind of set), ``key``
        (``method/param``), ``label`` (:func:`plain_name` of the display name, as the page's text reads it),
        ``family``, ``n_test``, ``coverage_pct`` (two decimals) with ``coverage_low_pct`` and
        ``coverage_high_pct`` (its :data:`COVERAGE_CONFIDENCE` Clopper-Pearson interval: the test coverage is an
        estimate), ``mean_set_size`` (two decimals), ``utility_pct`` (the goal's utility, NaN for a coverage
        goal) and ``guaranteed_pct`` (the coverage the method promises, NaN if none).  A coverage goal no
        method promises has a row with ``rank`` 0, method ``"none"`` (basis guaranteed), before the methods
        that reached it on the rows.
    """
    t = table.reset_index(drop=True)
    cover = _as_shown(t["coverage_pct"])
    size = _as_shown(t["mean_size"])
    known = cover.notna() & size.notna()
    promise = promised_coverage(t)
    n_test = (pd.to_numeric(t["n_test"], errors="coerce") if "n_test" in t.columns
              else pd.Series(math.nan, index=t.index))
    covered = (pd.to_numeric(t["coverage_pct"], errors="coerce") * n_test / 100).round()
    low, high = clopper_pearson(covered.fillna(-1).to_numpy(), n_test.fillna(0).to_numpy())
    rows = []

    def none(goal: str) -> None:
        rows.append({"goal": goal, "rank": 0, "basis": BASIS_GUARANTEED, "method": "none", "param": "", "key": "",
                     "label": "none", "family": "", "n_test": math.nan, "coverage_pct": math.nan,
                     "coverage_low_pct": math.nan, "coverage_high_pct": math.nan, "mean_set_size": math.nan,
                     "utility_pct": math.nan, "guaranteed_pct": math.nan})

    def add(goal: str, order: list[int], basis: str, utility_col: str | None, first: int = 1) -> None:
        for rank, i in enumerate(order[: 1 + runners_up], start=first):
            method, _, param = str(t["key"].iloc[i]).partition("/")
            rows.append({"goal": goal, "rank": rank, "basis": basis, "method": method, "param": param,
                         "key": t["key"].iloc[i], "label": plain_name(t["method"].iloc[i]),
                         "family": t["family"].iloc[i], "n_test": float(n_test.iloc[i]),
                         "coverage_pct": float(cover.iloc[i]), "coverage_low_pct": float(low[i]),
                         "coverage_high_pct": float(high[i]), "mean_set_size": float(size.iloc[i]),
                         "utility_pct": float(_as_shown(t[utility_col]).iloc[i]) if utility_col else math.nan,
                         "guaranteed_pct": float(promise.iloc[i])})

    def by_promise(i: int) -> tuple:  # the smaller sets, then the larger promise
        return size.iloc[i], float(t["mean_size"].iloc[i]), -float(promise.iloc[i]), i

    def by_rows(i: int) -> tuple:  # the smaller sets, then the larger coverage of the rows
        return size.iloc[i], float(t["mean_size"].iloc[i]), -float(t["coverage_pct"].iloc[i]), i

    for eps in sorted({float(e) for e in epsilons}, reverse=True):
        target = round(100 * (1 - eps), 6)
        goal = coverage_goal(eps)
        promised = sorted((i for i in range(len(t)) if known.iloc[i] and promise.iloc[i] >= target - 1e-9),
                          key=by_promise)
        reached = sorted((i for i in range(len(t)) if known.iloc[i] and not promise.iloc[i] >= target - 1e-9
                          and cover.iloc[i] >= target - 1e-9), key=by_rows)
        if promised:
            add(goal, promised, BASIS_GUARANTEED, None)
        else:
            none(goal)
        add(goal, reached, BASIS_REACHED, None, first=1 + min(len(promised), 1 + runners_up))
    for spec in utilities:
        col = f"{utility_label(spec)}_pct"
        u = _as_shown(t[col]) if col in t.columns else pd.Series(np.nan, index=t.index)
        ok = [i for i in range(len(t)) if known.iloc[i] and u.notna().iloc[i]]
        ok.sort(key=lambda i: (-u.iloc[i], size.iloc[i], i))
        add(utility_goal(spec), ok, BASIS_UTILITY, col)
    return pd.DataFrame(rows, columns=["goal", "rank", "basis", "method", "param", "key", "label", "family", "n_test",
                                       "coverage_pct", "coverage_low_pct", "coverage_high_pct", "mean_set_size",
                                       "utility_pct", "guaranteed_pct"])


def write_every_set(path: str | os.PathLike, frame: pd.DataFrame) -> None:
    """``tables/beyond_every_set.csv``: :func:`svbop.report.beyond.read_beyond`'s rows, the keys
    (``dataset``, ``method``, ``param``) first, then the name the page shows (``label``), then the numbers;
    a text a spreadsheet would run as a formula is escaped (:func:`svbop.io.escape_frame`)."""
    from ..io import atomic_path, escape_frame
    from .names import method_name

    table = frame.copy()
    table.insert(3, "label", [plain_name(method_name(m, p)) for m, p in zip(frame["method"], frame["param"])])
    with atomic_path(path) as tmp:
        escape_frame(table).to_csv(tmp, index=False)


def write_choose_sets(path: str | os.PathLike, chosen: Mapping[str, pd.DataFrame]) -> None:
    """``tables/choose_sets.csv``: the columns of :data:`CHOOSE_COLUMNS`, numbers at two decimals.

    ``chosen`` maps each model (dataset) to its :func:`choose_sets`; the columns ``model`` and ``dataset``
    name it (several models of one ``svbop report`` are rows of one table, joinable on ``model`` and ``goal``).
    """
    from ..io import atomic_path, escape_frame

    frames = []
    for d, c in chosen.items():
        c = c.assign(model=str(d), dataset=str(d))
        frames.append(c[list(CHOOSE_COLUMNS)])
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(CHOOSE_COLUMNS))
    out["n_test"] = out["n_test"].astype("Int64")
    with atomic_path(path) as tmp:
        escape_frame(out).to_csv(tmp, index=False, float_format="%.2f")  # a name is never a formula


# --- classes and example rows ------------------------------------------------------------------------------

#: The example rows of the page, in order: key -> what it shows.
EXAMPLES = {
    "uncertain": "the most uncertain test row (the largest entropy of its probabilities)",
    "wrong_confident": "the most confident wrong top-1 (the largest top-1 probability among wrong ones)",
    "wrong_near": "a wrong top-1 whose true class is second",
    "typical": "a typical row (the median entropy)",
    "confident": "the most confident right top-1",
}


def _entropy_bits(P: np.ndarray, chunk: int = 4096) -> np.ndarray:
    out = np.empty(P.shape[0])
    for s in range(0, P.shape[0], chunk):
        B = np.asarray(P[s: s + chunk], dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[s: s + chunk] = -np.sum(np.where(B > 0, B * np.log2(np.where(B > 0, B, 1.0)), 0.0), axis=1)
    return out


def _pick_examples(P: np.ndarray, y: np.ndarray) -> dict[str, int]:
    """Row of each of :data:`EXAMPLES` (distinct rows; a kind with no such row is left out)."""
    from .._blocks import row_blocks

    n = len(y)
    top1, above = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    p1, p_true, H = np.empty(n, dtype=P.dtype), np.empty(n, dtype=P.dtype), np.empty(n)
    for lo, hi, B in row_blocks(P, 4096):  # by blocks of rows: a mapped P holds one block resident
        r = np.arange(hi - lo)
        top1[lo:hi] = np.argmax(B, axis=1)
        p1[lo:hi] = B[r, top1[lo:hi]]
        p_true[lo:hi] = B[r, y[lo:hi]]
        H[lo:hi] = _entropy_bits(B)
        above[lo:hi] = np.sum(B > p_true[lo:hi, None], axis=1)
    wrong = top1 != y
    # the true class second: no other class between top-1 and the truth
    second = wrong & (above == 1)
    picks: dict[str, int] = {}

    def take(name: str, mask: np.ndarray, key: np.ndarray) -> None:
        mask = mask.copy()
        mask[list(picks.values())] = False
        if mask.any():
            idx = np.flatnonzero(mask)
            picks[name] = int(idx[np.argmax(key[idx])])

    take("uncertain", np.ones(len(y), bool), H)
    take("wrong_confident", wrong, p1)
    take("wrong_near", second, -np.abs(H - np.median(H[second])) if second.any() else H)
    take("typical", np.ones(len(y), bool), -np.abs(H - np.median(H)))
    take("confident", ~wrong, p1)
    return {k: picks[k] for k in EXAMPLES if k in picks}


def describe_model(P, y, sets: Mapping[tuple[str, str], object], *, y_calibration=None,
                   class_names: Sequence[str] | None = None, file_rows=None, top: int = 5,
                   shown: int = 12, picks: Mapping[str, int] | None = None,
                   picked_on: str | None = None) -> tuple[pd.DataFrame, dict[str, object]]:
    """Every method's coverage of each class, and a handful of example rows with every kind of set.

    Parameters
    ----------
    P : array, shape (n, K)
        The test rows' probabilities (as the sets were made from).
    y : array of int, shape (n,)
        Their true classes.
    sets : mapping of (method, param) to SetPredictions
        Each method's test sets; read one at a time (a lazy :class:`svbop.io.SetFiles` is fine).
    y_calibration : array of int, optional
        The calibration rows' classes (their count per class is in the table).
    class_names : sequence of str, optional
        Class names in column order (default ``"0"``, ``"1"``, ...).
    file_rows : array of int, shape (n,), optional
        Each test row's line in the user's own file (0-based), shown beside the examples.
    top : int
        Classes listed per example row (the most probable).
    shown : int
        Classes listed of each example set (the most probable of it; the size says how many more).
    picks : mapping, optional
        The example rows, kind -> row (another model's, on the same rows: every model of a page then shows the
        same rows); default: this model's own (the most uncertain row, the most confident wrong one, ...).
    picked_on : str, optional
        The model ``picks`` were chosen on (each row's description says so).

    Returns
    -------
    classes : DataFrame
        One row per class: ``class``, ``name``, ``n_test``, ``n_calibration`` and one column
        ``method/param`` per method, its coverage (%) of the class's test rows (NaN without any).
    examples : dict
        ``{"rows": [{"kind", "what", "row", "file_row", "truth", "entropy_bits", "top": [[class,
        probability], ...], "sets": {"method/param": {"classes": [...], "size", "covered"}}}]}``.
    """
    from ..metrics import check_labels

    P = np.asarray(P)
    y = check_labels(y, P.shape)
    n, K = P.shape
    names = [str(c) for c in class_names] if class_names is not None else [str(c) for c in range(K)]
    if len(names) != K:
        raise ValueError(f"class_names: {len(names)} names for {K} classes")
    n_test = np.bincount(y, minlength=K)
    n_cal = (np.bincount(np.asarray(y_calibration, dtype=np.int64), minlength=K) if y_calibration is not None
             else np.zeros(K, dtype=np.int64))
    classes = pd.DataFrame({"class": np.arange(K), "name": names, "n_test": n_test, "n_calibration": n_cal[:K]})
    if picks is None:
        picks = _pick_examples(P, y)
    else:
        picks = {str(k): int(r) for k, r in picks.items()}
        bad = [r for r in picks.values() if not 0 <= r < n]
        if bad or any(k not in EXAMPLES for k in picks):
            raise ValueError(f"picks: rows 0 to {n - 1} of the kinds {', '.join(EXAMPLES)}; got {dict(picks)}")
    rows = list(picks.values())
    H = _entropy_bits(P[rows]) if rows else np.zeros(0)
    examples = []
    for j, (kind, r) in enumerate(picks.items()):
        order = np.argsort(-P[r], kind="stable")[:top]
        examples.append({"kind": kind, "what": EXAMPLES[kind] + (f" of {picked_on}" if picked_on else ""),
                         "row": int(r),
                         "file_row": int(file_rows[r]) if file_rows is not None else int(r), "truth": int(y[r]),
                         "entropy_bits": float(H[j]), "top": [[int(c), float(P[r, c])] for c in order], "sets": {}})
    coverage = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for key in sets:
            s = sets[key]  # one method's sets at a time
            hit = s.contains(y)
            coverage["/".join(map(str, key))] = 100.0 * np.bincount(y, weights=hit, minlength=K) / n_test
            for e in examples:
                members = np.asarray(s[e["row"]], dtype=np.int64)
                ranked = members[np.argsort(-P[e["row"], members], kind="stable")]
                e["sets"]["/".join(map(str, key))] = {"classes": [int(c) for c in ranked[:shown]],
                                                      "size": int(members.size),
                                                      "covered": bool(np.any(members == e["truth"]))}
            del s, hit
    classes = pd.concat([classes, pd.DataFrame(coverage)], axis=1)
    return classes, {"n_test": int(n), "K": int(K), "rows": examples}


#: The columns of ``tables/class_coverage_<dataset>.tsv``: one row per (class, method), the method by the keys
#: of ``tables/beyond_every_set.csv`` (``dataset``, ``method``, ``param``) and its display ``label``.
CLASS_COVERAGE_COLUMNS = ("dataset", "class", "name", "n_test", "n_calibration", "method", "param", "label",
                          "coverage_pct")
_CLASS_COLUMNS = ("class", "name", "n_test", "n_calibration")


def write_class_coverage(path: str | os.PathLike, classes: pd.DataFrame, dataset: str) -> None:
    """:func:`describe_model`'s table of classes (one column ``method/param`` per method) as the long table
    ``tables/class_coverage_<dataset>.tsv`` (:data:`CLASS_COVERAGE_COLUMNS`; coverage at four decimals)."""
    from ..io import atomic_path, escape_frame
    from .names import method_name

    keys = [c for c in classes.columns if c not in _CLASS_COLUMNS]
    long = classes.melt(id_vars=list(_CLASS_COLUMNS), value_vars=keys, var_name="key", value_name="coverage_pct")
    split = long["key"].str.partition("/")
    long = long.assign(dataset=str(dataset), method=split[0], param=split[2])
    labels = {k: plain_name(method_name(*k.partition("/")[::2])) for k in keys}
    long["label"] = long["key"].map(labels)
    with atomic_path(path) as tmp:  # a name is never a formula
        escape_frame(long[list(CLASS_COVERAGE_COLUMNS)]).to_csv(tmp, sep="\t", index=False, float_format="%.4f")


def read_class_coverage(path: str | os.PathLike) -> pd.DataFrame:
    """``tables/class_coverage_<dataset>.tsv`` back as :func:`describe_model`'s table: one row per class
    (``class``, ``name``, ``n_test``, ``n_calibration``) and one column ``method/param`` per method."""
    try:
        long = pd.read_csv(path, sep="\t", dtype={c: str for c in ("dataset", "name", "method", "param", "label")},
                           keep_default_na=False,
                           na_values={"coverage_pct": ["", "nan", "NaN"]})
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable class coverage table ({exc})") from None
    unescape_frame(long)  # the names as written (write_class_coverage escapes what a spreadsheet would run)
    missing = [c for c in CLASS_COVERAGE_COLUMNS if c not in long.columns]
    if missing:
        raise ValueError(f"{path}: missing column {missing[0]!r}")
    classes = long.drop_duplicates("class")[list(_CLASS_COLUMNS)].sort_values("class").reset_index(drop=True)
    long = long.assign(key=long["method"] + "/" + long["param"])
    wide = long.pivot(index="class", columns="key", values="coverage_pct")
    order = list(dict.fromkeys(long["key"]))
    wide = wide[order].reindex(classes["class"]).reset_index(drop=True)
    return pd.concat([classes, wide], axis=1)


def read_examples(path: str | os.PathLike) -> dict[str, object]:
    """The example rows written by the rule ``describe_model`` (naming the file when unreadable)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable examples file ({exc})") from None
    if not isinstance(data, dict) or "rows" not in data:
        raise ValueError(f"{path}: not an examples file (no 'rows')")
    return data


def plot_class_coverage(classes: pd.DataFrame, methods: Mapping[str, str], targets: Sequence[float] = (),
                        title: str = ""):
    """Each class's coverage, classes sorted from the worst-covered, one line per method.

    Parameters
    ----------
    classes : DataFrame
        :func:`describe_model`'s table (one column ``method/param`` per method).
    methods : mapping of str to str
        ``method/param`` -> the name in the legend.
    targets : sequence of float
        Coverage levels (%) drawn as dotted lines.
    """
    from .figures import LEGEND_PT, _new_figure, _tex

    fig = _new_figure(figsize=(7.2, 4.2))
    ax = fig.subplots()
    has = classes["n_test"].to_numpy() > 0
    for key, name in methods.items():
        if key not in classes.columns:
            continue
        v = np.sort(classes[key].to_numpy(dtype=float)[has])
        x = np.arange(1, v.size + 1)
        ax.step(x, v, where="mid", linewidth=1.4, label=_SUB.sub(lambda m: _tex("_{" + m.group(1) + "}"), name))
    for t in targets:
        ax.axhline(t, color="0.4", linestyle=":", linewidth=1.0)
    ax.set_xlabel("classes, from the worst-covered")
    ax.set_ylabel("coverage of the class's test rows (%)")
    ax.set_ylim(max(0.0, ax.get_ylim()[0]), 101)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=LEGEND_PT, frameon=False)
    if title:
        ax.set_title(title)
    return fig


# --- the page's context ------------------------------------------------------------------------------------

def _pct(v: object, decimals: int = 2) -> str:
    try:
        v = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "–"
    return "–" if v != v else f"{v:.{decimals}f}"


def _share_text(dataset_cfg: Mapping[str, object], origin: Mapping[str, str], n_cal: int, n_test: int,
                fewest: int | None, need: int, eps: float) -> str:
    """How the calibration rows were chosen, in one sentence."""
    cal_origin = str(origin.get("calibration", ""))
    split = dict(dataset_cfg.get("split") or {})
    fewest_text = (f"; the fewest in a class: {fewest:,}" if fewest is not None else "")
    need_text = (f"one conformal threshold per class needs at least {need} calibration rows of its class at ε = {eps:g} "
                 "(the smallest ε of this run)")
    if "split off" not in cal_origin:
        return (f"Calibration rows: {n_cal:,}, from your own calibration file{fewest_text}; {need_text}. "
                "Give more rows in that file if a class-conditional method below says it could not be calibrated.")
    if split.get("calibration") == "auto":
        pool = n_cal + n_test
        return (f"Calibration rows: {n_cal:,} split off the test rows ({100 * n_cal / max(pool, 1):.1f} % of the "
                f"{pool:,} rows they shared), chosen by <code>split.calibration: auto</code>: {need_text}, so the share "
                f"is the smallest, at least 10 % and at most half of those rows, whose stratified draw gives every "
                f"class that many (a class too rare for that does not raise it){fewest_text}.")
    return (f"Calibration rows: {n_cal:,} split off the test rows by the fixed share <code>split.calibration: "
            f"{split.get('calibration', 0.1)}</code>{fewest_text}; {need_text}. <code>split.calibration: auto</code> "
            "(the default of svbop report) chooses the share from that need.")


def model_context(model: Mapping[str, object], frame: pd.DataFrame, labels: Sequence[str], names, order: Sequence[str],
                  *, config: Mapping[str, object], calibration: Mapping[str, Mapping[str, object]] | None = None,
                  summaries: Mapping[str, Mapping[str, object]] | None = None) -> dict[str, object]:
    """The sections of the page about a model: which sets to use, the classes and example rows, per dataset.

    Parameters
    ----------
    model : mapping
        ``epsilons`` (the coverage levels asked), ``classes`` (dataset -> the rule describe_model's
        ``class_coverage_<dataset>.tsv``) and ``examples`` (dataset -> its ``examples.json``).
    frame : DataFrame
        Every kind of set of every dataset (:func:`svbop.report.beyond.read_beyond`).
    labels : sequence of str
        The run's utility labels.
    names : svbop.report.names.DisplayNames
        Display names.
    order : sequence of str
        The datasets, in the page's order.
    config : mapping
        The run's configuration (each dataset's ``split``).
    calibration : mapping, optional
        dataset -> calibration record (where its rows came from).
    summaries : mapping, optional
        dataset -> summary (K, test rows, top-1).
    """
    import base64

    from markupsafe import Markup

    from ..conformal import min_calibration_rows
    from .beyond import beyond_table
    from .figures import figure_to_png
    from .names import html_name

    epsilons = sorted({float(e) for e in model.get("epsilons") or []})
    eps_min = min(epsilons) if epsilons else 0.1
    need = min_calibration_rows(eps_min)
    datasets_cfg = dict(config.get("datasets") or {})
    out = []
    for d in order:
        if d not in set(frame["dataset"].astype(str)):
            continue
        table = beyond_table(frame, d, labels)
        chosen = choose_sets(table, epsilons, labels)
        display = dict(zip(table["key"], table["method"]))
        goals = []
        for goal, rows in chosen.groupby("goal", sort=False):
            coverage_goal_ = goal.startswith("coverage")
            goals.append({"goal": goal.replace(">=", "≥"), "goal_key": goal, "coverage": coverage_goal_, "rows": [
                {"rank": int(r["rank"]), "key": r["key"], "method": r["method"], "param": r["param"],
                 "label": r["label"], "basis": r["basis"], "reached": r["basis"] == BASIS_REACHED,
                 "name": html_name(display.get(r["key"], r["label"])),
                 "coverage": _pct(r["coverage_pct"]), "size": _pct(r["mean_set_size"]),
                 "low": _pct(r["coverage_low_pct"], 1), "high": _pct(r["coverage_high_pct"], 1),
                 "n_test": "" if r["n_test"] != r["n_test"] else f"{int(r['n_test']):,}",
                 "utility": _pct(r["utility_pct"]),
                 "guaranteed": "" if r["guaranteed_pct"] != r["guaranteed_pct"] else _pct(r["guaranteed_pct"], 1)}
                for r in rows.to_dict("records")]})
        # methods that could not be calibrated (a class short of rows) or that fell back within small groups
        problems = []
        for r in table.to_dict("records"):
            text = str(r["calibrated"])
            method, _, param = str(r["key"]).partition("/")
            try:
                eps = float(param)
            except ValueError:
                eps = eps_min
            if text.startswith("not calibrated:"):
                problems.append({"key": r["key"], "name": html_name(r["method"]), "kind": "not-calibrated",
                                 "rows_needed": min_calibration_rows(eps), "what": "class",
                                 "text": text.removeprefix("not calibrated: ")})
            elif text.startswith("one q per group") and "fewer than" in text:
                problems.append({"key": r["key"], "name": html_name(r["method"]), "kind": "small-groups",
                                 "rows_needed": min_calibration_rows(eps), "what": "group",
                                 "text": text[text.index("(") + 1: text.rindex(")")]})
        entry: dict[str, object] = {"id": d, "title": names.dataset(d), "goals": goals, "problems": problems,
                                    "classes": None, "examples": [], "share": ""}
        classes_path = (model.get("classes") or {}).get(d)
        if classes_path:
            classes = read_class_coverage(classes_path)
            class_name = dict(zip(classes["class"].astype(int), classes["name"].astype(str)))
            # the methods each class is shown under: the coverage goals' choices, ICP, class-conditional, SVBOP-Full
            keys = [g["rows"][0]["key"] for g in goals if g["coverage"] and g["rows"][0]["key"]]
            keys += [k for k in table["key"] if k.startswith("icp/")][:1]
            # one threshold per class, where it could be calibrated: the sets that cover every class
            keys += [k for k, f, c in zip(table["key"], table["family"], table["coverage_pct"])
                     if f == "class_conditional" and c == c][:1]
            keys += [k for k in table["key"] if k.startswith("svbop_full/")][:1]
            keys = [k for k in dict.fromkeys(keys) if k in classes.columns][:5]
            for k in keys:
                classes[k] = pd.to_numeric(classes[k], errors="coerce")
            tested = classes[classes["n_test"] > 0]
            first = keys[0] if keys else None
            worst = tested.sort_values([first, "n_test"], ascending=[True, False], kind="stable") if first else tested
            target = 100 * (1 - max(epsilons)) if epsilons else 90.0
            below = int((tested[first] < target - 1e-9).sum()) if first else 0

            def shown_rows(df: pd.DataFrame) -> list[dict[str, object]]:
                return [{"cls": int(r["class"]), "name": str(r["name"]), "n_test": int(r["n_test"]),
                         "n_cal": int(r["n_calibration"]),
                         "cells": [{"text": _pct(r[k], 1), "below": bool(r[k] < target - 1e-9)} for k in keys]}
                        for r in df.to_dict("records")]

            fig = plot_class_coverage(classes, {k: display.get(k, k) for k in keys}, [target],
                                      title=names.dataset(d))
            entry["classes"] = {
                "methods": [html_name(display.get(k, k)) for k in keys], "keys": keys,
                "first": html_name(display.get(first, first)) if first else "", "target": f"{target:g}",
                "below": below, "K": int(len(classes)), "tested": int(len(tested)),
                "worst": shown_rows(worst.head(10)),
                "all": shown_rows(classes.sort_values("class")) if len(classes) <= 1000 else [],
                "median_test": int(np.median(tested["n_test"])) if len(tested) else 0,
                "figure": "data:image/png;base64," + base64.b64encode(figure_to_png(fig)).decode("ascii"),
                "file": f"class_coverage_{d}.tsv",
            }
            cal_counts = classes.loc[classes["n_test"] > 0, "n_calibration"]
            record = dict((calibration or {}).get(d) or {})
            summary = dict((summaries or {}).get(d) or {})
            n_cal = int(summary.get("N_calibration") or classes["n_calibration"].sum())
            n_test = int(summary.get("N_test") or classes["n_test"].sum())
            entry["share"] = Markup(_share_text(datasets_cfg.get(d) or {}, record.get("origin") or {}, n_cal, n_test,
                                                int(cal_counts.min()) if len(cal_counts) else None, need, eps_min))
        else:
            class_name = {}
        examples_path = (model.get("examples") or {}).get(d)
        if examples_path:
            data = read_examples(examples_path)
            given = data.get("class_names")
            if given:
                class_name = {i: str(n) for i, n in enumerate(given)}

            def nm(c: object) -> str:
                return class_name.get(int(c), str(c))

            for e in data["rows"]:
                sets = []
                for key in table["key"]:
                    s = e["sets"].get(key)
                    if s is None:
                        continue
                    sets.append({"key": key, "name": html_name(display.get(key, key)), "size": s["size"],
                                 "covered": s["covered"], "more": s["size"] - len(s["classes"]),
                                 "classes": [{"name": nm(c), "truth": int(c) == int(e["truth"])} for c in s["classes"]]})
                entry["examples"].append({
                    "kind": e["kind"], "what": e["what"], "row": e["row"], "file_row": e["file_row"],
                    "truth": nm(e["truth"]), "entropy": f"{e['entropy_bits']:.2f}",
                    "top": [{"name": nm(c), "prob": f"{p:.3f}", "truth": int(c) == int(e["truth"])} for c, p in e["top"]],
                    "sets": sets})
        out.append(entry)
    return {"datasets": out, "epsilons": [f"{e:g}" for e in epsilons], "rows_needed": need, "eps_min": f"{eps_min:g}",
            "confidence": f"{100 * COVERAGE_CONFIDENCE:g}"}


# --- the page's other sections: utilities in a practitioner's words, the data, what was run ----------------

_REWARDS = {
    "precision": "a share of one point for each class of the set: only a single right class earns it all",
    "recall": "holding the true class, whatever the size: the set of every class always earns it all",
    "fbeta": "precision and recall together (their F-measure at β = {beta}): β = 1 weighs them alike, a larger β "
             "weighs holding the true class more, so larger sets pay",
    "credal": "a small set, with a penalty that grows with the square of the size: a cautious choice between "
              "one class and a few (δ and γ set how cautious)",
    "exp": "a small set, the reward falling exponentially with the size",
    "log": "a small set, the reward falling with the logarithm of the size: gentle on larger sets",
    "reject": "a single class, or else every class (abstaining) for the smaller reward 1 - α; any other set earns "
              "nothing",
    "genreject": "a small set, with a penalty that grows as a power of the share of classes the set holds",
}


def utility_rewards(spec: str, K: int) -> str:
    """What a utility rewards, in a practitioner's words, with the largest set size that still earns half
    (``"fbeta:beta=1"`` at K = 100 -> ``"precision and recall together ...; half of the reward up to s = 3"``)."""
    from ..utilities import utility

    u = utility(spec, K=K)
    kind = u.spec.split(":", 1)[0]
    params = dict(part.split("=", 1) for part in u.spec.partition(":")[2].split(",") if "=" in part)
    text = _REWARDS.get(kind, u.title).format(**params) if kind != "fbeta" or "beta" in params else u.title
    g = np.asarray(u.values(), dtype=float)
    half = np.flatnonzero(g >= 0.5 * g.max() - 1e-12)
    if kind not in ("recall", "reject") and half.size:
        n = int(half[-1]) + 1
        text += f"; a right set earns at least half of the most up to s = {n:,} class{'es' if n != 1 else ''}"
    return text


def utilities_context(specs: Sequence[str], K: int) -> dict[str, object]:
    """The section "Utilities" of the page about a model: per utility its name, what it rewards
    (:func:`utility_rewards`) and g(s) at a few sizes; the figure of g(s) for s = 1..K."""
    import base64

    from ..utilities import utility
    from .figures import figure_to_png, plot_utilities
    from .names import html_name

    K = max(int(K), 2)
    sizes = [s for s in (1, 2, 3, 5, 10, 20) if s <= K]
    rows = []
    for spec in specs:
        u = utility(spec, K=K)
        g = u.values()
        rows.append({"name": html_name(utility_name(u.spec)), "spec": u.spec, "rewards": utility_rewards(u.spec, K),
                     "g": [f"{float(g[s - 1]):.2f}" for s in sizes]})
    from matplotlib.ticker import FuncFormatter

    fig = plot_utilities(list(specs), K=K, title=f"What a right set earns, K = {K:,}")
    plain = FuncFormatter(lambda v, _: f"{v:g}")  # 1, 2, 10 (not 10^0, 2 x 10^0)
    fig.axes[0].xaxis.set_major_formatter(plain)
    fig.axes[0].xaxis.set_minor_formatter(plain if K <= 20 else FuncFormatter(lambda v, _: ""))
    return {"rows": rows, "sizes": sizes, "K": K,
            "figure": "data:image/png;base64," + base64.b64encode(figure_to_png(fig)).decode("ascii")}


def data_context(summaries: Mapping[str, Mapping[str, object]], names, order: Sequence[str]) -> list[dict[str, object]]:
    """The section "Your data": per model its key, title, classes and the rows of each part."""
    out = []
    for d in order:
        s = dict(summaries.get(d) or {})
        if not s:
            continue

        def count(key: str) -> str:
            v = s.get(key)
            return "–" if v is None else f"{int(v):,}"

        top1 = s.get("top1_pct")
        out.append({"id": d, "title": names.dataset(d), "K": count("K"), "validation": count("N_validation"),
                    "calibration": count("N_calibration"), "test": count("N_test"),
                    "top1": "–" if top1 is None else f"{float(top1):.2f}"})
    return out


#: The keys of the configuration the page about a model shows (the rest is the paper's datasets and figures).
MODEL_CONFIG_KEYS = ("run", "seed", "utilities", "baselines", "methods", "timing")


def model_config(config: Mapping[str, object]) -> dict[str, object]:
    """The part of a run's configuration that made the page about a model: :data:`MODEL_CONFIG_KEYS` and the
    entries of the datasets run."""
    run = [str(d) for d in (config.get("run") or [])]
    out = {k: config[k] for k in MODEL_CONFIG_KEYS if k in config}
    datasets = dict(config.get("datasets") or {})
    out["datasets"] = {d: datasets[d] for d in run if d in datasets}
    return out
