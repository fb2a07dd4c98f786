"""Schedules, their ticks, backfills and the schedules' audit trail."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from ..schedules.choices import BackfillStatus, CatchUp, ManagedBy, Overlap, Reprocess, TickOutcome
from ..validation import NAME_MAX_LENGTH
from .constraints import choice_check
from .runs import WorkflowRun


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
            choice_check("pikku_schedule_overlap_valid", Overlap, field="overlap"),
            choice_check("pikku_schedule_catch_up_valid", CatchUp, field="catch_up"),
            choice_check("pikku_schedule_managed_by_valid", ManagedBy, field="managed_by"),
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
            choice_check("pikku_tick_outcome_valid", TickOutcome, field="outcome"),
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
            choice_check("pikku_backfill_status_valid", BackfillStatus),
            choice_check("pikku_backfill_reprocess_valid", Reprocess, field="reprocess"),
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
