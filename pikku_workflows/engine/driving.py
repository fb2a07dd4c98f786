"""Which runs this call stack is driving right now (an inline caller and its child runs)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

_driven: ContextVar[frozenset[str]] = ContextVar("pikku_driven_runs", default=frozenset())


@contextlib.contextmanager
def driving(run_id: Any) -> Iterator[None]:
    token = _driven.set(_driven.get() | {str(run_id)})
    try:
        yield
    finally:
        _driven.reset(token)


def is_driven_here(run_id: Any) -> bool:
    """True when an enclosing pass in this call stack will read the run again itself."""
    return str(run_id) in _driven.get()
