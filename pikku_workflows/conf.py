"""pikku_workflows settings: `settings.PIKKU_WORKFLOWS`, then environment, then defaults; read on access."""

from __future__ import annotations

import math
import os
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

DEFAULTS: dict[str, Any] = {
    "DEFAULT_STEP_RETRIES": 5,
    "STEP_LEASE_SECONDS": 60,
    "RUN_LEASE_SECONDS": 30,
    "INLINE_SLEEP_MAX_SECONDS": 5,
    "RELAY_PENDING_AFTER_SECONDS": 30,
    "STALLED_RUN_AFTER_SECONDS": 300,
    "REDISPATCH_BACKOFF_SECONDS": 30,
    "REDISPATCH_BACKOFF_MAX_SECONDS": 600,
    "RECOVERY_BATCH": 100,
    "TIMER_POLL_SECONDS": 0.2,
    "RECOVERY_INTERVAL_SECONDS": 5,
    "MODULES": [],
    "ORCHESTRATOR_QUEUE": None,
    "MAX_PAYLOAD_BYTES": 10_000_000,
    "IN_PLACE": True,
    "IN_PLACE_MAX_SECONDS": 1,
    "IN_PLACE_MAX_STEPS": 100,
    # The most members one `wf.gather` (or items one `wf.map`), and the longest list a graph
    # node's for_each fans out over unless the node sets max_items.
    "MAX_FAN_OUT": 1000,
    # The most nodes a graph workflow may have when it is registered.
    "GRAPH_MAX_NODES": 5000,
    # The most approver entries one approval (or its escalation, or a reassign) may name.
    "MAX_APPROVERS": 100,
    # The most signals a run keeps that no wait has taken yet; more are refused.
    "MAX_KEPT_SIGNALS": 1000,
    # Dotted path to `f(request, queryset) -> queryset`: narrows the runs the HTTP API shows
    # (tenants); applied after the owner rule, on every endpoint that reads a run.
    "RUN_QUERYSET_FILTER": None,
    # Dotted path to `f(request) -> str`: the scope of the HTTP API's idempotency keys (tenants);
    # keys of different scopes never meet.
    "IDEMPOTENCY_SCOPE": None,
    # Open event streams (`GET runs/{id}/events/`) one process serves; past it, 503.
    "MAX_EVENT_STREAMS": 100,
    # What a replay that asks for another function at a recorded key does: "fail" the run with
    # NON_DETERMINISTIC, or "suspend" it for an operator to fork or cancel.
    "ON_NON_DETERMINISM": "fail",
    "WORKER_HEARTBEAT_SECONDS": 10,
    # The site's address (e.g. "https://ops.example.com"): log lines link to run pages under it.
    "ADMIN_BASE_URL": None,
}

ON_NON_DETERMINISM_CHOICES = ("fail", "suspend")
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


class Settings:
    """Attribute access to the settings; `override_settings(PIKKU_WORKFLOWS=...)` takes effect at once.

    Numeric and true/false settings can also come from `PIKKU_<NAME>` environment variables
    (`PIKKU_IN_PLACE=false`), so end-to-end tests can shrink leases and windows for worker
    subprocesses; the settings dict wins over both. A value that reads as neither is
    ImproperlyConfigured, naming the variable.
    """

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown pikku_workflows setting {name!r}")
        configured = getattr(django_settings, "PIKKU_WORKFLOWS", {}) or {}
        if name in configured:
            return configured[name]
        default = DEFAULTS[name]
        from_env = os.environ.get(f"PIKKU_{name}")
        if from_env is None or not isinstance(default, int | float):
            return default
        if isinstance(default, bool):
            return _flag(name, from_env)
        return _number(name, from_env)


def _flag(name: str, text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS | FALSE_WORDS:
        return word in TRUE_WORDS
    raise ImproperlyConfigured(
        f"PIKKU_{name} must be true or false (1/0, yes/no, on/off), not {text!r}."
    )


def _number(name: str, text: str) -> int | float:
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ImproperlyConfigured(f"PIKKU_{name} must be a number, not {text!r}.")
    # "0.5" stays a float even where the default is an int: tests shrink leases below 1 s.
    return int(number) if number.is_integer() else number


pikku_settings = Settings()
