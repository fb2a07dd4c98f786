"""Flow control's rules and their arithmetic (pure: no queries): which runs share a
concurrency key, how many may be active at once, and what a start does when they are
(docs/flow-control.md)."""

from __future__ import annotations

from .rules import Concurrency, OnFull, run_concurrency_key

__all__ = ["Concurrency", "OnFull", "run_concurrency_key"]
