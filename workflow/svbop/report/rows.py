"""How many rows each part of ``svbop report``'s split needs, checked before any work.

The workflow splits the parts not given off the test rows (:func:`svbop.datasets.outputs.split_model_outputs`):
validation by ``split.validation`` (10 %), calibration by ``split.calibration: auto`` (at least the rows one
finite conformal threshold needs, at most half of the test rows), and the test keeps the rest.  Each part
needs rows:

* validation: at least 1 (the temperature and the threshold baseline are fitted on it);
* calibration: at least :func:`svbop.conformal.min_calibration_rows` at the smallest epsilon
  (``ceil(1/epsilon - 1)``: 9 at 0.1); with fewer, no conformal threshold is finite;
* test: at least 1.

Too few rows are refused here in one line naming the option the user typed (``--test``,
``--calibration``, ``--epsilon``) and how many rows each part needs, instead of failing in the
workflow after work has started.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["check_part_rows", "split_rows"]


def split_rows(rows: Mapping[str, int], *, validation_share: float = 0.1) -> dict[str, int]:
    """The most rows each part can get: ``validation`` and ``test`` as split, ``calibration`` at most."""
    from ..datasets.calibration_share import MOST_SHARE
    from ..datasets.outputs import part_rows

    pool = int(rows.get("test", 0))
    val = int(rows["validation"]) if "validation" in rows else part_rows(validation_share, pool)
    taken = 0 if "validation" in rows else val
    if "calibration" in rows:
        cal = int(rows["calibration"])
    else:
        cal = max(0, min(int(math.floor(MOST_SHARE * pool)), pool - taken - 1))
    return {"validation": val, "calibration": cal, "test": pool - taken}


def _fewest_test_rows(given: Mapping[str, int], need_cal: int, validation_share: float) -> int:
    """The fewest test rows that leave every part its rows (given parts as they are)."""
    n = 1
    while True:
        parts = split_rows({**given, "test": n}, validation_share=validation_share)
        if parts["validation"] >= 1 and parts["calibration"] >= need_cal and parts["test"] - (
                0 if "calibration" in given else need_cal) >= 1:
            return n
        n = n + 1 if n < 64 else int(n * 1.05) + 1


def check_part_rows(rows: Mapping[str, int], *, epsilons: Sequence[float] | None,
                    validation_share: float = 0.1) -> None:
    """Refuse row counts the workflow cannot split into parts with the rows each needs.

    Parameters
    ----------
    rows : mapping
        Rows of each part given (``test``, and ``validation``/``calibration`` when given).
    epsilons : sequence of float or None
        The levels the user typed (None: the default 0.1).
    validation_share : float
        ``split.validation``.

    Raises
    ------
    ValueError
        One line naming the option and the rows each part needs.
    """
    from ..conformal import min_calibration_rows

    eps = min(epsilons) if epsilons else 0.1
    need_cal = min_calibration_rows(eps)
    given = {p: int(n) for p, n in rows.items() if p in ("validation", "calibration")}
    parts = split_rows(rows, validation_share=validation_share)
    at = f"epsilon {eps:g}" + ("" if epsilons else ", the default")
    pool = int(rows.get("test", 0))
    needs = (f"validation 1 (the temperature and the threshold baseline are fitted on it), calibration {need_cal:,} "
             f"(one finite conformal threshold at {at}), test 1")
    if "calibration" in given and given["calibration"] < need_cal:
        raise ValueError(f"--calibration: {given['calibration']:,} rows, but a finite conformal threshold at {at} "
                         f"needs at least {need_cal:,} (1/epsilon - 1); give more calibration rows"
                         f"{' or a larger --epsilon' if epsilons else ''} (its {given['calibration']:,} rows allow "
                         f"epsilon >= {1 / (given['calibration'] + 1):.3g})")
    if parts["validation"] < 1 or parts["calibration"] < need_cal or parts["test"] - (
            0 if "calibration" in given else need_cal) < 1:
        split_off = [p for p in ("validation", "calibration") if p not in given]
        enough_at_default = _fewest_test_rows(given, min_calibration_rows(0.1), validation_share) <= pool
        if epsilons and enough_at_default:  # the rows are fine; the level asks for more of them
            raise ValueError(f"--epsilon {eps:g}: a finite conformal threshold at this level needs at least "
                             f"{need_cal:,} calibration rows (1/epsilon - 1), and the {pool:,} test rows "
                             f"give at most {parts['calibration']:,} (half of them); give --epsilon >= "
                             f"{1 / (parts['calibration'] + 1):.3g}, or more rows (--calibration)")
        fewest = _fewest_test_rows(given, need_cal, validation_share)
        raise ValueError(f"--test: {pool:,} rows are too few to split off {' and '.join(split_off)} rows: "
                         f"the parts need at least {needs}, so at least {fewest:,} test rows; give more rows, or "
                         f"{' and '.join('--' + p for p in split_off)}")
