"""App config: registers the system checks, autodiscovers `workflows` modules (no queries), and
upserts the schedules declared in code after `migrate`."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models.signals import post_migrate


class PikkuWorkflowsConfig(AppConfig):
    name = "pikku_workflows"
    verbose_name = "Workflows"
    # Fixed so Django 5.2 and 6.x (whose default differs) generate the same migrations.
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks
        from .conf import pikku_settings
        from .observability.log_context import install_run_context_filter
        from .registry import autodiscover

        autodiscover(pikku_settings.MODULES)
        install_run_context_filter()
        post_migrate.connect(_upsert_declared_schedules, sender=self)


def _upsert_declared_schedules(using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> None:
    from .engine.operations.schedules import upsert_declared_schedules
    from .models import WorkflowSchedule

    # A migrate back to before schedules leaves no table to write to.
    tables = connections[using].introspection.table_names()
    if using == DEFAULT_DB_ALIAS and WorkflowSchedule._meta.db_table in tables:
        upsert_declared_schedules()
