"""Runs, steps, per-attempt step history, workflow versions, the operator audit trail,
approvals with their decisions, the signals sent to runs, and the running workers."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .approvals.policy import ApprovalPolicy, OnExpire
from .querysets import WorkflowApprovalQuerySet, WorkflowRunQuerySet, WorkflowStepQuerySet
from .status import (
    TERMINAL_RUN_STATUSES,
    ApprovalStatus,
    Compensation,
    RunStatus,
    StepDispatch,
    StepKind,
    StepStatus,
)
from .validation import KEY_MAX_LENGTH, NAME_MAX_LENGTH


def _choice_check(
    name: str, choices: type[models.TextChoices], field: str = "status"
) -> models.CheckConstraint:
    # Django 5.1 renamed CheckConstraint(check=) to condition=; 5.2 and 6.x both take condition.
    return models.CheckConstraint(condition=Q(**{f"{field}__in": choices.values}), name=name)


class WorkflowRun(models.Model):
    """One execution of a workflow."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workflow = models.CharField(max_length=NAME_MAX_LENGTH)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.RUNNING)
    input = models.JSONField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    state = models.JSONField(default=dict, blank=True)
    planned_steps = models.JSONField(null=True, blank=True)
    graph_hash = models.CharField(max_length=64, blank=True, default="")
    code_version = models.CharField(max_length=64, blank=True, default="")
    inline = models.BooleanField(default=False)
    idempotency_key = models.CharField(max_length=KEY_MAX_LENGTH, null=True, blank=True)
    # The namespace of `idempotency_key` (IDEMPOTENCY_SCOPE, `scope=`): keys of different scopes
    # never meet. "" is the unscoped namespace every run started before scopes lives in.
    idempotency_scope = models.CharField(max_length=KEY_MAX_LENGTH, blank=True, default="")
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    subject_type = models.ForeignKey(
        ContentType, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    subject_id = models.CharField(max_length=KEY_MAX_LENGTH, null=True, blank=True)
    subject = GenericForeignKey("subject_type", "subject_id")
    parent_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="child_runs"
    )
    parent_step = models.ForeignKey(
        "WorkflowStep", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    forked_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    # The run this one continues (`wf.continue_as_new`); unique, so a run has one successor.
    continued_from = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="continued_by"
    )
    lease_holder = models.CharField(max_length=64, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    rerun_requested = models.BooleanField(default=False)
    # Kept for a run-level timer; today every timer (sleep, retry backoff) lives on its step row.
    wake_at = models.DateTimeField(null=True, blank=True)
    # Seeds `wf.random()`, `wf.uuid4()` and `wf.uuid7()`: the same draws on every replay. NULL
    # for runs started before it existed (their draws derive from the run's id).
    random_seed = models.BigIntegerField(null=True, blank=True, editable=False)
    # Undoing the run's succeeded steps (`compensate=`); NULL while nothing needs undoing.
    compensation = models.CharField(
        max_length=24, choices=Compensation.choices, null=True, blank=True
    )
    # Why they are undone: the error the run ends with once they are (its body's failure, or
    # the cancel that asked for it).
    compensation_cause = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = WorkflowRunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            _choice_check("pikku_run_status_valid", RunStatus),
            _choice_check("pikku_run_compensation_valid", Compensation, field="compensation"),
            models.UniqueConstraint(
                fields=["workflow", "idempotency_scope", "idempotency_key"],
                name="pikku_run_idempotency_key_unique",
            ),
        ]
        indexes = [
            # The API's run list pages on (created_at, id), newest first, with no filter.
            models.Index(fields=["created_at", "id"], name="pikku_run_created_id"),
            models.Index(fields=["status", "created_at"], name="pikku_run_status_created"),
            models.Index(fields=["workflow", "created_at"], name="pikku_run_workflow_created"),
            # The admin counts runs per version ("started on an older version").
            models.Index(fields=["workflow", "code_version"], name="pikku_run_workflow_version"),
            models.Index(fields=["subject_type", "subject_id"], name="pikku_run_subject"),
            # The stalled-run sweep scans running runs by age.
            models.Index(
                fields=["updated_at"],
                name="pikku_run_running_updated",
                condition=Q(status="running"),
            ),
        ]
        permissions = [
            ("cancel_workflowrun", "Can cancel workflow runs"),
            ("suspend_workflowrun", "Can suspend workflow runs"),
            ("resume_workflowrun", "Can resume workflow runs"),
            ("retry_workflowrun", "Can retry workflow runs"),
            ("fork_workflowrun", "Can fork workflow runs"),
            ("signal_workflowrun", "Can send signals to workflow runs"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow} {self.id} ({self.status})"

    @property
    def is_settled(self) -> bool:
        return self.status in TERMINAL_RUN_STATUSES


class WorkflowStep(models.Model):
    """One durable unit of a run, unique per run by its step key; reused across attempts."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: unique (run, step_key) serves lookups by run.
    run = models.ForeignKey(
        WorkflowRun, on_delete=models.CASCADE, related_name="steps", db_index=False
    )
    step_key = models.CharField(max_length=KEY_MAX_LENGTH)
    kind = models.CharField(max_length=16, choices=StepKind.choices, default=StepKind.FUNCTION)
    function_name = models.CharField(max_length=NAME_MAX_LENGTH, null=True, blank=True)
    data = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=StepStatus.choices, default=StepStatus.PENDING)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    attempt_limit = models.PositiveIntegerField(default=6)
    retries = models.PositiveIntegerField(default=5)
    retry_delay = models.CharField(max_length=32, blank=True, default="")
    timeout_ms = models.PositiveIntegerField(null=True, blank=True)
    from_step_key = models.CharField(max_length=KEY_MAX_LENGTH, null=True, blank=True)
    child_run = models.ForeignKey(
        WorkflowRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    branch_taken = models.CharField(max_length=NAME_MAX_LENGTH, null=True, blank=True)
    copied = models.BooleanField(default=False)
    # The step function's writes commit with its result, in one transaction (`atomic=True`).
    atomic = models.BooleanField(default=False)
    # The gather this step is a member of (`wf.gather`, `wf.map`): its first member's key, or
    # the map's. Its members wake the run once, when the last of them settles.
    gather_key = models.CharField(max_length=KEY_MAX_LENGTH, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    wake_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = WorkflowStepQuerySet.as_manager()

    class Meta:
        ordering = ["created_at"]
        constraints = [
            _choice_check("pikku_step_status_valid", StepStatus),
            _choice_check("pikku_step_kind_valid", StepKind, field="kind"),
            models.UniqueConstraint(fields=["run", "step_key"], name="pikku_step_run_key_unique"),
        ]
        indexes = [
            models.Index(fields=["run", "status"], name="pikku_step_run_status"),
            # Recovery relays pending/scheduled steps whose queue message may be lost.
            models.Index(
                fields=["updated_at"],
                name="pikku_step_undispatched",
                condition=Q(status__in=["pending", "scheduled"]),
            ),
            # Recovery re-claims running steps whose lease lapsed.
            models.Index(
                fields=["lease_expires_at"],
                name="pikku_step_running_lease",
                condition=Q(status="running"),
            ),
            # The timer loop claims due sleeps and retry backoffs.
            models.Index(
                fields=["wake_at"], name="pikku_step_wake_at", condition=Q(wake_at__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.step_key} ({self.status}, attempt {self.attempt})"


class WorkflowStepHistory(models.Model):
    """One attempt of a step, with the time it reached each status."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: unique (step, attempt) serves lookups by step.
    step = models.ForeignKey(
        WorkflowStep, on_delete=models.CASCADE, related_name="history", db_index=False
    )
    attempt = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=StepStatus.choices)
    # How the attempt was dispatched; NULL until it runs.
    dispatch = models.CharField(max_length=16, choices=StepDispatch.choices, null=True, blank=True)
    # The process that ran it, `host:pid` (a pikku_worker's, as its `WorkflowWorker` row names
    # it); NULL until it runs.
    worker = models.CharField(max_length=300, null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    # Not auto_now_add: attempt 1's row takes its step's creation moment exactly.
    created_at = models.DateTimeField(default=timezone.now)
    scheduled_at = models.DateTimeField(null=True, blank=True)
    running_at = models.DateTimeField(null=True, blank=True)
    waiting_at = models.DateTimeField(null=True, blank=True)
    succeeded_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "attempt"]
        verbose_name_plural = "workflow step history"
        constraints = [
            _choice_check("pikku_history_status_valid", StepStatus),
            _choice_check("pikku_history_dispatch_valid", StepDispatch, field="dispatch"),
            models.UniqueConstraint(fields=["step", "attempt"], name="pikku_history_step_attempt"),
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt} ({self.status})"


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
            _choice_check("pikku_approval_status_valid", ApprovalStatus),
            _choice_check("pikku_approval_policy_valid", ApprovalPolicy, field="policy"),
            _choice_check("pikku_approval_on_expire_valid", OnExpire, field="on_expire"),
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
