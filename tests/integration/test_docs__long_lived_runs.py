"""The cart example of docs/long-lived-runs.md runs: its `python` blocks, in order, as one
module (written to a file and imported, so the determinism check can read the body's source;
its assertions are the test)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "long-lived-runs.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
MODULE = "docs_example_long_lived_runs"


def test_docs__the_cart_example_runs(tmp_path, monkeypatch):
    source = "\n\n".join(BLOCK.findall(PAGE.read_text()))
    assert "docs.cart" in source
    (tmp_path / f"{MODULE}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module(MODULE)
    finally:
        sys.modules.pop(MODULE, None)
