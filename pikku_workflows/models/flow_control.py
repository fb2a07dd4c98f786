"""Concurrency slots, their per-key counts, named limits and rate buckets."""

from __future__ import annotations

from django.db import models

from ..validation import KEY_MAX_LENGTH, NAME_MAX_LENGTH
from .runs import WorkflowRun, WorkflowStep


class WorkflowSlot(models.Model):
    """A place an admitted run or step attempt holds under a rule: `rule` names it
    (`workflow:<name>` for a workflow's concurrency rule, `limit:<name>` for a named limit's
    `max_running`), `key` is the holder's key under it. A concurrency slot is held from
    admission until its run ends, and deleted in the transaction that ends it. A limit's slot
    is held by one attempt of `step` (`attempt`) while it executes, under a lease the heartbeat
    renews: deleted when the attempt's code returns, or freed once the lease lapses."""

    id = models.BigAutoField(primary_key=True)
    rule = models.CharField(max_length=NAME_MAX_LENGTH + 16)
    key = models.CharField(max_length=KEY_MAX_LENGTH)
    run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="slots")
    step = models.ForeignKey(
        WorkflowStep, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    attempt = models.PositiveIntegerField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "rule"],
                condition=models.Q(step__isnull=True),
                name="pikku_slot_run_rule_unique",
            ),
            models.UniqueConstraint(
                fields=["step", "rule"],
                condition=models.Q(step__isnull=False),
                name="pikku_slot_step_rule_unique",
            ),
        ]
        indexes = [
            models.Index(fields=["rule", "key"], name="pikku_slot_rule_key"),
            # The timer loop frees the slots whose holder stopped renewing their lease.
            models.Index(
                fields=["lease_expires_at"],
                name="pikku_slot_lease",
                condition=models.Q(lease_expires_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        holder = f"step {self.step_id} attempt {self.attempt}" if self.step_id else self.run_id
        return f"slot of {holder} under {self.rule} ({self.key})"


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
    """A named limit's rate (and max_running) as it applies now: code (`pw.define_limit`) writes
    its default (`managed_by="code"`); an operator's edit (`managed_by="admin"`) wins over later
    deploys."""

    class ManagedBy(models.TextChoices):
        CODE = "code", "Code"
        ADMIN = "admin", "Admin"

    name = models.CharField(max_length=NAME_MAX_LENGTH, unique=True)
    rate = models.CharField(max_length=32)
    burst = models.PositiveIntegerField(default=0)
    # An operator's bound on the limit's executing step attempts; null: the code's applies.
    max_running = models.PositiveIntegerField(null=True, blank=True)
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
    # A named limit, or "step:<function>" for a step function's own rate.
    limit_name = models.CharField(max_length=NAME_MAX_LENGTH + 16)
    key = models.CharField(max_length=KEY_MAX_LENGTH, blank=True, default="")
    tat = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["limit_name", "key"], name="pikku_rate_limit_key")
        ]

    def __str__(self) -> str:
        return f"rate of {self.limit_name} ({self.key or 'every run'})"
