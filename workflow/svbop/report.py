"""Tables for the report (written atomically: temporary file, then rename)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from .utilities import STANDARD_UTILITIES, utility_table

__all__ = ["write_utility_table"]


def write_utility_table(path: str | os.PathLike, specs=STANDARD_UTILITIES, K: int = 100) -> None:
    """Write the property table of ``specs`` for ``K`` classes as a TSV file."""
    rows = utility_table(specs, K=K)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
