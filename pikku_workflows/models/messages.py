"""What the outside sends a running run: signals, and updates that get an answer."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from ..validation import KEY_MAX_LENGTH, NAME_MAX_LENGTH
from .runs import WorkflowRun, WorkflowStep


class WorkflowSignal(models.Model):
    """An external event sent to a run (`pw.send_signal`), kept until the first wait for its
    name consumes it; consumed signals stay, for the record."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: (run, name, id) serves lookups by run.
    run = models.ForeignKey(
        WorkflowRun, on_delete=models.CASCADE, related_name="signals", db_index=False
    )
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    payload = models.JSONField(null=True, blank=True)
    sent_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    consumed_by_step = models.ForeignKey(
        WorkflowStep, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    consumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # Delivery reads a run's unconsumed signals of one name, oldest first.
            models.Index(fields=["run", "name", "id"], name="pikku_signal_run_name"),
            # MAX_KEPT_SIGNALS counts a run's signals still kept, past any number consumed.
            models.Index(
                fields=["run"],
                condition=models.Q(consumed_at__isnull=True),
                name="pikku_signal_run_kept",
            ),
        ]

    def __str__(self) -> str:
        return f"signal {self.name} to {self.run_id}"


class WorkflowUpdate(models.Model):
    """A write that answers (`pw.update`): accepted once its workflow's validator passed it,
    taken in order by `wf.receive` (through the signal it is sent as), completed by `wf.reply`.
    `update_id` makes a retried call the same update."""

    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="updates")
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    update_id = models.CharField(max_length=KEY_MAX_LENGTH)
    payload = models.JSONField(null=True, blank=True)
    signal = models.OneToOneField(
        WorkflowSignal, null=True, blank=True, on_delete=models.SET_NULL, related_name="update"
    )
    result = models.JSONField(null=True, blank=True)
    sent_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "update_id"], name="pikku_update_run_id_unique")
        ]

    def __str__(self) -> str:
        return f"update {self.name} {self.update_id}"
