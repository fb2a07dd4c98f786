"""System checks for configurations that lose work or run it twice."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Warning, register
from django.db import connections

from .conf import pikku_settings


@register()
def check_queue_configuration(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    cluster = getattr(settings, "Q_CLUSTER", {}) or {}
    timeout = cluster.get("timeout")
    retry = cluster.get("retry")
    problems: list[CheckMessage] = []
    if timeout is not None and retry is not None and retry <= timeout:
        problems.append(
            Warning(
                "Q_CLUSTER['retry'] is not above Q_CLUSTER['timeout']: django-q2 re-delivers "
                "tasks that are still running.",
                hint="Use retry >= 300 and well above timeout, e.g. timeout=300, retry=600.",
                id="pikku_workflows.W001",
            )
        )
    if cluster.get("max_attempts", 0) != 1:
        problems.append(
            Warning(
                "Q_CLUSTER['max_attempts'] is not 1: the workflow owns retries, so django-q2 "
                "retries only repeat work the engine already retries.",
                hint="Set Q_CLUSTER['max_attempts'] = 1 and ack_failures = True.",
                id="pikku_workflows.W002",
            )
        )
    if timeout is not None and pikku_settings.STEP_LEASE_SECONDS * 3 < 2:
        problems.append(
            Warning(
                "STEP_LEASE_SECONDS is too short to renew before it lapses.",
                id="pikku_workflows.W003",
            )
        )
    return problems


@register()
def check_database(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    connection = connections["default"]
    if settings.DEBUG or connection.features.has_select_for_update_skip_locked:
        return []
    return [
        Warning(
            f"The default database ({connection.vendor}) has no SELECT ... SKIP LOCKED: several "
            "workers will queue behind each other's claims.",
            hint="Use PostgreSQL in production; SQLite suits one machine and development.",
            id="pikku_workflows.W004",
        )
    ]
