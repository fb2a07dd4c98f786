"""Request and response shapes of the API. Requests are validated here; responses are the
engine's own dicts (`pw.get_run_status`, `pw.get_run_timeline`, ...) passed through as they are,
and the response serializers only describe them for the OpenAPI schema. No business logic."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..approvals.policy import ApprovalPolicy, OnExpire
from ..durations import parse_duration
from ..exceptions import InvalidInput
from ..querysets import RunLevel
from ..status import ApprovalStatus, Compensation, RunStatus
from ..validation import KEY_MAX_LENGTH, NAME_MAX_LENGTH, REASON_MAX_LENGTH
from ..waiting import WaitingKind, kinds_carrying
from .engine_internals import OPERATION_RULES, SHOWN_STEP_STATUSES, Rule

MAX_REASON = REASON_MAX_LENGTH
MAX_KEY = KEY_MAX_LENGTH
MAX_SIGNAL_NAME = NAME_MAX_LENGTH


class CommaSeparatedChoiceField(serializers.MultipleChoiceField):
    """`?include=input,output` or `?include=input&include=output`, as a list in request order."""

    def get_value(self, dictionary: Any) -> Any:
        if self.field_name not in dictionary:
            return serializers.empty
        raw = dictionary.getlist(self.field_name) if hasattr(dictionary, "getlist") else []
        return [part.strip() for item in raw for part in str(item).split(",") if part.strip()]

    def to_internal_value(self, data: Any) -> list[str]:
        chosen = super().to_internal_value(data)
        return [value for value in dict.fromkeys(data) if value in chosen]


# Requests ---------------------------------------------------------------------------------


class StartRunSerializer(serializers.Serializer):
    input = serializers.JSONField(
        required=False, allow_null=True, default=None, help_text="The workflow's input (JSON)."
    )
    idempotency_key = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        max_length=MAX_KEY,
        help_text="Starting again with the same key answers the same run (200); with another "
        "input it is a 409 IDEMPOTENCY_CONFLICT.",
    )


class OperationSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=MAX_REASON,
        help_text="Recorded in the audit trail with your username.",
    )


def flag_fields(rule: Rule) -> dict[str, serializers.Field]:
    """The operation's yes/no flags as body fields, false unless sent."""
    return {
        flag.name: serializers.BooleanField(required=False, default=False, help_text=flag.help)
        for flag in rule.flags
    }


def operation_serializer(rule: Rule) -> type[serializers.Serializer]:
    """The body of `POST runs/{id}/<action>/`: the reason, and the operation's yes/no flags."""
    if not rule.flags:
        return OperationSerializer
    name = f"{rule.action.capitalize()}OperationSerializer"
    return type(name, (OperationSerializer,), flag_fields(rule))


class ForkSerializer(OperationSerializer):
    from_step = serializers.CharField(
        max_length=MAX_KEY,
        help_text="Steps before it keep their recorded results; it and every later one run again.",
    )


class ListQuerySerializer(serializers.Serializer):
    include = CommaSeparatedChoiceField(
        choices=["input", "output"],
        required=False,
        help_text="Add the run's input and/or output to each item (comma-separated).",
    )


class CountsQuerySerializer(serializers.Serializer):
    group_by = CommaSeparatedChoiceField(
        choices=["status", "workflow"],
        required=False,
        help_text="Count per status and/or per workflow (comma-separated); none: the total only.",
    )


class StateQuerySerializer(serializers.Serializer):
    at = serializers.CharField(
        required=False,
        max_length=64,
        help_text="A timeline seq (-1: before the first event) or an ISO 8601 datetime "
        "(inclusive); default: the last event.",
    )


class EventsQuerySerializer(serializers.Serializer):
    last_event_id = serializers.IntegerField(
        required=False,
        min_value=-1,
        max_value=2**63 - 1,
        help_text="Resume after this seq (the `Last-Event-ID` header wins over it).",
    )


class BulkOptionsSerializer(OperationSerializer):
    dry_run = serializers.BooleanField(
        required=False, default=False, help_text="Only report which runs it would act on."
    )


def bulk_options_serializer(rule: Rule) -> type[serializers.Serializer]:
    """The options of `POST runs/bulk/<action>/`: dry_run, the reason and the operation's flags."""
    name = f"Bulk{rule.action.capitalize()}OptionsSerializer"
    return type(name, (BulkOptionsSerializer,), flag_fields(rule))


class BulkFiltersSerializer(BulkOptionsSerializer):
    """The list's filters (at least one), as JSON values, plus the operation's options.

    Describes the body for the schema; the filters are validated by the list's FilterSet.
    """

    id = serializers.ListField(child=serializers.UUIDField(), required=False)
    status = serializers.ListField(
        child=serializers.ChoiceField(choices=RunStatus.choices), required=False
    )
    workflow = serializers.ListField(
        child=serializers.CharField(max_length=MAX_KEY), required=False
    )
    started_after = serializers.DateTimeField(required=False)
    started_before = serializers.DateTimeField(required=False)
    finished_after = serializers.DateTimeField(required=False)
    finished_before = serializers.DateTimeField(required=False)
    started_by = serializers.CharField(required=False, max_length=MAX_KEY)
    level = serializers.ChoiceField(
        choices=RunLevel.values,
        required=False,
        help_text="top, children or all (a bulk operation takes every level unless told).",
    )
    parent_run = serializers.UUIDField(required=False)
    has_parent = serializers.BooleanField(required=False)
    subject_type = serializers.CharField(required=False, max_length=MAX_KEY)
    subject_id = serializers.CharField(required=False, max_length=MAX_KEY)
    waiting_on = serializers.ChoiceField(choices=WaitingKind.values, required=False)
    awaiting_approval = serializers.BooleanField(required=False)
    latest_only = serializers.BooleanField(required=False)
    q = serializers.CharField(required=False, max_length=MAX_KEY)


def _every_bulk_flag() -> dict[str, serializers.Field]:
    """Each flag of a bulk operation, its help naming the operations that take it."""
    fields: dict[str, serializers.Field] = {}
    for flag in {flag for rule in OPERATION_RULES.values() if rule.bulk for flag in rule.flags}:
        actions = [rule.action for rule in OPERATION_RULES.values() if flag in rule.flags]
        help_text = f"{', '.join(actions)} only: {flag.help}"
        fields[flag.name] = serializers.BooleanField(
            required=False, default=False, help_text=help_text
        )
    return fields


# The body of a bulk operation as the schema shows it: the filters, the options, every flag.
BulkSerializer = type("BulkSerializer", (BulkFiltersSerializer,), _every_bulk_flag())


def bulk_option_names(rule: Rule) -> tuple[str, ...]:
    return ("reason", "dry_run", *(flag.name for flag in rule.flags))


class DecisionSerializer(serializers.Serializer):
    comment = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=MAX_REASON,
        help_text="Recorded with your decision and in the run's audit trail.",
    )
    data = serializers.JSONField(
        required=False,
        allow_null=True,
        default=None,
        help_text="What you fill in: the approval's form fields (validated by its form; see the "
        "approval's `form`), or any JSON object when it has none.",
    )


class ReassignSerializer(serializers.Serializer):
    approvers = serializers.ListField(
        child=serializers.CharField(max_length=MAX_KEY),
        allow_empty=True,
        help_text='The new approvers: usernames, "group:<name>", "perm:<app_label.codename>"; '
        "an empty list: anyone holding the decide permission.",
    )
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=MAX_REASON,
        help_text="Recorded in the audit trail with your username.",
    )


class SignalSerializer(serializers.Serializer):
    payload = serializers.JSONField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Any JSON: what the run's `wf.wait_for_signal` returns.",
    )


MAX_UPDATE_WAIT_MS = 30_000


class UpdateSerializer(serializers.Serializer):
    payload = serializers.JSONField(
        required=False, allow_null=True, default=None, help_text="Any JSON: the update's payload."
    )
    wait = serializers.ChoiceField(
        choices=["completed", "accepted"],
        default="completed",
        help_text="completed: answer with the run's reply (200); accepted: at once (202).",
    )
    timeout = serializers.CharField(
        default="10s",
        help_text='How long to wait for the reply ("500ms", "10s"; at most 30 s); then 504.',
    )
    update_id = serializers.CharField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Names the update: the same id again is the same update, answered once.",
    )

    def validate_timeout(self, value: str) -> str:
        # A request holds a web worker while it waits: never longer than MAX_UPDATE_WAIT_MS.
        try:
            parse_duration(value, what="timeout", limit_ms=MAX_UPDATE_WAIT_MS)
        except InvalidInput as exc:
            raise serializers.ValidationError(exc.message) from exc
        return value


class UpdateAnswerSerializer(serializers.Serializer):
    update_id = serializers.CharField()
    result = serializers.JSONField(
        required=False, allow_null=True, help_text="The run's reply (with wait=completed)."
    )


# Responses (documentation of the engine's dicts) --------------------------------------------


class StepSummarySerializer(serializers.Serializer):
    key = serializers.CharField()
    status = serializers.ChoiceField(
        choices=SHOWN_STEP_STATUSES,
        help_text="As recorded; `cancelled`: a pending or scheduled step of a cancelled run.",
    )
    attempts = serializers.IntegerField()
    duration_ms = serializers.IntegerField(allow_null=True)
    function = serializers.CharField(allow_null=True)
    gather = serializers.CharField(
        allow_null=True,
        help_text="The gather (wf.gather, wf.map) the step is a member of, by its first "
        "member's key or the map's; null for a step of its own",
    )


class WaitingOnSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text=" | ".join(WaitingKind.values))
    step_key = serializers.CharField(required=False)
    reason = serializers.CharField(required=False, help_text=kinds_carrying("reason"))
    child_run_id = serializers.UUIDField(required=False, help_text=kinds_carrying("child_run_id"))
    until = serializers.DateTimeField(required=False, help_text=kinds_carrying("until"))
    at = serializers.DateTimeField(required=False, help_text=kinds_carrying("at"))
    attempt = serializers.IntegerField(
        required=False, help_text=f"{kinds_carrying('attempt')}: the next attempt"
    )
    lease_expires_at = serializers.DateTimeField(
        required=False, help_text=kinds_carrying("lease_expires_at")
    )


class RunErrorSerializer(serializers.Serializer):
    code = serializers.CharField(allow_null=True)
    message = serializers.CharField(allow_null=True)


class RunFieldsSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    workflow = serializers.CharField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    started_by = serializers.CharField(allow_null=True, help_text="username")
    steps = StepSummarySerializer(many=True)
    planned_steps = serializers.ListField(child=serializers.CharField(), allow_null=True)
    waiting_on = WaitingOnSerializer(allow_null=True)
    error = RunErrorSerializer(allow_null=True)
    compensation = serializers.ChoiceField(
        choices=Compensation.choices,
        allow_null=True,
        help_text="Undoing the run's succeeded steps (compensate=): null while nothing needs it",
    )
    continued_from = serializers.UUIDField(
        allow_null=True, help_text="The run this one continues (wf.continue_as_new)"
    )
    continued_to = serializers.UUIDField(
        allow_null=True, help_text="The run that continues this one, once it is continued"
    )


class RunSummarySerializer(RunFieldsSerializer):
    """`pw.get_run_status(run_id)`."""

    output = serializers.JSONField(allow_null=True, help_text="Set once the run completed.")


class ListWaitingOnSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=WaitingKind.choices)
    step_key = serializers.CharField(required=False, allow_null=True)


class RunListItemSerializer(serializers.Serializer):
    """What the list shows of a run, read from its row alone (as of its last pass or move): the
    summary without its steps; `include=input,output` adds either."""

    id = serializers.UUIDField()
    workflow = serializers.CharField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    started_by = serializers.CharField(allow_null=True, help_text="username")
    planned_steps = serializers.ListField(child=serializers.CharField(), allow_null=True)
    steps_total = serializers.IntegerField(help_text="Steps the run has reached.")
    steps_done = serializers.IntegerField(help_text="Steps that succeeded.")
    current_step_key = serializers.CharField(
        allow_null=True, help_text="Its newest step in flight, else its newest step."
    )
    waiting_on = ListWaitingOnSerializer(
        allow_null=True,
        help_text="What a live run waits on: the kind, and the step (kinds but suspend, pass); "
        "the run's own summary has the details.",
    )
    last_error_code = serializers.CharField(
        allow_null=True, help_text="The run's error code, else its newest failed step's."
    )
    error = RunErrorSerializer(allow_null=True)
    compensation = serializers.ChoiceField(choices=Compensation.choices, allow_null=True)
    input = serializers.JSONField(allow_null=True, required=False)
    output = serializers.JSONField(allow_null=True, required=False)


class TimelineEventSerializer(serializers.Serializer):
    """One event of `pw.get_run_timeline(run_id)` (docs/http-api.md)."""

    seq = serializers.IntegerField()
    at = serializers.DateTimeField()
    step_key = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField(allow_null=True)
    event = serializers.CharField(help_text="A step status, or an operator action.")
    result = serializers.JSONField(required=False, allow_null=True)
    error = serializers.JSONField(required=False, allow_null=True)
    from_step_key = serializers.CharField(required=False, allow_null=True)
    user = serializers.CharField(required=False, allow_null=True)


class StepStateSerializer(serializers.Serializer):
    status = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField()
    result = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)


class RunStateSerializer(serializers.Serializer):
    """`pw.reconstruct_run_state(run_id, at)`."""

    seq = serializers.IntegerField()
    at = serializers.DateTimeField(allow_null=True)
    phase = serializers.ChoiceField(
        choices=["pending", "running", "waiting", "failed", "completed", "idle"]
    )
    steps = serializers.DictField(child=StepStateSerializer())
    path = serializers.ListField(child=serializers.CharField())
    results = serializers.DictField(child=serializers.JSONField(allow_null=True))


class DefinitionSerializer(serializers.Serializer):
    name = serializers.CharField()
    kind = serializers.CharField(help_text="dsl | graph | dynamic")
    version_hash = serializers.CharField()
    planned_steps = serializers.ListField(child=serializers.CharField(), allow_null=True)


class DefinitionDetailSerializer(DefinitionSerializer):
    definition = serializers.JSONField(
        allow_null=True, help_text="The graph (JSON) of a graph workflow; null for Python ones."
    )


class CountGroupSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=RunStatus.choices, required=False)
    workflow = serializers.CharField(required=False)
    count = serializers.IntegerField()


class CountsSerializer(serializers.Serializer):
    total = serializers.IntegerField()
    groups = CountGroupSerializer(many=True)


class ApprovalDecisionSerializer(serializers.Serializer):
    user = serializers.CharField(help_text="username")
    approve = serializers.BooleanField()
    comment = serializers.CharField(allow_blank=True)
    data = serializers.JSONField(allow_null=True)
    at = serializers.DateTimeField()


class ApprovalSerializer(serializers.Serializer):
    """`pw.get_approval(approval_id)`: the fields docs/http-api.md names, the request and its options,
    and every decision so far."""

    id = serializers.UUIDField()
    run_id = serializers.UUIDField()
    workflow = serializers.CharField()
    step_key = serializers.CharField()
    attempt = serializers.IntegerField(help_text="The step's attempt that asked for it.")
    status = serializers.ChoiceField(choices=ApprovalStatus.choices)
    summary = serializers.CharField(allow_blank=True, help_text="What is asked, for the decider.")
    request_data = serializers.JSONField(allow_null=True, help_text="The workflow's `data=`.")
    approvers = serializers.ListField(
        child=serializers.CharField(),
        help_text='Usernames, "group:<name>", "perm:<app_label.codename>"; none: anyone holding '
        "the decide permission.",
    )
    policy = serializers.ChoiceField(choices=ApprovalPolicy.choices)
    quorum = serializers.IntegerField(allow_null=True)
    exclude_requester = serializers.BooleanField(help_text="Four eyes.")
    form = serializers.CharField(allow_null=True, help_text="The dotted path of its Form class.")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    on_expire = serializers.ChoiceField(choices=OnExpire.choices)
    escalate_to = serializers.ListField(child=serializers.CharField())
    escalated_at = serializers.DateTimeField(allow_null=True)
    decided_by = serializers.CharField(
        allow_null=True, help_text="The username whose decision settled it."
    )
    decided_at = serializers.DateTimeField(allow_null=True)
    comment = serializers.CharField(allow_blank=True)
    data = serializers.JSONField(allow_null=True, help_text="The settling decision's data.")
    decisions = ApprovalDecisionSerializer(many=True)


class ErrorSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable: RUN_NOT_FOUND, INVALID_TRANSITION, ...")
    detail = serializers.CharField()
    problems = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="INVALID_INPUT found by the engine: every problem, when there are several.",
    )


class ValidationErrorSerializer(ErrorSerializer):
    fields = serializers.DictField(
        required=False, child=serializers.JSONField(), help_text="DRF's errors per field."
    )


class IneligibleRunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=RunStatus.choices)
    reason = serializers.CharField()


class BulkOutcomeSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    outcome = serializers.ChoiceField(choices=["done", "failed"])
    status = serializers.ChoiceField(choices=RunStatus.choices, allow_null=True)
    error = ErrorSerializer(allow_null=True)


class BulkResultSerializer(serializers.Serializer):
    operation = serializers.ChoiceField(
        choices=[action for action, rule in OPERATION_RULES.items() if rule.bulk]
    )
    dry_run = serializers.BooleanField()
    eligible_count = serializers.IntegerField()
    ineligible_count = serializers.IntegerField()
    eligible = serializers.ListField(child=serializers.UUIDField())
    ineligible = IneligibleRunSerializer(many=True)
    truncated = serializers.BooleanField(help_text="The id lists stop at the bulk limit.")
    done_count = serializers.IntegerField(required=False)
    failed_count = serializers.IntegerField(required=False)
    outcomes = BulkOutcomeSerializer(many=True, required=False)


class LimitUsageSerializer(serializers.Serializer):
    running = serializers.IntegerField(
        help_text="Step attempts executing under this limit's max_running now."
    )
    queued = serializers.IntegerField(help_text="Runs a rate of this limit holds queued now.")
    next_start_at = serializers.DateTimeField(
        allow_null=True, help_text="When the next start may begin; null: at once."
    )


class LimitCodeSerializer(serializers.Serializer):
    rate = serializers.CharField(allow_null=True)
    burst = serializers.IntegerField()
    max_running = serializers.IntegerField(allow_null=True)


class LimitSerializer(serializers.Serializer):
    name = serializers.CharField()
    rate = serializers.CharField(
        allow_null=True,
        help_text='Starts per period: "10/s", "600/m", "5/h", "100/d"; null: no rate.',
    )
    burst = serializers.IntegerField()
    max_running = serializers.IntegerField(
        allow_null=True,
        help_text="At most this many of its step attempts execute at once (an operator's "
        "bound, else the code's); null: no bound.",
    )
    managed_by = serializers.ChoiceField(
        choices=["code", "admin"], help_text="admin: an operator's edit wins over the code."
    )
    code = LimitCodeSerializer(allow_null=True, help_text="The limit as defined in code, if it is.")
    usage = LimitUsageSerializer()


class LimitUpdateSerializer(serializers.Serializer):
    rate = serializers.CharField(required=False)
    burst = serializers.IntegerField(required=False, min_value=0)
    max_running = serializers.IntegerField(
        required=False,
        allow_null=True,
        help_text="At most this many of its step attempts execute at once, from now on (1 to "
        "100000; only for a limit the code gives a max_running); null: the code's again. "
        "Raised, it admits waiting attempts at once; lowered, it lets those executing finish.",
    )
