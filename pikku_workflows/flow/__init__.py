"""Flow control's rules and their arithmetic (pure: no queries): which runs share a
concurrency key, how many may be active at once, and what a start does when they are; named
limits and the rates that space their starts; the debounce rule that collapses bursts of starts
(docs/flow-control.md)."""

from __future__ import annotations

from .debounce import Debounce, run_debounce_key
from .limits import Limit, checked_limit_names, checked_max_running
from .rates import ParsedRate, parse_rate, schedule_start
from .rules import (
    Concurrency,
    OnFull,
    Priority,
    checked_priority,
    run_concurrency_key,
    run_priority,
)
from .step_rates import Rate, rate_rule, step_rate_key

__all__ = [
    "Concurrency",
    "Debounce",
    "Limit",
    "OnFull",
    "ParsedRate",
    "Priority",
    "Rate",
    "checked_limit_names",
    "checked_max_running",
    "checked_priority",
    "parse_rate",
    "rate_rule",
    "run_concurrency_key",
    "run_debounce_key",
    "run_priority",
    "schedule_start",
    "step_rate_key",
]
