"""The demo host app: an Order model whose fulfilment runs as a workflow."""

from __future__ import annotations

from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "project.demo"
    label = "demo"
    verbose_name = "Demo shop"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the project's system checks
        from .notifications import connect

        connect()  # managers get an e-mail when an order waits for their approval
