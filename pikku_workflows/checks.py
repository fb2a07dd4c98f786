"""System checks for configurations that lose work, run it twice, or crawl; for deploys that
run no `pikku_worker` (where that can be told); for graph workflows whose definition cannot
run (every problem, one error each); and for mistakes in the pikku_workflows settings."""

from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import DatabaseError, connections

from .conf import ON_NON_DETERMINISM_CHOICES, pikku_settings, settings_problems
from .exceptions import InvalidInput
from .graph.validation import structure_problems
from .registry import graph_function_problems, registry
from .retention import parse_retention


@register()
def check_queue_configuration(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    cluster = getattr(settings, "Q_CLUSTER", {}) or {}
    timeout, retry = cluster.get("timeout"), cluster.get("retry")
    problems: list[CheckMessage] = []
    if timeout is not None and retry is not None and retry <= timeout:
        problems.append(
            Warning(
                "Q_CLUSTER['retry'] is not above Q_CLUSTER['timeout']: django-q2 re-delivers "
                "tasks that are still queued or running once wait + run time exceed 'retry'.",
                hint="Use retry >= 300 and well above timeout, e.g. timeout=300, retry=600.",
                id="pikku_workflows.W001",
            )
        )
    if cluster.get("max_attempts", 0) != 1:
        problems.append(
            Warning(
                "Q_CLUSTER['max_attempts'] is not 1: the workflow owns retries, so django-q2's "
                "own retries only repeat work the engine already retries.",
                hint="Set Q_CLUSTER['max_attempts'] = 1 and ack_failures = True.",
                id="pikku_workflows.W002",
            )
        )
    if cluster.get("save_limit", 250) != -1:
        problems.append(
            Warning(
                "Q_CLUSTER['save_limit'] is not -1: django-q2 writes a result row for every "
                "orchestrator pass and step attempt, which the workflow tables already record.",
                hint="Set Q_CLUSTER['save_limit'] = -1.",
                id="pikku_workflows.W003",
            )
        )
    return problems


# The commands that set a deployment up or start its work: where advice about it belongs.
STARTUP_COMMANDS = frozenset({"check", "migrate", "pikku_worker"})


def _command() -> str | None:
    """The management command this process runs (`manage.py <command>`), if any."""
    return sys.argv[1] if len(sys.argv) > 1 else None


@register()
def check_database(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    connection = connections["default"]
    problems: list[CheckMessage] = []
    # Said where a deploy is decided, not on every `pikku runs` or `runserver` of a laptop.
    if connection.vendor == "sqlite" and _command() in STARTUP_COMMANDS:
        problems.append(
            Warning(
                "The default database is SQLite: workflows run, but on one machine only "
                "(no SELECT ... SKIP LOCKED; one writer at a time).",
                hint="Use PostgreSQL when workers run on more than one machine.",
                id="pikku_workflows.W004",
            )
        )
    # SQLite has no connection to keep: opening its file costs next to nothing.
    elif connection.vendor != "sqlite" and not connection.settings_dict.get("CONN_MAX_AGE"):
        problems.append(
            Warning(
                "CONN_MAX_AGE is 0: every worker task opens a new database connection "
                "(measured: about 10x fewer tasks per second).",
                hint="Set DATABASES['default']['CONN_MAX_AGE'] = 60 (and CONN_HEALTH_CHECKS).",
                id="pikku_workflows.W005",
            )
        )
    return problems


WORKER_HINT = (
    "Start workers with `python manage.py pikku_worker`: it runs a django-q2 cluster and, beside "
    "it, the loop that fires sleeps and retries and runs recovery."
)


@register()
def check_worker_command(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W006: django-q2's own `qcluster` runs queued work but no timer loop: sleeps, retry
    backoffs and recovery would wait for ever (the checks run as that command starts)."""
    if _command() != "qcluster":
        return []
    return [
        Warning(
            "This is django-q2's qcluster, not pikku_worker: queued steps run, but durable "
            "timers (wf.sleep, retry backoffs) never fire and nothing recovers lost work "
            "unless a pikku_worker runs too.",
            hint=WORKER_HINT,
            id="pikku_workflows.W006",
        )
    ]


@register(Tags.database)
def check_timer_loop_running(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """W007 (with `check --database`, and before `migrate`): timers are overdue and no timer
    loop has been seen; a deploy without pikku_worker looks exactly like that. Django names
    `databases` only when database checks are asked for; every other command skips the query."""
    from .models import WorkflowStep
    from .querysets import database_ago
    from .status import RunStatus
    from .worker_registration import SILENT_AFTER_SECONDS, timer_loop_seen

    if not databases:
        return []
    try:
        overdue = WorkflowStep.objects.filter(
            run__status=RunStatus.RUNNING,
            wake_at__lt=database_ago(SILENT_AFTER_SECONDS),
        ).count()
        if not overdue or timer_loop_seen():
            return []
    except DatabaseError:
        return []  # not migrated yet: nothing can be overdue
    return [
        Warning(
            f"{overdue} timer(s) of running runs are more than {SILENT_AFTER_SECONDS} s overdue "
            f"and no pikku_worker timer loop has been seen for {SILENT_AFTER_SECONDS} s.",
            hint=WORKER_HINT,
            id="pikku_workflows.W007",
        )
    ]


@register()
def check_graph_workflows(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E001: a graph definition problem; E002: a node naming an unregistered step function."""
    problems: list[CheckMessage] = []
    for name, definition in sorted(registry.workflows.items()):
        if definition.graph is None:
            continue
        where = f"graph workflow {name!r}"
        problems += [
            Error(problem, obj=where, id="pikku_workflows.E001")
            for problem in structure_problems(definition.graph.source)
        ]
        problems += [
            Error(
                problem,
                hint="Register it with @pw.step_function in a workflows.py module, or list "
                "its module in PIKKU_WORKFLOWS['MODULES'].",
                obj=where,
                id="pikku_workflows.E002",
            )
            for problem in graph_function_problems(definition.graph, registry)
        ]
    return problems


@register()
def check_non_determinism_setting(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E003: ON_NON_DETERMINISM is neither "fail" nor "suspend" (the engine then fails runs)."""
    value = pikku_settings.ON_NON_DETERMINISM
    if isinstance(value, str) and value in ON_NON_DETERMINISM_CHOICES:
        return []
    return [
        Error(
            f"PIKKU_WORKFLOWS['ON_NON_DETERMINISM'] is {value!r}: a replay that asks for another "
            "function than the one recorded then fails its run.",
            hint=f"Use one of {list(ON_NON_DETERMINISM_CHOICES)}.",
            id="pikku_workflows.E003",
        )
    ]


@register()
def check_retention_setting(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E007: RETENTION names a status that never ends a run, or a duration that is none (the
    timer loop then purges nothing by it)."""
    retention = pikku_settings.RETENTION
    if retention is None:
        return []
    try:
        parse_retention(retention, what="PIKKU_WORKFLOWS['RETENTION']")
    except InvalidInput as exc:
        return [Error(exc.message, hint=SETTINGS_HINT, id="pikku_workflows.E007")]
    return []


@register()
def check_payload_limits(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W008: Django refuses bodies it reads itself (the admin's forms, middleware that reads
    `request.body`) over DATA_UPLOAD_MAX_MEMORY_SIZE, below the MAX_PAYLOAD_BYTES the engine and
    the API accept: a payload the API takes would be refused there (docs/security-and-limits.md)."""
    django_limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    limit = pikku_settings.MAX_PAYLOAD_BYTES
    if django_limit is None or django_limit >= limit:
        return []
    return [
        Warning(
            f"DATA_UPLOAD_MAX_MEMORY_SIZE ({django_limit} bytes) is below PIKKU_WORKFLOWS"
            f"['MAX_PAYLOAD_BYTES'] ({limit} bytes): the HTTP API reads its bodies up to "
            "MAX_PAYLOAD_BYTES, but the admin's forms (starting a run with its input) and any "
            "middleware that reads request.body refuse bodies over Django's limit.",
            hint=f"Make them agree: DATA_UPLOAD_MAX_MEMORY_SIZE = {limit}, or lower "
            "MAX_PAYLOAD_BYTES to Django's limit.",
            id="pikku_workflows.W008",
        )
    ]


@register()
def check_workflow_determinism(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W009: a workflow body reads the clock, draws random numbers, makes uuids or reads the
    environment itself: a replay gets another value than the first pass did (the findings are
    read from its source when it registers)."""
    return [
        Warning(
            finding.describe(name),
            hint="Replay-safe helpers return the same value on every replay: wf.now(), "
            "wf.random(), wf.uuid4(), wf.uuid7() (docs/code-workflows.md, Determinism).",
            obj=f"workflow {name!r}",
            id="pikku_workflows.W009",
        )
        for name, definition in sorted(registry.workflows.items())
        for finding in definition.nondeterminism
    ]


SETTINGS_HINT = "Every setting, its type and its default: docs/settings.md."
SETTINGS_CHECK_IDS = {
    "unknown": "pikku_workflows.E004",
    "type": "pikku_workflows.E005",
    "environment": "pikku_workflows.E006",
}


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E004: an unknown PIKKU_WORKFLOWS key (naming the closest known one); E005: a value of the
    wrong type; E006: a PIKKU_<NAME> variable that reads as no value of its setting. Runs would
    use the default meanwhile (docs/settings.md): the check is where the mistake shows."""
    return [
        Error(
            message if message.endswith("?") else f"{message}.",
            hint=SETTINGS_HINT,
            id=SETTINGS_CHECK_IDS[kind],
        )
        for kind, message in settings_problems()
    ]
