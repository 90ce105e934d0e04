"""Logging for long-running steps: a log file plus progress on the terminal.

Pipeline scripts call :func:`to_log_file` once; library code logs through
``logging.getLogger(__name__)`` and wraps long loops in :func:`progress`, which draws a tqdm bar
on standard error (the terminal) and writes a line to the log at every tenth of the work, so a
log file read after the fact shows how far a step got and how fast it went.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from tqdm.auto import tqdm

__all__ = ["to_log_file", "progress"]

T = TypeVar("T")
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def to_log_file(path: str | os.PathLike, level: int = logging.INFO) -> logging.Logger:
    """Send log records to ``path`` (overwritten) and to standard error; return the root logger.

    Python warnings are routed into the log as well (``logging.captureWarnings``): they are
    recorded, not silenced.  An uncaught exception is logged with its traceback before the
    process exits, so the log says why a job failed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    formatter = logging.Formatter(_FORMAT)
    file_handler = logging.FileHandler(path, mode="w")
    terminal = logging.StreamHandler(sys.stderr)
    for handler in (file_handler, terminal):
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)

    def log_uncaught(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, value, tb)
            return
        root.critical("failed: %s", value, exc_info=(kind, value, tb))

    sys.excepthook = log_uncaught
    return root


def progress(
    iterable: Iterable[T],
    *,
    desc: str,
    total: int | None = None,
    logger: logging.Logger | None = None,
    every: float = 0.1,
) -> Iterator[T]:
    """Iterate over ``iterable`` with a progress bar on stderr and log lines at each ``every`` of it.

    Parameters
    ----------
    iterable : iterable
        The work items.
    desc : str
        What is being done (e.g. ``"liblinear one-vs-rest"``).
    total : int, optional
        Number of items (default ``len(iterable)`` when it has one).
    logger : logging.Logger, optional
        Where the log lines go (default: the ``svbop`` logger).
    every : float
        Fraction of ``total`` between two log lines.
    """
    logger = logger or logging.getLogger("svbop")
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    start = time.perf_counter()
    step = max(1, int(total * every)) if total else None
    bar = tqdm(iterable, desc=desc, total=total, file=sys.stderr, mininterval=1.0, leave=False)
    done = 0
    try:
        for item in bar:
            yield item
            done += 1
            if step and (done % step == 0 or done == total):
                elapsed = time.perf_counter() - start
                logger.info("%s: %d/%d (%.0f%%) in %.1f s", desc, done, total, 100 * done / total, elapsed)
    finally:
        bar.close()
    if not step:
        logger.info("%s: %d items in %.1f s", desc, done, time.perf_counter() - start)
