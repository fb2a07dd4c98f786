"""Runs, steps, per-attempt step history, workflow versions, the operator audit trail,
approvals with their decisions, the signals sent to runs, the running workers, the
tombstones purged runs leave, and schedules with their ticks, backfills and audit trail."""

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
from .schedules.choices import BackfillStatus, CatchUp, ManagedBy, Overlap, Reprocess, TickOutcome
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
from .waiting import WaitingKind


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
    # Kept from every purge, whatever its age (`pw.hold_run`): an investigation, a legal hold.
    retention_hold = models.BooleanField(default=False)
    # What a list shows of the run, kept on its row by the writes that end a pass or move the
    # run (`engine/store/run_list_fields`), so a page reads one row per run.
    steps_total = models.PositiveIntegerField(default=0, db_default=0, editable=False)
    steps_done = models.PositiveIntegerField(default=0, db_default=0, editable=False)
    current_step_key = models.CharField(
        max_length=KEY_MAX_LENGTH, null=True, blank=True, editable=False
    )
    waiting_on = models.CharField(
        max_length=16,
        choices=WaitingKind.choices,
        null=True,
        blank=True,
        default=WaitingKind.PASS,
        db_default=WaitingKind.PASS,
        editable=False,
    )
    last_error_code = models.CharField(max_length=64, null=True, blank=True, editable=False)
    # The key its workflow's concurrency rule gave it (docs/flow-control.md); NULL without one.
    concurrency_key = models.CharField(max_length=KEY_MAX_LENGTH, null=True, blank=True)
    # Seconds a queued run goes ahead of its start time: admission order is created_at - priority.
    priority = models.IntegerField(default=0)
    # A queued run is not admitted before this time (database clock).
    not_before = models.DateTimeField(null=True, blank=True)
    # The schedule that started the run, and the nominal time of its tick (`wf.scheduled_for`).
    schedule = models.ForeignKey(
        "WorkflowSchedule", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    scheduled_for = models.DateTimeField(null=True, blank=True)
    # The W3C trace context the run's spans belong under: its caller's at start, or for a
    # child run its parent's step attempt (docs/observability.md, "Traces").
    traceparent = models.CharField(max_length=55, null=True, blank=True, editable=False)
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
            # The list's filters by what a run waits on (awaiting approval is `approval`) and
            # by when it finished (its starter, parent and subject have their foreign keys').
            models.Index(fields=["waiting_on", "created_at"], name="pikku_run_waiting_created"),
            models.Index(fields=["finished_at"], name="pikku_run_finished"),
            # The admin counts runs per version ("started on an older version").
            models.Index(fields=["workflow", "code_version"], name="pikku_run_workflow_version"),
            models.Index(fields=["subject_type", "subject_id"], name="pikku_run_subject"),
            # Admission finds the queued runs of one key (and recovery every key with some).
            models.Index(
                fields=["workflow", "concurrency_key", "created_at"],
                name="pikku_run_queued_key",
                condition=Q(status="queued"),
            ),
            # The timer loop admits queued runs whose rate's time came.
            models.Index(
                fields=["not_before"],
                name="pikku_run_queued_not_before",
                condition=Q(status="queued", not_before__isnull=False),
            ),
            # The stalled-run sweep scans running runs by age.
            models.Index(
                fields=["updated_at"],
                name="pikku_run_running_updated",
                condition=Q(status="running"),
            ),
            # A purge takes ended root runs oldest first, in (finished_at, id) batches.
            models.Index(
                fields=["finished_at", "id"],
                name="pikku_run_purgeable",
                condition=Q(parent_run__isnull=True, finished_at__isnull=False),
            ),
        ]
        permissions = [
            ("cancel_workflowrun", "Can cancel workflow runs"),
            ("suspend_workflowrun", "Can suspend workflow runs"),
            ("resume_workflowrun", "Can resume workflow runs"),
            ("retry_workflowrun", "Can retry workflow runs"),
            ("fork_workflowrun", "Can fork workflow runs"),
            ("signal_workflowrun", "Can send signals to workflow runs"),
            ("hold_workflowrun", "Can hold workflow runs from purges and release them"),
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
            # Numbered rows only: a row numbered at commit leaves no entry behind in it.
            models.UniqueConstraint(
                fields=["run", "seq"], name="pikku_event_run_seq", condition=Q(seq__isnull=False)
            ),
        ]
        indexes = [
            # Deleting a user sets its operator events' user to NULL.
            models.Index(fields=["user"], name="pikku_event_user", condition=Q(user__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.event} #{self.seq} of {self.run_id}"


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


class WorkflowSlot(models.Model):
    """A place an admitted run holds under a rule: `rule` names it (`workflow:<name>` for a
    workflow's concurrency rule), `key` is the run's key under it. A concurrency slot is held
    from admission until its run ends, and deleted in the transaction that ends it."""

    id = models.BigAutoField(primary_key=True)
    rule = models.CharField(max_length=NAME_MAX_LENGTH + 16)
    key = models.CharField(max_length=KEY_MAX_LENGTH)
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="slots")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["run", "rule"], name="pikku_slot_run_rule_unique")
        ]
        indexes = [models.Index(fields=["rule", "key"], name="pikku_slot_rule_key")]

    def __str__(self) -> str:
        return f"slot of {self.run_id} under {self.rule} ({self.key})"


class WorkflowSlotCount(models.Model):
    """How many slots of `key` under `rule` are held: the row a start's one statement counts
    and takes a slot with (its row lock makes concurrent starts of one key take turns), and the
    lock whatever frees or hands out the key's slots holds first."""

    id = models.BigAutoField(primary_key=True)
    rule = models.CharField(max_length=NAME_MAX_LENGTH + 16)
    key = models.CharField(max_length=KEY_MAX_LENGTH)
    held = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule", "key"], name="pikku_slot_count_rule_key")
        ]

    def __str__(self) -> str:
        return f"{self.held} slot(s) of {self.key} under {self.rule}"


class WorkflowLimit(models.Model):
    """A named limit's rate as it applies now: code (`pw.define_limit`) writes its default
    (`managed_by="code"`); an operator's edit (`managed_by="admin"`) wins over later deploys."""

    class ManagedBy(models.TextChoices):
        CODE = "code", "Code"
        ADMIN = "admin", "Admin"

    name = models.CharField(max_length=NAME_MAX_LENGTH, unique=True)
    rate = models.CharField(max_length=32)
    burst = models.PositiveIntegerField(default=0)
    managed_by = models.CharField(max_length=8, choices=ManagedBy.choices, default=ManagedBy.ADMIN)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"limit {self.name} ({self.rate}, burst {self.burst})"


class WorkflowRate(models.Model):
    """Where a limit's rate stands for one key: the theoretical arrival time (GCRA) the last
    start left, on the database clock."""

    id = models.BigAutoField(primary_key=True)
    limit_name = models.CharField(max_length=NAME_MAX_LENGTH)
    key = models.CharField(max_length=KEY_MAX_LENGTH, blank=True, default="")
    tat = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["limit_name", "key"], name="pikku_rate_limit_key")
        ]

    def __str__(self) -> str:
        return f"rate of {self.limit_name} ({self.key or 'every run'})"


class WorkflowSchedule(models.Model):
    """A workflow started on a cron expression or an interval (docs/schedules.md). Durations are
    milliseconds; `next_fire_at` is the next tick's nominal time plus its jitter: the timer
    loop fires the schedule once the database clock passes it."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=NAME_MAX_LENGTH, unique=True)
    workflow = models.CharField(max_length=NAME_MAX_LENGTH)
    input = models.JSONField(null=True, blank=True)
    cron = models.CharField(max_length=200, null=True, blank=True)
    every_ms = models.BigIntegerField(null=True, blank=True)
    timezone = models.CharField(max_length=64, default="UTC")
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    overlap = models.CharField(max_length=16, choices=Overlap.choices, default=Overlap.SKIP)
    catch_up = models.CharField(max_length=16, choices=CatchUp.choices, default=CatchUp.LATEST)
    catch_up_window_ms = models.BigIntegerField(default=3_600_000)
    catch_up_max = models.PositiveIntegerField(default=100)
    jitter_ms = models.BigIntegerField(null=True, blank=True)
    pause_on_failure = models.BooleanField(default=False)
    paused = models.BooleanField(default=False)
    pause_note = models.TextField(blank=True, default="")
    # The next tick's nominal time, and when it fires (plus jitter); NULL: no tick is left
    # before end_at.
    next_nominal_at = models.DateTimeField(null=True, blank=True)
    next_fire_at = models.DateTimeField(null=True, blank=True)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    last_outcome = models.CharField(max_length=16, choices=TickOutcome.choices, blank=True)
    # Ticks `skip` dropped since the last one that started a run (the list flags a long run).
    skipped_in_a_row = models.PositiveIntegerField(default=0)
    managed_by = models.CharField(max_length=8, choices=ManagedBy.choices, default=ManagedBy.ADMIN)
    # The definition the code declared at its last upsert: "code differs" once an edit made
    # the schedule the admin's and a deploy declares something else.
    code_definition = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            _choice_check("pikku_schedule_overlap_valid", Overlap, field="overlap"),
            _choice_check("pikku_schedule_catch_up_valid", CatchUp, field="catch_up"),
            _choice_check("pikku_schedule_managed_by_valid", ManagedBy, field="managed_by"),
            models.CheckConstraint(
                condition=Q(cron__isnull=True) ^ Q(every_ms__isnull=True),
                name="pikku_schedule_cron_or_every",
            ),
        ]
        indexes = [
            # The timer loop's one query per tick: the due, unpaused schedules, soonest first.
            models.Index(
                fields=["next_fire_at"], name="pikku_schedule_due", condition=Q(paused=False)
            ),
        ]

    def __str__(self) -> str:
        return self.name


class WorkflowScheduleTick(models.Model):
    """One nominal time of a schedule and what became of it: at most one per (schedule,
    nominal_at), so no tick fires twice."""

    id = models.BigAutoField(primary_key=True)
    schedule = models.ForeignKey(WorkflowSchedule, on_delete=models.CASCADE, related_name="ticks")
    nominal_at = models.DateTimeField()
    fired_at = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=TickOutcome.choices)
    run = models.ForeignKey(
        WorkflowRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    backfill = models.ForeignKey(
        "WorkflowBackfill", null=True, blank=True, on_delete=models.SET_NULL, related_name="ticks"
    )
    reason = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-nominal_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["schedule", "nominal_at"], name="pikku_tick_schedule_nominal_unique"
            ),
            _choice_check("pikku_tick_outcome_valid", TickOutcome, field="outcome"),
        ]
        indexes = [models.Index(fields=["run"], name="pikku_tick_run")]

    def __str__(self) -> str:
        return f"{self.schedule_id} {self.nominal_at.isoformat()} {self.outcome}"


class WorkflowBackfill(models.Model):
    """A schedule's nominal times in [start, end) started after the fact, in order, at most
    `max_active` runs at a time; worked through a batch at a time by the timer loop."""

    id = models.BigAutoField(primary_key=True)
    schedule = models.ForeignKey(
        WorkflowSchedule, on_delete=models.CASCADE, related_name="backfills"
    )
    start = models.DateTimeField()
    end = models.DateTimeField()
    reprocess = models.CharField(max_length=8, choices=Reprocess.choices)
    max_active = models.PositiveIntegerField(default=1)
    status = models.CharField(
        max_length=16, choices=BackfillStatus.choices, default=BackfillStatus.RUNNING
    )
    # How many nominal times it starts (the dry run's count), how many it has, and the last
    # nominal time it has dealt with (the next batch begins after it).
    total = models.PositiveIntegerField(default=0)
    started = models.PositiveIntegerField(default=0)
    cursor = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            _choice_check("pikku_backfill_status_valid", BackfillStatus),
            _choice_check("pikku_backfill_reprocess_valid", Reprocess, field="reprocess"),
        ]
        indexes = [
            models.Index(
                fields=["created_at"], name="pikku_backfill_running", condition=Q(status="running")
            )
        ]

    def __str__(self) -> str:
        return f"backfill {self.pk} of {self.schedule_id}"


class WorkflowScheduleAuditEntry(models.Model):
    """An operator action on a schedule (create, edit, pause, resume, trigger, backfill,
    delete): who, when, and what changed."""

    id = models.BigAutoField(primary_key=True)
    schedule = models.ForeignKey(
        WorkflowSchedule, null=True, on_delete=models.SET_NULL, related_name="audit_entries"
    )
    schedule_name = models.CharField(max_length=NAME_MAX_LENGTH)
    action = models.CharField(max_length=16)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    note = models.TextField(blank=True, default="")
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        verbose_name_plural = "workflow schedule audit entries"

    def __str__(self) -> str:
        return f"{self.action} on {self.schedule_name}"


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
