"""The scikit-learn examples page (workflow/docs/sklearn.md) runs and prints what it shows.

Every ```python block of the page runs, in order, in one namespace; the ```text block right after
a python block is the output the page claims, and must be what the block prints (numbers may
differ by one unit of their last printed digit, for floating-point noise across BLAS builds).
A python block that prints something must be followed by its output.

``python tests/test_docs_sklearn.py`` reruns the page and rewrites its output blocks.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "workflow" / "docs" / "sklearn.md"
_FENCE = re.compile(r"```(python|text)\n(.*?)```\n", re.S)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def page_blocks(text: str) -> list[tuple[str, str | None, tuple[int, int] | None]]:
    """``(code, claimed output or None, span of the output block)`` for every python block."""
    fences = list(_FENCE.finditer(text))
    blocks = []
    for i, m in enumerate(fences):
        if m.group(1) != "python":
            continue
        nxt = fences[i + 1] if i + 1 < len(fences) else None
        if nxt is not None and nxt.group(1) == "text" and not text[m.end() : nxt.start()].strip():
            blocks.append((m.group(2), nxt.group(2), nxt.span(2)))
        else:
            blocks.append((m.group(2), None, None))
    return blocks


def run_page(text: str) -> list[str]:
    """Run the page's python blocks in order, one namespace, one BLAS thread; their outputs."""
    import numpy  # noqa: F401  (loaded first: threadpool_limits acts on the libraries loaded)
    import scipy.linalg  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    from threadpoolctl import threadpool_limits

    namespace: dict = {"__name__": "__sklearn_page__"}
    outputs = []
    with threadpool_limits(1):  # BLAS threads make these small fits many times slower on a busy machine
        for code, _, _ in page_blocks(text):
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                exec(compile(code, str(PAGE), "exec"), namespace)
            outputs.append(buf.getvalue())
    return outputs


def _last_digit_unit(token: str) -> float:
    mantissa = token.lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exponent = int(token.lower().split("e")[1]) if "e" in token.lower() else 0
    return 10.0 ** (exponent - decimals)


def same_output(got: str, claimed: str) -> bool:
    """Equal text, numbers allowed to differ by one unit of their last printed digit."""
    if _NUMBER.sub("#", got) != _NUMBER.sub("#", claimed):
        return False
    for a, b in zip(_NUMBER.findall(got), _NUMBER.findall(claimed)):
        if abs(float(a) - float(b)) > 1.0001 * _last_digit_unit(b):
            return False
    return True


def test_same_output_tolerates_only_the_last_digit():
    assert same_output("mean 0.931 (size 1.17)\n", "mean 0.932 (size 1.17)\n")
    assert not same_output("mean 0.929 (size 1.17)\n", "mean 0.931 (size 1.17)\n")
    assert not same_output("mean 0.931 size 1.17\n", "mean 0.931 (size 1.17)\n")
    assert not same_output("C = 10\n", "C = 1\n")


def test_the_sklearn_examples_page_runs_and_prints_what_it_shows():
    pytest.importorskip("sklearn", minversion="1.3", reason="the page's examples need scikit-learn >= 1.3")
    text = PAGE.read_text()
    blocks = page_blocks(text)
    assert len(blocks) >= 4, "the page should hold its examples as ```python blocks"
    for (code, claimed, _), got in zip(blocks, run_page(text)):
        if claimed is None:
            assert got == "", f"this block prints but the page shows no output for it:\n{code}"
        else:
            assert same_output(got, claimed), f"the page shows\n{claimed}\nbut the code prints\n{got}\nfor\n{code}"


def _update_page() -> None:
    """Rewrite the page's ```text blocks with what its code prints now."""
    text = PAGE.read_text()
    blocks = page_blocks(text)
    outputs = run_page(text)
    for (code, claimed, span), got in reversed(list(zip(blocks, outputs))):
        if span is not None:
            text = text[: span[0]] + got + text[span[1] :]
        elif got:
            raise SystemExit(f"a block prints but has no ```text block after it:\n{code}")
    PAGE.write_text(text)


if __name__ == "__main__":
    sys.path.insert(0, str(PAGE.parents[1]))
    _update_page()
