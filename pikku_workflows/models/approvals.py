"""Approvals a run waits on, and each approver's decision."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..approvals.policy import ApprovalPolicy, OnExpire
from ..querysets import WorkflowApprovalQuerySet
from ..status import (
    ApprovalStatus,
)
from ..validation import KEY_MAX_LENGTH
from .constraints import choice_check
from .runs import WorkflowRun, WorkflowStep


class WorkflowApproval(models.Model):
    """A person's decision a run waits for (`wf.approval`): one per attempt of its step.

    Its id is derived from the step and attempt (`approvals.policy.approval_id_for`). `expires_at`
    is the recorded deadline (the step's `wake_at` arms it); `remind_at` the next reminder.
    `requesters` are the ids of the users four eyes keep out (who started, forked or retried it).
    """

    id = models.UUIDField(primary_key=True, editable=False)
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="approvals")
    # No index of its own: unique (step, attempt) serves lookups by step.
    step = models.ForeignKey(
        WorkflowStep, on_delete=models.CASCADE, related_name="approvals", db_index=False
    )
    attempt = models.PositiveIntegerField(default=1)
    status = models.CharField(
        max_length=16, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING
    )
    approvers = models.JSONField(default=list, blank=True)
    policy = models.CharField(
        max_length=16, choices=ApprovalPolicy.choices, default=ApprovalPolicy.ANY
    )
    quorum = models.PositiveIntegerField(null=True, blank=True)
    exclude_requester = models.BooleanField(default=False)
    requesters = models.JSONField(default=list, blank=True)
    expires_in_ms = models.PositiveBigIntegerField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    on_expire = models.CharField(max_length=16, choices=OnExpire.choices, default=OnExpire.REJECT)
    escalate_to = models.JSONField(default=list, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    remind_every_ms = models.PositiveBigIntegerField(null=True, blank=True)
    remind_at = models.DateTimeField(null=True, blank=True)
    reminders_sent = models.PositiveIntegerField(default=0)
    form = models.CharField(max_length=KEY_MAX_LENGTH, blank=True, default="")
    summary = models.TextField(blank=True, default="")
    request_data = models.JSONField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(blank=True, default="")
    data = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = WorkflowApprovalQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            choice_check("pikku_approval_status_valid", ApprovalStatus),
            choice_check("pikku_approval_policy_valid", ApprovalPolicy, field="policy"),
            choice_check("pikku_approval_on_expire_valid", OnExpire, field="on_expire"),
            models.UniqueConstraint(fields=["step", "attempt"], name="pikku_approval_step_attempt"),
        ]
        indexes = [
            # The inbox: pending first, newest first.
            models.Index(fields=["status", "created_at"], name="pikku_approval_status_created"),
            # The timer loop sends due reminders of pending approvals.
            models.Index(
                fields=["remind_at"],
                name="pikku_approval_remind_at",
                condition=Q(status="pending", remind_at__isnull=False),
            ),
        ]
        permissions = [
            ("decide_workflowapproval", "Can decide workflow approvals"),
            ("reassign_workflowapproval", "Can reassign workflow approvals"),
        ]

    def __str__(self) -> str:
        return f"approval {self.step_id} ({self.status})"

    @property
    def is_pending(self) -> bool:
        return self.status == ApprovalStatus.PENDING


class WorkflowApprovalDecision(models.Model):
    """One person's decision on an approval (one per person); `matched` are the approver
    entries they matched when they decided, which the `all` policy counts."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: unique (approval, user) serves lookups by approval.
    approval = models.ForeignKey(
        WorkflowApproval, on_delete=models.CASCADE, related_name="decisions", db_index=False
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Kept with the decision: the audit must still name a user who was deleted since.
    username = models.CharField(max_length=KEY_MAX_LENGTH)
    approve = models.BooleanField()
    comment = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    matched = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["approval", "user"], name="pikku_approval_decision_user"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.username} {'approved' if self.approve else 'rejected'}"
