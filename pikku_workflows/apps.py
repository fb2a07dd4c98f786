"""App config: registers the system checks and autodiscovers `workflows` modules (no queries)."""

from __future__ import annotations

from django.apps import AppConfig


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
