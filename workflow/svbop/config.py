"""The workflow's configuration checked before any job starts, with one-line errors.

Three checks, in the order the Snakefile runs them:

* :func:`check_yaml` -- a YAML syntax error names the file, line and column (Snakemake's own
  message names neither);
* :func:`validate_config` -- the JSON schema (``workflow/schemas/config.schema.yaml``), with its
  defaults filled in; a violation is one line naming the key path and what was expected,
  instead of a dump of the schema; before it, every number must be finite and not subnormal
  (NaN passes every bound of a schema, ``.inf`` every lower bound);
* :func:`check_config` -- what a schema cannot say: split fractions that leave no training
  rows, a predefined tree without a hierarchy, files named in ``unpack``/``parts``/``hierarchy``
  that no entry of ``files`` provides.

Every error is a :class:`ConfigError` (a ``ValueError``) whose message starts with ``config:``
and the dotted key, e.g. ``config: datasets.mine.format.label_column: missing (required for
format kind 'csv_text')``.  ``svbop check-config FILE...`` runs all three on config files.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._resources import workflow_path
from .archives import relative_path_problem
from .download import SIDECAR_SUFFIXES

__all__ = [
    "ConfigError",
    "DATASET_KEY_PATTERN",
    "EPSILON_KEYS",
    "MIN_EPSILON",
    "DOWNLOAD_SIDECAR_SUFFIXES",
    "RESERVED_DATASET_KEYS",
    "SCHEMA",
    "UTILITY_KEYS",
    "check_class_counts",
    "check_config",
    "check_dataset",
    "check_epsilons",
    "check_tuning",
    "check_utilities",
    "check_yaml",
    "has_group_column",
    "has_group_columns",
    "has_weights",
    "has_hierarchy",
    "load_yaml",
    "Summarised",
    "merge_configs",
    "model_outputs_classes",
    "validate_config",
    "vgg16_weights_key",
]

#: The workflow's config schema.
SCHEMA = workflow_path("workflow/schemas/config.schema.yaml")

_SPLIT_PARTS = ("validation", "calibration", "test")

#: A dataset key: it names the folders ``data/<key>`` and ``results/<key>`` and is a Snakemake
#: wildcard (``workflow/rules/common.smk``); the schema's ``$defs.dataset_key`` is the same.
#: No leading ``_`` (``results/status/failed/_weights`` holds the weights' failures) or ``.``.
DATASET_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"

#: Names under ``data/`` and ``results/`` that are the pipeline's own, not a dataset's (compared
#: ignoring case, for case-insensitive file systems).
RESERVED_DATASET_KEYS = frozenset(
    {"pretrained", "benchmarks", "figures", "illustrations", "logs", "status", "tables", "report.html", "provenance.zip"}
)

#: Files the downloader writes beside a file (``x.sha256``, ``x.part``, ``x.corrupt``), from
#: :mod:`svbop.download`: a configured file named like one beside another would be overwritten.
DOWNLOAD_SIDECAR_SUFFIXES = SIDECAR_SUFFIXES

_PLAIN_NAME = re.compile(r"[^./\\\x00-\x1f][^/\\\x00-\x1f]*")


class ConfigError(ValueError):
    """A configuration error; the message is one line starting with ``config:`` and the key."""


# ------------------------------------------------------------------------------------- YAML
def load_yaml(path: str | os.PathLike) -> Any:
    """Parse a YAML (or JSON) file; a syntax error names the file, line and column.

    Raises
    ------
    ConfigError
        ``"<path>:<line>:<column>: YAML syntax error: <problem>"``, or a missing file.
    """
    import yaml

    from .io import missing_or_not_regular

    path = Path(path)
    if path.exists() and not path.is_file():  # a FIFO would block the read, a device never end
        raise ConfigError(f"{path}: {missing_or_not_regular(path)} (a config file must be a file)")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        raise ConfigError(f"{where}: YAML syntax error: {problem}" + (f" ({context})" if context else "")) from None


def check_yaml(path: str | os.PathLike) -> None:
    """Raise :class:`ConfigError` naming file, line and column if ``path`` is not valid YAML, or
    if its top level is not a mapping of keys."""
    data = load_yaml(path)
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level, got {type(data).__name__}")


def merge_configs(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``update`` merged over ``base`` as Snakemake merges ``--configfile`` files: mappings
    merge key by key, everything else (lists included) is replaced."""
    out = copy.deepcopy(dict(base))
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_configs(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def replace_file_lists(config: dict[str, Any], overrides: Sequence[Mapping[str, Any] | None]) -> list[str]:
    """Give a dataset the ``files:`` its overriding config files list, not those merged with the built-in ones.

    Snakemake merges every ``--configfile`` over ``config.yaml`` key by key, so a user's entry
    for a built-in dataset that lists its own files would keep the built-in files too (and plan
    their download).  A dataset's files and the format that reads them go together, so a
    ``files:`` given by an overriding file **replaces** the built-in list: after this call,
    ``config["datasets"][name]["files"]`` is the merge of the overriding files' ``files:`` for
    that dataset alone (in order; later files win, as Snakemake's merge).  Every other key of the
    entry still merges as Snakemake merges it.

    Parameters
    ----------
    config : dict
        The merged config (changed in place).
    overrides : sequence of mappings
        The ``--configfile`` files' contents, in the order given (None for an empty file).

    Returns
    -------
    list of str
        The datasets whose file list was replaced (where it differed from the merged one).
    """
    replaced: dict[str, dict[str, Any]] = {}
    for override in overrides:
        datasets = (override or {}).get("datasets") if isinstance(override, Mapping) else None
        if not isinstance(datasets, Mapping):
            continue
        for name, entry in datasets.items():
            if isinstance(entry, Mapping) and isinstance(entry.get("files"), Mapping):
                replaced[name] = merge_configs(replaced.get(name, {}), entry["files"])
    changed = []
    for name, files in replaced.items():
        entry = (config.get("datasets") or {}).get(name)
        if isinstance(entry, dict) and entry.get("files") != files:
            entry["files"] = files
            changed.append(name)
    return changed


# ----------------------------------------------------------------------------------- schema
def _key(path: Iterable[Any]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _alternatives(schemas: Sequence[Mapping[str, Any]]) -> str:
    """The branches of a oneOf/anyOf, briefly: by their required keys, else their types."""
    out = []
    for s in schemas:
        if "required" in s:
            out.append(" + ".join(s["required"]))
        elif "const" in s:
            out.append(repr(s["const"]))
        elif "type" in s:
            out.append(str(s["type"]))
        elif "$ref" in s:
            out.append(s["$ref"].rsplit("/", 1)[-1])
    return ", ".join(out) or "the schema's alternatives"


def _kind_of(error, config: Mapping[str, Any]) -> str | None:
    """The format kind whose per-kind rule (an ``if kind ... then``) an error comes from."""
    if "then" not in list(error.absolute_schema_path):
        return None
    node: Any = config
    for part in error.absolute_path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node.get("kind") if isinstance(node, Mapping) else None


def _describe(error, config: Mapping[str, Any]) -> str:
    """One line for a jsonschema error: the key path and what was expected; a whole float where an
    integer would do (``5.0`` rows, ``seed: 2.0``) says to write it as an integer."""
    line = _describe_error(error, config)
    inst = error.instance
    schemas, e = [], error
    while e is not None:  # the error and the alternatives (anyOf) it was one of
        schemas.append(str(e.schema))
        e = e.parent
    if isinstance(inst, float) and inst.is_integer() and abs(inst) < 2**63 and any("integer" in t for t in schemas):
        line += f" (an integer is written without a decimal point: {int(inst)}, not {inst!r})"
    return line


def _describe_error(error, config: Mapping[str, Any]) -> str:
    path = list(error.absolute_path)
    v, value, inst = error.validator, error.validator_value, error.instance
    if "propertyNames" in list(error.absolute_schema_path) and isinstance(inst, str) and v == "pattern":
        return f"{_key(path)}: key {_short(inst)} {error.schema.get('description') or f'does not match {value}'}"
    if "propertyNames" in list(error.absolute_schema_path) and isinstance(inst, str):
        kind = _kind_of(error, config)
        allowed = sorted(value) if isinstance(value, list) else []
        kinds = f" of format kind {kind!r}" if kind else ""
        return f"{_key(path + [inst])}: not an option{kinds} (its options: {', '.join(allowed)})"
    if v == "required":
        missing = [k for k in value if isinstance(inst, Mapping) and k not in inst]
        kind = _kind_of(error, config)
        why = f"required for format kind {kind!r}" if kind else "required"
        return f"{_key(path + missing[:1])}: missing ({why})"
    if v == "additionalProperties" and isinstance(inst, Mapping):
        known = set(error.schema.get("properties", {}))
        extra = sorted(k for k in inst if k not in known)
        shown = ", ".join(sorted(known)) if known else "none"
        return f"{_key(path + extra[:1])}: unknown key (known here: {shown})"
    if v == "propertyNames":
        return f"{_key(path)}: {error.message}"
    if v == "enum":
        return f"{_key(path)}: {_short(inst)} is not one of {', '.join(map(repr, value))}"
    if v == "const":
        return f"{_key(path)}: expected {value!r}, got {_short(inst)}"
    if v == "type":
        return f"{_key(path)}: expected {' or '.join(value) if isinstance(value, list) else value}, got {_short(inst)}"
    if v == "pattern":
        if error.schema.get("description"):
            return f"{_key(path)}: {_short(inst)} {error.schema['description']}"
        return f"{_key(path)}: {_short(inst)} does not have the expected form (pattern {value})"
    if v in ("oneOf", "anyOf"):
        if v == "oneOf" and not error.context:  # valid under several branches
            return f"{_key(path)}: give exactly one of {_alternatives(value)}, not several"
        return f"{_key(path)}: expected one of: {_alternatives(value)}; got {_short(inst)}"
    if v in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        sign = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[v]
        return f"{_key(path)}: expected a value {sign} {value}, got {_short(inst)}"
    if v == "maxItems" and isinstance(inst, list):
        return f"{_key(path)}: {len(inst):,} values; at most {value} are allowed"
    if v in ("minItems", "maxItems", "minProperties", "maxProperties", "uniqueItems"):
        return f"{_key(path)}: {error.message if len(error.message) < 120 else v + ' ' + str(value)}"
    message = error.message if len(error.message) <= 160 else error.message[:157] + "..."
    return f"{_key(path)}: {message}"


def _validator(schema: Mapping[str, Any]):
    """A Draft 2020-12 validator that fills in defaults (as ``snakemake.utils.validate`` does)."""
    from jsonschema import Draft202012Validator, validators

    properties = Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator, props, instance, subschema):
        if isinstance(instance, dict):
            for name, sub in props.items():
                if isinstance(sub, Mapping) and "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from properties(validator, props, instance, subschema)

    unique_items = Draft202012Validator.VALIDATORS["uniqueItems"]

    def unique_hashable(validator, unique, instance, subschema):
        """uniqueItems in one pass over hashable items (jsonschema's check can take quadratic time: a
        100,000-value grid kept check-config busy for minutes); other items as jsonschema checks them."""
        if not unique or not isinstance(instance, list):
            return
        seen = set()
        try:
            for item in instance:
                key = (type(item) is bool, item)  # JSON: true is not 1, but 1 is 1.0
                if key in seen:
                    from jsonschema.exceptions import ValidationError

                    yield ValidationError(f"{_short(instance)} has non-unique elements")
                    return
                seen.add(key)
        except TypeError:  # a list or mapping among the items
            yield from unique_items(validator, unique, instance, subschema)

    # JSON Schema counts 2.0 as an integer; YAML's 2.0 is a float, and the code given a seed, a row count
    # or a size of 2.0 fails later (SeedSequence refuses it; a float size is a fraction): an integer key
    # takes an integer only
    checker = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool))
    strict = validators.extend(Draft202012Validator, {"properties": set_defaults, "uniqueItems": unique_hashable},
                               type_checker=checker)
    return strict(schema)


#: The smallest positive normal double: a number closer to 0 (a subnormal, e.g. ``5e-324``) has
#: lost precision and overflows once inverted (``1 / 5e-324`` is inf), so no key may hold one.
_SMALLEST_NORMAL = sys.float_info.min


def _check_numbers(node: Any, path: list[Any]) -> None:
    """Raise :class:`ConfigError` naming the key of the first number that is NaN, infinite or
    subnormal (non-zero but below :data:`_SMALLEST_NORMAL` in magnitude) anywhere in ``node``.

    A JSON schema cannot say "finite": NaN passes every ``minimum`` / ``maximum`` comparison and
    ``.inf`` every lower bound; nothing in the workflow's configuration is meaningful as either.
    """
    stack = [(node, path)]
    while stack:  # iterative: a deeply nested YAML document never reaches the recursion limit
        item, where = stack.pop()
        if isinstance(item, Mapping):
            stack.extend((value, where + [key]) for key, value in reversed(list(item.items())))
        elif isinstance(item, (list, tuple)):
            stack.extend((value, where + [i]) for i, value in reversed(list(enumerate(item))))
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ConfigError(f"config: {_key(where)}: expected a finite number, got {item!r}")
            if item != 0.0 and abs(item) < _SMALLEST_NORMAL:
                raise ConfigError(f"config: {_key(where)}: {item!r} is a subnormal number (non-zero but below "
                                  f"{_SMALLEST_NORMAL!r} in magnitude); use 0 or a normal number")


def validate_config(config: dict[str, Any], schema: str | os.PathLike | Mapping[str, Any] = SCHEMA) -> dict[str, Any]:
    """Validate ``config`` against the schema, filling in its defaults in place.

    Parameters
    ----------
    config : dict
        The merged configuration (modified: defaults are added).
    schema : path or mapping
        The JSON schema (YAML file); default: the workflow's.

    Returns
    -------
    dict
        ``config``.

    Raises
    ------
    ConfigError
        ``"config: <key path>: <what was expected>"``, one line, for the most relevant violation;
        first, for any number that is NaN, infinite or subnormal, which a schema cannot refuse.
    """
    from jsonschema.exceptions import best_match

    if not isinstance(schema, Mapping):
        schema = load_yaml(schema)
    if not isinstance(config, dict):
        raise ConfigError(f"config: expected a mapping of keys at the top level, got {type(config).__name__}")
    _check_numbers(config, [])
    error = best_match(_validator(schema).iter_errors(config))
    if error is not None:
        raise ConfigError(f"config: {_describe(error, config)}")
    return config


# ------------------------------------------------------------------------ cross-field checks
def has_hierarchy(cfg: Mapping[str, Any]) -> bool:
    """Whether a dataset's config gives its classes a hierarchy (a predefined tree needs one)."""
    if cfg.get("hierarchy"):
        return True
    source = cfg.get("source") or {}
    if "synthetic" in source:
        return True
    fmt = cfg.get("format") or {}
    if fmt.get("kind") == "fasta":
        return fmt.get("label", "taxonomy") == "taxonomy" and fmt.get("hierarchy", True) is not False
    if fmt.get("kind") == "csv_text":
        return bool(fmt.get("hierarchy_columns"))
    return False


def is_model_outputs(cfg: Mapping[str, Any]) -> bool:
    """Whether a dataset is a trained model's outputs (``format.kind: model_outputs``): no features,
    no model of ours; every set is made from its probabilities."""
    return (cfg.get("format") or {}).get("kind") == "model_outputs"


def has_group_column(cfg: Mapping[str, Any]) -> bool:
    """Whether a dataset's rows carry a group from the user's data (``format.group_column`` of kind
    ``csv_text`` or ``model_outputs``, or ``groups`` files of a model's outputs): the grouping
    ``group_column`` of ``methods.mondrian.by`` applies to it."""
    fmt = cfg.get("format") or {}
    if fmt.get("kind") not in ("csv_text", "model_outputs"):
        return False
    if fmt.get("group_column") is not None:
        return True
    return any(isinstance(spec, Mapping) and "groups" in spec for spec in dict(fmt.get("parts") or {}).values())


def _parts_give(cfg: Mapping[str, Any], key: str) -> bool:
    fmt = cfg.get("format") or {}
    if fmt.get("kind") != "model_outputs":
        return False
    return any(isinstance(spec, Mapping) and key in spec for spec in dict(fmt.get("parts") or {}).values())


def has_weights(cfg: Mapping[str, Any]) -> bool:
    """Whether a dataset's rows carry likelihood-ratio weights (``weights`` files of a model's outputs):
    ``methods.weighted`` applies to it."""
    return _parts_give(cfg, "weights")


def has_group_columns(cfg: Mapping[str, Any]) -> bool:
    """Whether a dataset's rows carry group indicator columns (``group_columns`` files of a model's
    outputs): ``methods.conditional`` applies to it."""
    return _parts_give(cfg, "group_columns")


def calibrate_method(cfg: Mapping[str, Any]) -> str:
    """A dataset's ``calibrate:``: as configured, else ``temperature`` for a model's outputs (a deep
    network's softmax is rarely calibrated, Guo et al. 2017, and a temperature fitted on the validation
    rows never changes the ranking of the classes, only the sets' sizes) and ``none`` for the paper's
    liblinear datasets (so that the paper's tables are reproduced as the paper made them).
    ``venn_abers`` is chosen only when configured (one-vs-rest Venn-Abers, :mod:`svbop.venn_abers`: it
    can change the ranking of the classes, which a temperature never does)."""
    return cfg.get("calibrate") or ("temperature" if is_model_outputs(cfg) else "none")


def _check_model_outputs(base: str, fmt: Mapping[str, Any], cfg: Mapping[str, Any], files, unpack) -> None:
    """model_outputs: every file of ``parts`` (scores, labels) and ``class_names_file`` is one of the raw files;
    no features, model or approximate algorithm is asked of it."""
    where = f"{base}.format"
    for part, spec in dict(fmt.get("parts") or {}).items():
        if not isinstance(spec, Mapping):
            raise ConfigError(f"config: {where}.parts.{part}: expected {{scores: FILE, labels: FILE}}, got {spec!r}")
        for key in ("scores", "labels", "groups", "weights", "group_columns"):
            if key in spec:
                _raw_file_check(f"{where}.parts.{part}.{key}", spec[key], files, unpack)
        if "groups" in spec and fmt.get("group_column") is not None:
            raise ConfigError(f"config: {where}.parts.{part}.groups: and format.group_column both give the groups; "
                              "give one")
        for key in ("weights", "group_columns"):  # every part or none (each part's rows keep their own)
            given = [p for p, v in dict(fmt.get("parts") or {}).items() if isinstance(v, Mapping) and key in v]
            if given and key not in spec:
                raise ConfigError(f"config: {where}.parts.{part}.{key}: missing (parts.{given[0]} gives {key}: give "
                                  f"every part a {key} file, or none)")
        if "labels" not in spec and fmt.get("label_column") is None:
            raise ConfigError(f"config: {where}.parts.{part}.labels: missing (or set format.label_column to read the "
                              "labels from a CSV/TSV scores file)")
    parts = dict(fmt.get("parts") or {})
    if "test" not in parts and "all" not in parts:
        raise ConfigError(f"config: {where}.parts: give test (every reported number is computed on it) or all")
    for key in ("label_column", "group_column"):
        if fmt.get("header", True) is False and fmt.get(key) is not None and isinstance(fmt[key], str):
            raise ConfigError(f"config: {where}.{key}: {fmt[key]!r}: with header: false give the "
                              "column's 0-based number")
        if fmt.get("header", True) is not False and isinstance(fmt.get(key), int):
            raise ConfigError(f"config: {where}.{key}: {fmt[key]}: a column number needs header: false; "
                              "give the column's name")
    if "class_names_file" in fmt:
        _raw_file_check(f"{where}.class_names_file", fmt["class_names_file"], files, unpack)
    for key in ("hsg", "hf"):
        if (cfg.get(key) or {}).get("enabled"):
            raise ConfigError(f"config: {base}.{key}.enabled: SVBOP-{key.upper()} needs features and a linear model, "
                              "which a model's outputs do not have; set it to false")
    from .tuning import HF_TUNED_KEYS, HSG_TUNED_KEYS, TUNED_KEYS

    for section, keys in (("flat", TUNED_KEYS), ("hsg", HSG_TUNED_KEYS), ("hf", HF_TUNED_KEYS)):
        for key in keys:
            if (cfg.get(section) or {}).get(key) == "auto":
                raise ConfigError(f"config: {base}.{section}.{key}: 'auto' chooses a hyper-parameter of svbop's own "
                                  "models on the validation rows, and a model's outputs train none; remove it")


_COLUMN_KEYS = ("text_column", "label_column", "hierarchy_columns", "group_column")


def _check_column_numbers(base: str, fmt: Mapping[str, Any]) -> None:
    """csv_text with ``header: false`` names its columns by 0-based number; with a header, by name."""
    where = f"{base}.format"
    kind = fmt.get("kind")
    header = fmt.get("header", True)
    if "group_column" in fmt and kind != "csv_text":  # the schema says so too; this holds without it
        raise ConfigError(f"config: {where}.group_column: read by kinds csv_text and model_outputs, not {kind!r}")
    if header is False and kind != "csv_text":
        raise ConfigError(f"config: {where}.header: false is read by kinds csv_text and model_outputs, not {kind!r}")
    for key in _COLUMN_KEYS:
        if key not in fmt:
            continue
        values = fmt[key] if key == "hierarchy_columns" else [fmt[key]]
        for value in values:
            number = isinstance(value, int) and not isinstance(value, bool)
            if header is False and not number:
                raise ConfigError(f"config: {where}.{key}: {fmt[key]!r}: with header: false give 0-based column "
                                  "numbers (the file has no line naming its columns)")
            if header is not False and number:
                if kind == "csv_text":
                    raise ConfigError(f"config: {where}.{key}: {fmt[key]!r}: a column number needs header: false; "
                                      "with a header line give the column's name")
                raise ConfigError(f"config: {where}.{key}: {fmt[key]!r}: a column number is only read by kinds "
                                  "csv_text and model_outputs with header: false; give the column's name")


def vgg16_weights_key(name: str) -> str:
    """The top-level ``weights`` entry a dataset's ``features.weights`` names (``DEFAULT`` and
    torchvision's ``IMAGENET1K_V1`` are ``vgg16_imagenet``)."""
    return "vgg16_imagenet" if name in ("DEFAULT", "IMAGENET1K_V1") else name


def _raw_file_check(where: str, name: str, files: Mapping[str, Any], unpack: Sequence[str]) -> None:
    """A file a reader opens in the raw folder: a listed download (not one that is unpacked),
    or, when archives are unpacked, possibly one of their members (not checked here)."""
    problem = relative_path_problem(name, strict=False)
    if problem:
        raise ConfigError(f"config: {where}: {name!r} {problem}; name a file inside data/<dataset>/raw")
    if name in files:
        if name in unpack:
            raise ConfigError(f"config: {where}: {name!r} is an archive listed in unpack; name a file inside it instead")
        return
    if not unpack:
        known = ", ".join(files) or "none"
        raise ConfigError(f"config: {where}: {name!r} is not one of the dataset's files (files: {known}) and nothing is unpacked")


def check_dataset(name: str, cfg: Mapping[str, Any], weights: Mapping[str, Any] | None = None) -> None:
    """Cross-field checks of one dataset entry (after :func:`validate_config`).

    ``weights`` is the config's top-level ``weights`` (default: the schema's).

    Raises
    ------
    ConfigError
        Naming the key: a dataset key that is not a safe folder name (:data:`DATASET_KEY_PATTERN`)
        or is reserved (:data:`RESERVED_DATASET_KEYS`); a file name that is not a plain name, or
        that is another file's sidecar (:data:`DOWNLOAD_SIDECAR_SUFFIXES`, e.g. ``x.sha256``
        beside ``x``); ``features.weights`` naming no weights entry; split fractions adding up to
        1 or more; ``hf.trees`` with ``predefined`` but no hierarchy; an ``unpack`` entry that is
        neither a listed file nor a relative path inside the raw folder (absolute, ``..``, ``.``
        or empty segments) of an earlier archive, or a listed file that is not an archive; a file
        of ``format.parts``, ``hierarchy.file`` or ``features.domains`` (``from_csv.files`` too) that is absolute, holds
        ``..``, or that no entry of ``files`` provides (when nothing is unpacked, which could
        provide it); ``auto`` for a value svbop does not choose (``hsg.M``, ``hsg.efC``:
        :data:`svbop.tuning.NOT_YET`; ``flat.C``/``eps``, ``hf.C``/``eps``/``max_leaves`` and
        ``hsg.k``/``ef`` are chosen on the validation rows), or anywhere in a model's outputs; ``format`` column numbers without
        ``header: false`` or names with it (``csv_text``: ``text_column``, ``label_column``,
        ``hierarchy_columns``).
    """
    weights = {"vgg16_imagenet": {}} if weights is None else weights
    base = f"datasets.{name}"
    if not isinstance(name, str) or not re.fullmatch(DATASET_KEY_PATTERN, name):
        raise ConfigError(
            f"config: datasets: key {name!r} is not a usable dataset key (it names the folders data/<key> and "
            "results/<key>: letters, digits, '.', '_', '-', starting with a letter or digit)"
        )
    if name.lower() in RESERVED_DATASET_KEYS:
        raise ConfigError(
            f"config: datasets: key {name!r} is reserved (data/ or results/ has a folder or file of the pipeline's own "
            f"by that name: {', '.join(sorted(RESERVED_DATASET_KEYS))}); rename the dataset"
        )
    files = dict(cfg.get("files") or {})
    for file in files:
        if not _PLAIN_NAME.fullmatch(file):
            raise ConfigError(
                f"config: {base}.files: key {file!r} is not a plain file name "
                "(no '/' or '\\', no control characters, not starting with '.')"
            )
        for suffix, what in DOWNLOAD_SIDECAR_SUFFIXES.items():
            owner = file[: -len(suffix)]
            if file.endswith(suffix) and owner in files:
                raise ConfigError(
                    f"config: {base}.files.{file}: the pipeline writes {file!r} beside {owner!r} ({what}), so the two "
                    "would overwrite each other in data/<dataset>/downloads; rename the file"
                )
    features = cfg.get("features") or {}
    if features.get("kind") == "vgg16" and str(features.get("weights", "DEFAULT")).lower() != "none":
        key = vgg16_weights_key(str(features.get("weights", "DEFAULT")))
        if key not in weights:
            raise ConfigError(
                f"config: {base}.features.weights: {features.get('weights')!r} names no entry of the top-level weights "
                f"(known: {', '.join(weights) or 'none'}); or 'none' for random weights"
            )
    split = cfg.get("split") or {}
    if split.get("calibration") == "auto" and not is_model_outputs(cfg):
        raise ConfigError(f"config: {base}.split.calibration: 'auto' is for a model's outputs (format.kind: "
                          "model_outputs); give a fraction or a row count")
    fractions = {k: v for k in _SPLIT_PARTS if isinstance(v := split.get(k), float) and 0 <= v < 1}
    if is_model_outputs(cfg):
        # no model is trained on a model's outputs: the parts may take every row (validation 0.2,
        # calibration 0.2, test 0.6), as long as validation and calibration leave some for the test
        drawn = {k: v for k, v in fractions.items() if k != "test"}
        if sum(drawn.values()) >= 1 or sum(fractions.values()) > 1 + 1e-9:
            shown = " + ".join(f"{k} {v:g}" for k, v in fractions.items())
            raise ConfigError(
                f"config: {base}.split: {shown} = {sum(fractions.values()):g} of the rows; a model's outputs need "
                "validation + calibration < 1 and the parts together at most 1 (no training rows are kept)"
            )
    elif sum(fractions.values()) >= 1:
        shown = " + ".join(f"{k} {v:g}" for k, v in fractions.items())
        raise ConfigError(
            f"config: {base}.split: {shown} = {sum(fractions.values()):g} of the rows, leaving none for training"
        )
    from .tuning import NOT_YET  # section.key that `auto` is refused for (the index's shape)

    for dotted in NOT_YET:
        section, key = dotted.split(".")
        if (cfg.get(section) or {}).get(key) == "auto":
            raise ConfigError(
                f"config: {base}.{dotted}: 'auto' is not supported (the HNSW index is built once from hsg.M and "
                "hsg.efC; the validation rows choose only flat.C/eps, hf.C/eps/max_leaves and hsg.k/ef); give a "
                "number (the paper's Table 5 lists its values)"
            )
    hf = cfg.get("hf") or {}
    if hf.get("enabled") and "predefined" in (hf.get("trees") or []) and not has_hierarchy(cfg):
        raise ConfigError(
            f"config: {base}.hf.trees: 'predefined' needs a class hierarchy and this dataset has none "
            "(add `hierarchy:`, e.g. {from_label: {sep: \".\"}} or a file, or use trees: [kmeans])"
        )
    unpack = list(cfg.get("unpack") or [])
    from .archives import is_archive_name

    for i, entry in enumerate(unpack):
        if entry in files:
            if not is_archive_name(entry):
                raise ConfigError(f"config: {base}.unpack[{i}]: {entry!r} is not an archive name (.tar, .tar.gz, .tgz, .tar.bz2, .zip, ...)")
            continue
        problem = relative_path_problem(entry)
        if problem:
            raise ConfigError(
                f"config: {base}.unpack[{i}]: {entry!r} {problem}; an entry is one of the dataset's files "
                f"({', '.join(files) or 'none'}) or a relative path inside data/<dataset>/raw of an archive unpacked before it"
            )
        if i == 0:
            raise ConfigError(
                f"config: {base}.unpack[0]: {entry!r} is not one of the dataset's files ({', '.join(files) or 'none'}); "
                "an entry that is not a file must be inside an archive unpacked before it"
            )
    fmt = cfg.get("format") or {}
    if is_model_outputs(cfg):
        _check_model_outputs(base, fmt, cfg, files, unpack)
    else:
        _check_column_numbers(base, fmt)
        for part, names in dict(fmt.get("parts") or {}).items():
            if isinstance(names, Mapping):
                raise ConfigError(f"config: {base}.format.parts.{part}: {{scores, labels}} is only read by kind "
                                  "model_outputs; give a file or a list of files")
            for j, file in enumerate([names] if isinstance(names, str) else names):
                _raw_file_check(f"{base}.format.parts.{part}[{j}]", file, files, unpack)
    hierarchy = cfg.get("hierarchy") or {}
    if "file" in hierarchy:
        _raw_file_check(f"{base}.hierarchy.file", hierarchy["file"], files, unpack)
    domains = (cfg.get("features") or {}).get("domains") or {}
    for key in ("families", "annotations"):
        if key in domains:
            _raw_file_check(f"{base}.features.domains.{key}", domains[key], files, unpack)
    for j, file in enumerate((domains.get("from_csv") or {}).get("files") or []):
        _raw_file_check(f"{base}.features.domains.from_csv.files[{j}]", file, files, unpack)


class Summarised(dict):
    """A dict that prints as its size and a digest of its content.

    For a workflow's large parameters (the whole config, every dataset's entry): a workflow
    engine that records parameters by ``repr`` still reruns a job when the content changes (the
    digest changes), but its log says ``{12 keys, sha256 3f2a...}`` instead of thousands of
    characters.  Everything else is a plain dict; it pickles as one.

    Examples
    --------
    >>> Summarised({"b": 1, "a": [1, 2]})
    {2 keys, sha256 94a786c3662b}
    """

    def __repr__(self) -> str:
        text = json.dumps(self, sort_keys=True, default=repr, separators=(",", ":"))
        return f"{{{len(self)} keys, sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]}}}"

    __str__ = __repr__


def check_config(config: Mapping[str, Any], datasets: Iterable[str] | None = None) -> None:
    """Cross-field checks the schema cannot express, for the datasets of ``run`` (or ``datasets``).

    Raises
    ------
    ConfigError
        One line naming the key (see :func:`check_dataset`), or a ``run`` entry that is not a
        key of ``datasets``.
    """
    known = dict(config.get("datasets") or {})
    names = list(config.get("run") or []) if datasets is None else list(datasets)
    check_utilities(config)
    check_epsilons(config)
    check_risk_control(config)
    for name in names:
        if name not in known:
            raise ConfigError(f"config: run: {name!r} is not a key of datasets (known: {', '.join(sorted(known)) or 'none'})")
        check_dataset(name, known[name], config.get("weights"))
        check_tuning(name, known[name], config.get("tuning"))
    check_class_counts(config, names)


#: The smallest significance level the workflow runs: a finite conformal threshold at level epsilon
#: needs ``ceil(1/epsilon - 1)`` calibration rows (:func:`svbop.conformal.min_calibration_rows`),
#: 10^9 at this level, more than any data set the workflow reads holds in memory.
MIN_EPSILON = 1e-9
#: The keys holding significance levels (lists), checked by :func:`check_epsilons`.
EPSILON_KEYS = (("baselines", "icp_epsilon"), ("methods", "epsilon"))


def check_epsilons(config: Mapping[str, Any]) -> None:
    """Refuse a significance level below :data:`MIN_EPSILON` (the schema lets any number in (0, 1)
    through, and the workflow's split overflowed on the rows such a level needs).

    Raises
    ------
    ConfigError
        ``"config: methods.epsilon[0]: 1e-300 is below 1e-09 ..."``.
    """
    for path in EPSILON_KEYS:
        node: Any = config
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        for i, e in enumerate(node if isinstance(node, (list, tuple)) else ()):
            if isinstance(e, (int, float)) and not isinstance(e, bool) and 0 < e < MIN_EPSILON:
                raise ConfigError(f"config: {_key([*path, i])}: {e!r} is below {MIN_EPSILON:g}: a finite conformal "
                                  f"threshold at this level needs at least 1/epsilon - 1 = {1 / e - 1:.3g} calibration "
                                  "rows, more than any data set holds")


def check_risk_control(config: Mapping[str, Any]) -> None:
    """``methods.risk_control``: ``cost`` exactly when ``class_cost`` is a loss, finite, and above every
    level (``methods.epsilon``, else ``baselines.icp_epsilon``), the bound ``B`` of that loss.

    Raises
    ------
    ConfigError
        ``"config: methods.risk_control.cost: missing: losses has class_cost ..."``.
    """
    methods = config.get("methods") or {}
    rc = methods.get("risk_control") or {}
    losses, cost = list(rc.get("losses") or []), rc.get("cost")
    if "class_cost" in losses and not cost:
        raise ConfigError("config: methods.risk_control.cost: missing: losses has class_cost, which needs one cost "
                          "per class")
    if cost and "class_cost" not in losses:
        raise ConfigError("config: methods.risk_control.cost: given but losses has no class_cost (the only loss "
                          "that reads it)")
    if cost:
        values = [float(c) for c in cost]
        bad = [i for i, c in enumerate(values) if not (math.isfinite(c) and c >= 0)]
        if bad:
            raise ConfigError(f"config: methods.risk_control.cost[{bad[0]}]: {cost[bad[0]]!r} is not a finite cost >= 0")
        levels = methods.get("epsilon") or (config.get("baselines") or {}).get("icp_epsilon") or []
        above = [a for a in levels if a >= max(values)]
        if above:
            raise ConfigError(f"config: methods.risk_control.cost: the largest cost {max(values):g} (the loss's bound"
                              f" B) must exceed every level, and {above[0]:g} (methods.epsilon) does not")


def check_class_counts(config: Mapping[str, Any], datasets: Iterable[str] | None = None) -> None:
    """The keys that give one value per class against the number of classes the data files tell up front.

    A model's outputs (``format.kind: model_outputs``) tell their number of classes K before any job: the
    scores file's ``.npy`` header, the shape of its ``.npz`` array, or its CSV/TSV first line (less the
    label and group columns).  Files are found as the workflow finds them: a ``path:`` (relative to the
    current folder) or one already fetched into ``data/<dataset>/raw``; a file not there yet (a download,
    a member of an archive, the pipeline's own product) tells nothing, and its dataset is not checked.
    Checked against K: ``methods.risk_control.cost`` (one cost per class, with ``class_cost``) and a
    model's ``format.class_names`` and ``format.class_names_file`` (one name per class).

    Raises
    ------
    ConfigError
        ``"config: methods.risk_control.cost: 3 costs, but datasets.mine has 4 classes (...)"``.
    """
    known = dict(config.get("datasets") or {})
    names = list(config.get("run") or []) if datasets is None else list(datasets)
    rc = (config.get("methods") or {}).get("risk_control") or {}
    cost = rc.get("cost") if "class_cost" in (rc.get("losses") or []) else None
    for name in names:
        cfg = known.get(name)
        if not isinstance(cfg, Mapping) or not is_model_outputs(cfg):
            continue
        found = model_outputs_classes(name, cfg)
        if found is None:
            continue
        K, source = found
        fmt = cfg.get("format") or {}
        if fmt.get("class_names") is not None and len(fmt["class_names"]) != K:
            raise ConfigError(f"config: datasets.{name}.format.class_names: {len(fmt['class_names'])} names, but the "
                              f"scores have {K} classes ({source}); give one name per class, in the scores' column order")
        names_file = _local_file(name, cfg, fmt.get("class_names_file"))
        if names_file is not None:
            n = _count_lines(names_file)
            if n is not None and n != K:
                raise ConfigError(f"config: datasets.{name}.format.class_names_file: {names_file} names {n} classes, "
                                  f"but the scores have {K} ({source}); one name per line, in the scores' column order")
        if cost and len(cost) != K:
            raise ConfigError(f"config: methods.risk_control.cost: {len(cost)} costs, but datasets.{name} has {K} "
                              f"classes ({source}); give one cost per class, in the class order")


def _local_file(name: str, cfg: Mapping[str, Any], file: Any) -> Path | None:
    """The regular file the workflow will read for the raw file ``file`` of dataset ``name``, when it is
    there before any job: its ``path:`` (as the workflow makes it absolute), else ``data/<name>/raw/<file>``."""
    if not isinstance(file, str):
        return None
    spec = (cfg.get("files") or {}).get(file)
    candidates = []
    if isinstance(spec, Mapping) and isinstance(spec.get("path"), str):
        candidates.append(Path(os.path.abspath(os.path.expanduser(spec["path"]))))
    candidates.append(Path("data") / name / "raw" / file)
    for path in candidates:
        try:
            if path.is_file():
                return path
        except OSError:
            continue
    return None


def _count_lines(path: Path) -> int | None:
    """Lines of a small text file (trailing empty ones dropped), or None when it is not one."""
    try:
        if path.stat().st_size > 1 << 28:
            return None
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    return len(lines)


def model_outputs_classes(name: str, cfg: Mapping[str, Any]) -> tuple[int, str] | None:
    """``(K, where K was read)`` of a ``model_outputs`` dataset from its test (else all) scores file's header,
    or None when the file is not there yet or does not tell (a file the workflow's reader will refuse)."""
    fmt = cfg.get("format") or {}
    parts = fmt.get("parts") or {}
    spec = parts.get("test") or parts.get("all")
    scores = spec.get("scores") if isinstance(spec, Mapping) else spec
    path = _local_file(name, cfg, scores)
    if path is None:
        return None
    try:
        shape = _scores_shape(path, fmt)
    except (OSError, ValueError, EOFError, UnicodeDecodeError):
        return None  # the workflow's reader names what is wrong with it
    if shape is None or len(shape) != 2:
        return None
    return int(shape[1]), f"the {shape[1]} columns of {path}"


def _scores_shape(path: Path, fmt: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The scores' shape from the file's header alone (rows None for CSV/TSV)."""
    import zipfile

    from ._npz import check_npy_header

    suffix = path.suffix.lower()
    if suffix == ".npy":
        with open(path, "rb") as fh:
            return check_npy_header(fh, path.stat().st_size, str(path))[0]
    if suffix == ".npz":
        with zipfile.ZipFile(path) as zf:
            arrays = {n.removesuffix(".npy"): n for n in zf.namelist()}
            key = fmt.get("scores_key")
            if key is None:
                if len(arrays) != 1:
                    return None
                key = next(iter(arrays))
            if key not in arrays:
                return None
            info = zf.getinfo(arrays[key])
            with zf.open(info) as fh:
                return check_npy_header(fh, info.file_size, f"{path}[{key}]")[0]
    if suffix in (".csv", ".tsv", ".txt", ".tab"):
        import csv
        import io

        sep = fmt.get("sep") or ("\t" if suffix in (".tsv", ".tab") else ",")
        with open(path, "rb") as fh:
            head = fh.read(1 << 22)
        if len(head) == 1 << 22 and b"\n" not in head:
            return None  # a first line this long: the reader reads it whole
        text = head.decode("utf-8", errors="ignore").removeprefix("\ufeff")
        first = next(csv.reader(io.StringIO(text, newline=""), delimiter=sep), None)
        if not first:
            return None
        header = fmt.get("header", True) is not False
        taken = 0
        for key in ("label_column", "group_column"):
            column = fmt.get(key)
            if column is None:
                continue
            if header and isinstance(column, str) and column in first:
                taken += 1
            elif not header and isinstance(column, int) and 0 <= column < len(first):
                taken += 1
            else:
                return None  # the reader names the missing column
        return (-1, len(first) - taken)
    return None


#: Every key whose value is a utility spec, or a list of them (checked by :func:`check_utilities`).
UTILITY_KEYS = (
    ("utilities",),
    ("methods", "hierarchical", "utilities"),
    ("report", "illustrations", "entropy", "utilities"),
    ("report", "illustrations", "image_top", "utility"),
    ("report", "illustrations", "text_top", "utility"),
)


def check_utilities(config: Mapping[str, Any]) -> None:
    """Parse every utility spec of the config with :func:`svbop.utility` (the schema checks only its
    shape: ``"nosuch"`` and ``"fbeta:beta=-1"`` pass it).

    Raises
    ------
    ConfigError
        ``"config: methods.hierarchical.utilities[1]: unknown utility 'nosuch' ..."``: the key and
        the parser's reason.
    """
    from .utilities import utility

    for path in UTILITY_KEYS:
        node: Any = config
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is None:
            continue
        if isinstance(node, (list, tuple)):
            specs = [([*path, i], v) for i, v in enumerate(node)]
        else:
            specs = [(list(path), node)]
        for where, spec in specs:
            try:
                utility(spec)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"config: {_key(where)}: {exc}") from None


def check_tuning(name: str, cfg: Mapping[str, Any], tuning: Mapping[str, Any] | None) -> None:
    """The grids one dataset's ``auto`` keys plan: each within :data:`svbop.tuning.MAX_GRID_VALUES`
    values (integers within the fixed keys' cap) and each tuned model within
    :data:`svbop.tuning.MAX_TUNING_POINTS` points (jobs).

    Raises
    ------
    ConfigError
        ``"config: tuning.C_grid, tuning.eps_grid: flat would be tuned over 4,096 points ... (datasets.<name>)"``.
    """
    from .tuning import tuning_points

    entry = {"flat": {} if is_model_outputs(cfg) else cfg.get("flat") or {}}  # no flat model of a model's outputs
    for model in ("hf", "hsg"):  # a model that is not built plans no job
        if (cfg.get(model) or {}).get("enabled"):
            entry[model] = cfg[model]
    try:
        tuning_points(entry, tuning)
    except ValueError as exc:
        raise ConfigError(f"config: {exc} (datasets.{name})") from None
