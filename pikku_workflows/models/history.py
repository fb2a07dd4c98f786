"""What happened to a run: its append-only event log and the operators' audit trail."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from ..validation import KEY_MAX_LENGTH
from .runs import WorkflowRun, WorkflowStep


class WorkflowAuditEntry(models.Model):
    """An operator action on a run: who did what, why, and the status before and after."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="audit_entries")
    step = models.ForeignKey(
        WorkflowStep, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    action = models.CharField(max_length=32)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True, default="")
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name_plural = "workflow audit entries"

    def __str__(self) -> str:
        return f"{self.action} on {self.run_id}"


class WorkflowEvent(models.Model):
    """One entry of a run's timeline, append-only: an attempt reaching a status, or an operator
    action. Database triggers on the history and audit tables write it in the statement that
    records the move; `seq` (gapless per run, in commit order) and `at` (the database clock) are
    assigned as the writing transaction commits (docs/architecture.md §14)."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: unique (run, seq) serves lookups by run.
    run = models.ForeignKey(
        WorkflowRun, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    # NULL only inside the writing transaction, until it commits (on PostgreSQL).
    seq = models.PositiveIntegerField(null=True, blank=True)
    at = models.DateTimeField()
    step_key = models.CharField(max_length=KEY_MAX_LENGTH, null=True, blank=True)
    attempt = models.PositiveIntegerField(null=True, blank=True)
    event = models.CharField(max_length=32)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            # Every row, numbered or not (NULLs never clash): the index also serves the foreign
            # key, whose check for a deleted run's events reads by run alone; a partial index
            # cannot answer it, and a purge scanned the whole log once per run.
            models.UniqueConstraint(fields=["run", "seq"], name="pikku_event_run_seq"),
        ]
        indexes = [
            # Deleting a user sets its operator events' user to NULL.
            models.Index(fields=["user"], name="pikku_event_user", condition=Q(user__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.event} #{self.seq} of {self.run_id}"
