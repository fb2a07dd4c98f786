"""The quoted names of the engine's tables and columns that its named statements (`*.sql`) use,
read from the models' `_meta`."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Field

from ...models import (
    WorkflowAuditEntry,
    WorkflowLimit,
    WorkflowRate,
    WorkflowRun,
    WorkflowRunCount,
    WorkflowRunCountChange,
    WorkflowSignal,
    WorkflowSlot,
    WorkflowSlotCount,
    WorkflowStep,
    WorkflowStepHistory,
    WorkflowUpdate,
    WorkflowVersion,
)
from ...sql import quoted_table


def engine_names() -> dict[str, str]:
    user = get_user_model()
    username = user._meta.get_field(user.USERNAME_FIELD)
    assert isinstance(username, Field) and username.column is not None
    assert user._meta.pk is not None and user._meta.pk.column is not None
    return {
        "run": quoted_table(WorkflowRun),
        "run_count": quoted_table(WorkflowRunCount),
        "run_count_change": quoted_table(WorkflowRunCountChange),
        "audit": quoted_table(WorkflowAuditEntry),
        "step": quoted_table(WorkflowStep),
        "history": quoted_table(WorkflowStepHistory),
        "signal": quoted_table(WorkflowSignal),
        "update": quoted_table(WorkflowUpdate),
        "version": quoted_table(WorkflowVersion),
        "slot": quoted_table(WorkflowSlot),
        "slot_count": quoted_table(WorkflowSlotCount),
        "limit": quoted_table(WorkflowLimit),
        "rate": quoted_table(WorkflowRate),
        "user": quoted_table(user),
        "user_pk": connection.ops.quote_name(user._meta.pk.column),
        "username": connection.ops.quote_name(username.column),
    }
