"""The workflow versions deployed and the workers running them."""

from __future__ import annotations

from django.db import models

from ..validation import NAME_MAX_LENGTH


class WorkflowVersion(models.Model):
    """A version of a workflow definition, recorded when a run of it starts.

    `graph_hash` is the version key: a graph workflow's topology hash, or a DSL workflow's
    code fingerprint (also kept in `code_version`), so unique (name, graph_hash) holds for both.
    """

    class Kind(models.TextChoices):
        # The docs' words: a workflow is code (a Python body) or a graph (JSON data).
        DSL = "dsl", "Code workflow"
        GRAPH = "graph", "Graph workflow"
        DYNAMIC = "dynamic", "Dynamic workflow"

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        DRAFT = "draft", "Draft"
        DECLINED = "declined", "Declined"

    name = models.CharField(max_length=NAME_MAX_LENGTH)
    graph_hash = models.CharField(max_length=64)
    code_version = models.CharField(max_length=64, blank=True, default="")
    definition = models.JSONField(null=True, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.DSL)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["name", "graph_hash"], name="pikku_version_name_hash"),
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.graph_hash}"


class WorkflowWorker(models.Model):
    """A running `pikku_worker` process: registered when it starts, `last_seen_at` refreshed by
    its timer loop, removed when it stops cleanly. A worker that was killed stops being seen."""

    id = models.BigAutoField(primary_key=True)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    cluster = models.CharField(max_length=NAME_MAX_LENGTH)
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    steps_in_flight = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["host", "pid"]
        indexes = [models.Index(fields=["last_seen_at"], name="pikku_worker_last_seen")]

    def __str__(self) -> str:
        return f"pikku_worker {self.pid} on {self.host} ({self.cluster})"
