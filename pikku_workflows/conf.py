"""pikku_workflows settings: `settings.PIKKU_WORKFLOWS`, then environment, then defaults; read on access."""

from __future__ import annotations

import difflib
import logging
import math
import os
from collections.abc import Callable
from types import NoneType
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
    # How long a worker's pass that reached a `wf.receive` with nothing to take waits there for
    # the next update (taken in place, with no new pass and no replay) before parking the run;
    # and the most one message's pass spends so (0: never wait; docs/long-lived-runs.md).
    "RECEIVE_HOLD_SECONDS": 1,
    "RECEIVE_HOLD_MAX_SECONDS": 30,
    # The most members one `wf.gather` (or items one `wf.map`), and the longest list a graph
    # node's for_each fans out over unless the node sets max_items.
    "MAX_FAN_OUT": 1000,
    # The most nodes a graph workflow may have when it is registered.
    "GRAPH_MAX_NODES": 5000,
    # The most approver entries one approval (or its escalation, or a reassign) may name.
    "MAX_APPROVERS": 100,
    # The most signals a run keeps that no wait has taken yet; more are refused.
    "MAX_KEPT_SIGNALS": 1000,
    # The most updates a run holds that no `wf.reply` has answered yet; more are refused.
    "MAX_PENDING_UPDATES": 100,
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
    # The most schedules one tick of the timer loop fires.
    "SCHEDULE_BATCH": 500,
    # The most nominal times one backfill may cover.
    "BACKFILL_MAX_TICKS": 100_000,
    # The site's address (e.g. "https://ops.example.com"): log lines link to run pages under it.
    "ADMIN_BASE_URL": None,
    # How long ended runs are kept, by status (`{"completed": "30d", "failed": "90d"}`); the
    # timer loop purges older ones. None keeps every run (`manage.py pikku_purge` still works).
    "RETENTION": None,
    # Runs a purge deletes per transaction (the longest any of their rows stay locked).
    "PURGE_BATCH": 1000,
    # How often the timer loop purges by RETENTION.
    "PURGE_INTERVAL_SECONDS": 60,
    # How long a purged run's tombstone answers for it (its idempotency key, RunPurged).
    "TOMBSTONE_DAYS": 90,
    # The bearer token a Prometheus scraper sends to `GET metrics/` (staff users need none);
    # None: staff only.
    "METRICS_TOKEN": None,
    # How long one computation of the metrics answers scrapes (0: every scrape queries).
    "METRICS_CACHE_SECONDS": 10,
    # Traces of committed work through OpenTelemetry (needs the `[otel]` extra).
    "OTEL": False,
}

# The types a setting takes where its default cannot tell (a None default; a callable beside a
# dotted path). Every other setting takes its default's type, and an int setting whose name ends
# in `_SECONDS` a float too (tests shrink leases below a second): a setting added to DEFAULTS is
# checked with no more code, and one whose default is None takes anything until listed here.
SETTING_TYPES: dict[str, tuple[Any, ...]] = {
    "ORCHESTRATOR_QUEUE": (str, NoneType),
    "RUN_QUERYSET_FILTER": (str, Callable, NoneType),
    "ADMIN_BASE_URL": (str, NoneType),
    "RETENTION": (dict, NoneType),
    "METRICS_TOKEN": (str, NoneType),
}

ON_NON_DETERMINISM_CHOICES = ("fail", "suspend")
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})
TYPE_WORDS: dict[Any, str] = {
    bool: "True or False",
    int: "an int",
    float: "a float",
    str: "a string",
    list: "a list",
    tuple: "a tuple",
    dict: "a dict",
    Callable: "a callable",
    NoneType: "None",
}

logger = logging.getLogger(__name__)
# Each configuration mistake is logged once per process, not on every access.
_reported: set[str] = set()


class Settings:
    """Attribute access to the settings; `override_settings(PIKKU_WORKFLOWS=...)` takes effect at once.

    Numeric and true/false settings can also come from `PIKKU_<NAME>` environment variables
    (`PIKKU_IN_PLACE=false`), so end-to-end tests can shrink leases and windows for worker
    subprocesses; the settings dict wins over both. A value of the wrong type, or a variable that
    reads as neither, is never used: the default is, with an ERROR logged once (the system check
    `settings_problems` reports it at startup), so a configuration mistake never fails a run.
    """

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"Unknown pikku_workflows setting {name!r}")
        configured = configured_settings()
        default = DEFAULTS[name]
        if name in configured:
            value = configured[name]
            problem = type_problem(name, value)
            return value if problem is None else _report(problem, default)
        from_env = os.environ.get(f"PIKKU_{name}")
        if from_env is None or not _read_from_environment(default):
            return default
        try:
            return environment_value(name, from_env)
        except ImproperlyConfigured as exc:
            return _report(str(exc), default)


def configured_settings() -> dict[str, Any]:
    """`settings.PIKKU_WORKFLOWS`, or {} when it is unset, None or not a dict."""
    configured = getattr(django_settings, "PIKKU_WORKFLOWS", None) or {}
    return configured if isinstance(configured, dict) else {}


def _report(problem: str, default: Any) -> Any:
    if problem not in _reported:
        _reported.add(problem)
        logger.error("pikku_workflows: %s; using the default, %r.", problem, default)
    return default


def _read_from_environment(default: Any) -> bool:
    return isinstance(default, int | float)


def environment_value(name: str, text: str) -> Any:
    """The setting `name` as its `PIKKU_<NAME>` variable's `text` reads (ImproperlyConfigured,
    naming the variable, when it reads as no value of the setting's kind)."""
    if isinstance(DEFAULTS[name], bool):
        return _flag(name, text)
    return _number(name, text)


def _flag(name: str, text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE_WORDS | FALSE_WORDS:
        return word in TRUE_WORDS
    raise ImproperlyConfigured(
        f"PIKKU_{name} must be true or false (1/0, yes/no, on/off), not {text!r}"
    )


def _number(name: str, text: str) -> int | float:
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ImproperlyConfigured(f"PIKKU_{name} must be a number, not {text!r}")
    # "0.5" stays a float even where the default is an int: tests shrink leases below 1 s.
    return int(number) if number.is_integer() else number


def accepted_types(name: str) -> tuple[Any, ...] | None:
    """The types the setting `name` takes (None: anything; see SETTING_TYPES)."""
    if name in SETTING_TYPES:
        return SETTING_TYPES[name]
    default = DEFAULTS[name]
    if default is None:
        return None
    if isinstance(default, bool):
        return (bool,)
    if isinstance(default, float) or (isinstance(default, int) and name.endswith("_SECONDS")):
        return (int, float)
    if isinstance(default, list | tuple):
        return (list, tuple)
    return (type(default),)


def type_problem(name: str, value: Any) -> str | None:
    """Why `value` cannot be the setting `name` (a wrong type, a non-finite number), or None."""
    accepted = accepted_types(name)
    if accepted is None:
        return None
    wrong = not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted)
    if not wrong and not (isinstance(value, float) and not math.isfinite(value)):
        return None
    words = " or ".join(TYPE_WORDS.get(kind, kind.__name__) for kind in accepted)
    return f"PIKKU_WORKFLOWS[{name!r}] is {value!r} ({type(value).__name__}); it takes {words}" + (
        " (finite)" if not wrong else ""
    )


def settings_problems() -> list[tuple[str, str]]:
    """Every configuration mistake, as (kind, message): `unknown` keys of PIKKU_WORKFLOWS (with
    the closest known name), values of the wrong `type`, and `environment` variables that read
    as no value of their setting (or belong to a setting never read from the environment)."""
    configured = getattr(django_settings, "PIKKU_WORKFLOWS", None) or {}
    if not isinstance(configured, dict):
        return [("type", f"PIKKU_WORKFLOWS is {type(configured).__name__}; it takes a dict")]
    problems = [("unknown", _unknown_key(key)) for key in configured if key not in DEFAULTS]
    for name, value in configured.items():
        problem = type_problem(name, value) if name in DEFAULTS else None
        if problem:
            problems.append(("type", problem))
    for name in DEFAULTS:
        problem = _environment_problem(name, configured)
        if problem:
            problems.append(("environment", problem))
    return problems


def _unknown_key(key: Any) -> str:
    close = difflib.get_close_matches(str(key), list(DEFAULTS), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "; it is not a pikku_workflows setting"
    return f"PIKKU_WORKFLOWS has an unknown key {key!r}{hint}"


def _environment_problem(name: str, configured: dict[str, Any]) -> str | None:
    text = os.environ.get(f"PIKKU_{name}")
    if text is None or name in configured:
        return None  # unset, or the dict wins
    if not _read_from_environment(DEFAULTS[name]):
        return (
            f"PIKKU_{name} is set, but {name} is not read from the environment (only numbers "
            "and true/false are): set it in PIKKU_WORKFLOWS"
        )
    try:
        environment_value(name, text)
    except ImproperlyConfigured as exc:
        return str(exc)
    return None


pikku_settings = Settings()
