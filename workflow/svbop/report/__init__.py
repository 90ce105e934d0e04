"""The report: tables, figures and the self-contained HTML page (``results/report.html``).

Display names and the paper's numbering of its tables and figures are in :mod:`svbop.report.names`
(one place for every name the page shows); the status of every dataset in
:mod:`svbop.report.status`; headless Chromium (the page's screenshot) in :mod:`svbop.report.browser`.
Tables (:mod:`svbop.report.tables`) need pandas; figures (:mod:`svbop.report.figures`) need
matplotlib, imported only when a figure is drawn; the page (:mod:`svbop.report.html`) needs jinja2.
Every file is written atomically (:func:`svbop.io.atomic_path`).
"""

from __future__ import annotations

from .tables import (
    METHOD_ORDER,
    METRICS_COLUMNS,
    SUMMARY_KEYS,
    TABLE2_COLUMNS,
    best_mask,
    dataset_label,
    method_name,
    metrics_long,
    read_metrics,
    read_summaries,
    table2,
    table3,
    utility_columns,
    utility_label,
    utility_name,
    write_table,
    write_utility_table,
)
from .figures import figure_to_png, plot_utilities, save_figure
from .html import build_report, environment_versions

__all__ = [
    "METHOD_ORDER",
    "METRICS_COLUMNS",
    "SUMMARY_KEYS",
    "TABLE2_COLUMNS",
    "best_mask",
    "build_report",
    "dataset_label",
    "environment_versions",
    "figure_to_png",
    "method_name",
    "metrics_long",
    "plot_utilities",
    "read_metrics",
    "read_summaries",
    "save_figure",
    "table2",
    "table3",
    "utility_columns",
    "utility_label",
    "utility_name",
    "write_table",
    "write_utility_table",
]
