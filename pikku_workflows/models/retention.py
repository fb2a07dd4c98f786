"""What a purged run leaves behind."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from ..status import (
    RunStatus,
)
from ..validation import KEY_MAX_LENGTH, NAME_MAX_LENGTH


class WorkflowRunTombstone(models.Model):
    """What is left of a purged run for TOMBSTONE_DAYS: a start with its idempotency key
    answers with its id, and reading it says it was purged (`RunPurged`), not that it never
    was."""

    id = models.UUIDField(primary_key=True, editable=False)
    workflow = models.CharField(max_length=NAME_MAX_LENGTH)
    status = models.CharField(max_length=16, choices=RunStatus.choices)
    finished_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=KEY_MAX_LENGTH, null=True, blank=True)
    idempotency_scope = models.CharField(max_length=KEY_MAX_LENGTH, blank=True, default="")
    # Who may still be told it was purged (the API answers others as if it never was).
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    purged_at = models.DateTimeField()

    class Meta:
        ordering = ["-purged_at"]
        indexes = [
            # A start with an idempotency key looks for the purged run it names.
            models.Index(
                fields=["workflow", "idempotency_scope", "idempotency_key"],
                name="pikku_tombstone_idempotency",
                condition=Q(idempotency_key__isnull=False),
            ),
            # Tombstones past TOMBSTONE_DAYS go, oldest first.
            models.Index(fields=["purged_at"], name="pikku_tombstone_purged_at"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow} {self.id} (purged)"
