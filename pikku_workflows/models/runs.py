"""Runs, their steps and each step attempt's history."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q
from django.utils import timezone

from ..querysets import WorkflowRunQuerySet, WorkflowStepQuerySet
from ..status import (
    TERMINAL_RUN_STATUSES,
    Compensation,
    RunStatus,
    StepDispatch,
    StepKind,
    StepStatus,
)
from ..validation import KEY_MAX_LENGTH, NAME_MAX_LENGTH
from ..waiting import WaitingKind
from .constraints import choice_check
from .indexes import CoveringIndex


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
    # Indexed with the start time (Meta.indexes), which serves the foreign key too.
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
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
    # The key its workflow's debounce rule gave it: while it is queued, starts with this key
    # join it (docs/flow-control.md, "Debounce"); and the time its first start's max_wait runs
    # out, past which a joining start no longer moves its not_before (NULL: no max_wait).
    debounce_key = models.CharField(max_length=KEY_MAX_LENGTH, null=True, blank=True)
    debounce_deadline = models.DateTimeField(null=True, blank=True, editable=False)
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
            choice_check("pikku_run_status_valid", RunStatus),
            choice_check("pikku_run_compensation_valid", Compensation, field="compensation"),
            models.UniqueConstraint(
                fields=["workflow", "idempotency_scope", "idempotency_key"],
                name="pikku_run_idempotency_key_unique",
            ),
            # One open debounce window per key: concurrent starts of a key meet on this index
            # and join the one run (run_rows.sql `insert_run`, debounce_transitions.sql).
            models.UniqueConstraint(
                fields=["workflow", "debounce_key"],
                condition=Q(status="queued", debounce_key__isnull=False),
                name="pikku_run_debounce_window",
            ),
        ]
        indexes = [
            # The API's run list pages on (created_at, id), newest first, with no filter.
            models.Index(fields=["created_at", "id"], name="pikku_run_created_id"),
            models.Index(fields=["status", "created_at"], name="pikku_run_status_created"),
            # The list showing the latest run of each chain pages on (created_at, id) without
            # reading the continued runs of long chains.
            models.Index(
                fields=["created_at", "id"],
                name="pikku_run_latest_created",
                condition=~Q(status="continued"),
            ),
            # The API's counts by status and workflow, at any level: an index-only scan (a
            # small index: repeated keys are stored once), never the table.
            models.Index(
                fields=["status", "workflow", "parent_run"], name="pikku_run_status_workflow"
            ),
            models.Index(fields=["workflow", "created_at"], name="pikku_run_workflow_created"),
            # A starter's runs newest first, however few they are among the rest.
            models.Index(fields=["started_by", "created_at"], name="pikku_run_started_by_created"),
            # The list's filters by what a run waits on (awaiting approval is `approval`) and
            # by when it finished (its starter, parent and subject have their foreign keys').
            models.Index(fields=["waiting_on", "created_at"], name="pikku_run_waiting_created"),
            # With what the dashboard counts of the runs that ended in its window, so it reads
            # this index alone.
            CoveringIndex(
                fields=["finished_at"], include=["status", "workflow"], name="pikku_run_finished"
            ),
            # GET metrics/ counts the live runs by what they wait on from this index alone
            # (ended runs record no wait; runs by status it reads from the stored counts).
            models.Index(
                fields=["waiting_on", "workflow"],
                name="pikku_run_live_waiting",
                condition=Q(waiting_on__isnull=False),
            ),
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
            # The stalled-run sweep scans running runs by age; GET metrics/ reads their ids
            # from it alone (runnable steps are steps of running runs).
            CoveringIndex(
                fields=["updated_at"],
                include=["id"],
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
    # The time a limit or rate gave the step's next attempt (database clock): once it has come,
    # the claim starts that attempt without asking the rates again. `admission_hold` says
    # which limit and key gave it ({"reason", "limit", "key"}), for `waiting_on`.
    not_before = models.DateTimeField(null=True, blank=True)
    admission_hold = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = WorkflowStepQuerySet.as_manager()

    class Meta:
        ordering = ["created_at"]
        constraints = [
            choice_check("pikku_step_status_valid", StepStatus),
            choice_check("pikku_step_kind_valid", StepKind, field="kind"),
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
    # The step's function as the attempt ran it (NULL: a step of no function), so the
    # dashboard's durations by function read the attempts alone.
    function_name = models.CharField(max_length=NAME_MAX_LENGTH, null=True, blank=True)
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
            choice_check("pikku_history_status_valid", StepStatus),
            choice_check("pikku_history_dispatch_valid", StepDispatch, field="dispatch"),
            models.UniqueConstraint(fields=["step", "attempt"], name="pikku_history_step_attempt"),
        ]
        indexes = [
            # The dashboard's attempts of a window (durations, queue lag), read from it alone.
            CoveringIndex(
                fields=["running_at"],
                include=[
                    "step",
                    "function_name",
                    "dispatch",
                    "created_at",
                    "scheduled_at",
                    "succeeded_at",
                    "failed_at",
                ],
                name="pikku_history_running",
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt} ({self.status})"
