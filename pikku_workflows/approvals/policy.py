"""Who may decide an approval and when its decisions settle it: the options of `wf.approval`
checked, approvers matched against a decider, the any/all/quorum rules, and the outcome the
body gets back (pure: no queries; the engine hands in what it read)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import TextChoices

from ..conf import pikku_settings
from ..durations import parse_duration
from ..exceptions import InvalidInput
from ..serialization import NotStorableJson, round_trip
from ..validation import KEY_MAX_LENGTH, REASON_MAX_LENGTH, text_problem

GROUP_PREFIX = "group:"
PERM_PREFIX = "perm:"
# The permission every decider needs, whatever the approvers say.
DECIDE_PERMISSION = "pikku_workflows.decide_workflowapproval"
REASSIGN_PERMISSION = "pikku_workflows.reassign_workflowapproval"
# An approval's id is derived from its step and attempt, so the step alone names it (the run
# summary's `waiting_on.approval_id` needs no query) and a replay cannot insert a second one.
APPROVAL_NAMESPACE = uuid.UUID("70696b6b-7500-5770-9f6c-6f77000a0002")
_PERMISSION = re.compile(r"^[A-Za-z_][\w]*\.[\w]+$")


class ApprovalPolicy(TextChoices):
    ANY = "any", "Any one decision decides"
    ALL = "all", "Every listed approver must approve"
    QUORUM = "quorum", "A quorum of approvals"


class OnExpire(TextChoices):
    REJECT = "reject", "Reject"
    APPROVE = "approve", "Approve"
    FAIL = "fail", "Fail the run"
    ESCALATE = "escalate", "Escalate"


def approval_id_for(step_id: Any, attempt: int) -> uuid.UUID:
    return uuid.uuid5(APPROVAL_NAMESPACE, f"{step_id}:{attempt}")


@dataclass(frozen=True)
class ApprovalRequest:
    """`wf.approval`'s options, checked; durations in milliseconds, the form as a dotted path."""

    approvers: tuple[str, ...] = ()
    policy: str = ApprovalPolicy.ANY
    quorum: int | None = None
    exclude_requester: bool = False
    expires_in_ms: int | None = None
    on_expire: str = OnExpire.REJECT
    escalate_to: tuple[str, ...] = ()
    remind_every_ms: int | None = None
    form: str = ""
    summary: str = ""
    data: Any = None


def checked_request(
    *,
    approvers: Any = None,
    policy: Any = ApprovalPolicy.ANY,
    quorum: Any = None,
    exclude_requester: Any = False,
    expires_in: Any = None,
    on_expire: Any = OnExpire.REJECT,
    escalate_to: Any = None,
    remind_every: Any = None,
    form: str = "",
    summary: Any = "",
    data: Any = None,
) -> ApprovalRequest:
    """The options as an ApprovalRequest, or InvalidInput listing every problem with them."""
    problems: list[str] = []

    def check(what: str, value: Any, parse: Any) -> Any:
        try:
            return parse(value)
        except InvalidInput as exc:
            problems.append(f"{what}: {exc.message}")
            return None

    names = check("approvers", approvers, checked_approvers) or ()
    escalation = check("escalate_to", escalate_to, checked_approvers) or ()
    expires_ms = check("expires_in", expires_in, _positive_duration)
    remind_ms = check("remind_every", remind_every, _positive_duration)
    if policy not in ApprovalPolicy.values:
        problems.append(f"policy must be one of {ApprovalPolicy.values}, not {policy!r}")
    if on_expire not in OnExpire.values:
        problems.append(f"on_expire must be one of {OnExpire.values}, not {on_expire!r}")
    if not isinstance(exclude_requester, bool):
        problems.append(f"exclude_requester must be True or False, not {exclude_requester!r}")
    if not isinstance(summary, str) or len(summary) > REASON_MAX_LENGTH or text_problem(summary):
        problems.append(f"summary must be text of at most {REASON_MAX_LENGTH} characters")
    try:
        stored = round_trip(data)
    except NotStorableJson as exc:
        problems.append(f"data is not storable JSON: {exc}")
        stored = None
    problems += _combination_problems(policy, quorum, names, on_expire, escalate_to, expires_in)
    if problems:
        raise InvalidInput(problems=[f"wf.approval: {problem}" for problem in problems])
    return ApprovalRequest(
        approvers=names,
        policy=policy,
        quorum=quorum,
        exclude_requester=exclude_requester,
        expires_in_ms=expires_ms,
        on_expire=on_expire,
        escalate_to=escalation,
        remind_every_ms=remind_ms,
        form=form,
        summary=summary,
        data=stored,
    )


def _combination_problems(
    policy: Any,
    quorum: Any,
    approvers: Sequence[str],
    on_expire: Any,
    escalate_to: Any,
    expires_in: Any,
) -> list[str]:
    # Options as given (but approvers, checked): one bad escalate_to entry is one problem.
    problems = []
    if policy == ApprovalPolicy.QUORUM:
        if isinstance(quorum, bool) or not isinstance(quorum, int) or quorum < 1:
            problems.append(f"policy 'quorum' needs quorum, a positive int, not {quorum!r}")
        elif approvers and all(is_username(a) for a in approvers) and quorum > len(approvers):
            problems.append(
                f"quorum {quorum} can never be reached by the {len(approvers)} listed users"
            )
    elif quorum is not None:
        problems.append("quorum is only meaningful with policy 'quorum'")
    if policy == ApprovalPolicy.ALL and not approvers:
        problems.append("policy 'all' needs approvers (who is 'all'?)")
    if on_expire == OnExpire.ESCALATE and not escalate_to:
        problems.append("on_expire 'escalate' needs escalate_to")
    if escalate_to and on_expire != OnExpire.ESCALATE:
        problems.append("escalate_to is only meaningful with on_expire 'escalate'")
    if on_expire in OnExpire.values and on_expire != OnExpire.REJECT and expires_in is None:
        problems.append(f"on_expire {on_expire!r} needs expires_in (nothing expires without it)")
    return problems


def checked_approvers(value: Any) -> tuple[str, ...]:
    """A list of usernames, `group:<name>` and `perm:<app_label.codename>`, without repeats; None
    is the empty list (anyone who holds the decide permission). At most `MAX_APPROVERS`."""
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise InvalidInput(
            f"a list of usernames, 'group:<name>' or 'perm:<app_label.codename>', not {value!r}"
        )
    limit = pikku_settings.MAX_APPROVERS
    if len(value) > limit:
        raise InvalidInput(f"at most {limit} approvers (MAX_APPROVERS), not {len(value)}")
    entries: list[str] = []
    for entry in value:
        problem = _entry_problem(entry)
        if problem:
            raise InvalidInput(problem)
        if entry not in entries:
            entries.append(entry)
    return tuple(entries)


def _entry_problem(entry: Any) -> str | None:
    if not isinstance(entry, str) or not entry.strip() or text_problem(entry):
        return f"an approver must be a non-empty string, not {entry!r}"
    if len(entry) > KEY_MAX_LENGTH:
        return f"approver {entry[:40]!r}… is longer than {KEY_MAX_LENGTH} characters"
    if entry.startswith(GROUP_PREFIX) and not entry[len(GROUP_PREFIX) :].strip():
        return f"approver {entry!r} names no group"
    if entry.startswith(PERM_PREFIX) and not _PERMISSION.match(entry[len(PERM_PREFIX) :]):
        return f"approver {entry!r} must name a permission as 'perm:<app_label.codename>'"
    return None


def is_username(entry: str) -> bool:
    return not entry.startswith((GROUP_PREFIX, PERM_PREFIX))


def never_decidable(
    approvers: Sequence[str], policy: str, quorum: int | None, *, excluded: Collection[str]
) -> str | None:
    """Why no one could ever decide an approval with these approvers, `excluded` being the
    usernames four eyes keeps out (the run's requesters); None: someone could.

    A group or a permission can gain members at any time, and no approvers at all means anyone
    holding the decide permission: only a username names one person for good. So an approval is
    undecidable when the approvers its policy needs are all kept out: `any` when every approver
    is, `all` when one is, `quorum` when fewer people than the quorum are left and no group or
    permission could add more.
    """
    kept_out = [entry for entry in approvers if is_username(entry) and entry in excluded]
    left = [entry for entry in approvers if entry not in kept_out]
    needed = quorum or 1
    only_users = approvers and all(map(is_username, left))
    if policy == ApprovalPolicy.QUORUM and only_users and len(left) < needed:
        who = f"{kept_out} requested the run, leaving " if kept_out else ""
        return f"quorum {needed} can never be reached by {who}{len(left)} listed users"
    if not kept_out:
        return None
    if policy == ApprovalPolicy.ALL:
        return f"policy 'all' needs {kept_out}, who requested the run and may not decide it"
    if not left:
        return f"its only approvers {kept_out} requested the run and may not decide it"
    return None


def _positive_duration(value: Any) -> int | None:
    if value is None:
        return None
    milliseconds = parse_duration(value)
    if milliseconds <= 0:
        raise InvalidInput(f"must be longer than zero, not {value!r}")
    return milliseconds


@dataclass(frozen=True)
class Decider:
    """What the policy needs to know of a user who wants to decide."""

    user_id: Any
    username: str
    groups: frozenset[str] = frozenset()
    permissions: frozenset[str] = frozenset()
    is_superuser: bool = False
    may_decide: bool = False  # holds DECIDE_PERMISSION (an active superuser holds every one)

    def matches(self, entry: str) -> bool:
        if entry.startswith(GROUP_PREFIX):
            return entry[len(GROUP_PREFIX) :] in self.groups
        if entry.startswith(PERM_PREFIX):
            return self.is_superuser or entry[len(PERM_PREFIX) :] in self.permissions
        return entry == self.username


@dataclass(frozen=True)
class Vote:
    """A recorded decision: who, which way, and the approver entries they matched then."""

    user_id: Any
    approve: bool
    matched: tuple[str, ...] = ()


def matched_entries(decider: Decider, approvers: Sequence[str]) -> tuple[str, ...]:
    return tuple(entry for entry in approvers if decider.matches(entry))


def refusal(
    decider: Decider,
    approvers: Sequence[str],
    *,
    exclude_requester: bool,
    requesters: Iterable[Any],
) -> str | None:
    """Why `decider` may not decide (None: they may). Every decider needs the decide permission
    and must match the approvers (none listed: anyone with the permission); with four eyes, no
    one who requested the run (started, forked or retried it) may decide."""
    if not decider.may_decide:
        return f"{decider.username} lacks the permission {DECIDE_PERMISSION}"
    if exclude_requester and decider.user_id in set(requesters):
        return f"{decider.username} requested this run; four eyes: someone else must decide"
    if approvers and not matched_entries(decider, approvers):
        return f"{decider.username} is not among the approvers {list(approvers)}"
    return None


def settle(
    policy: str,
    approvers: Sequence[str],
    quorum: int | None,
    votes: Sequence[Vote],
    *,
    undecided_deciders: int | None = None,
) -> str:
    """ "pending", "approved" or "rejected", from the votes so far.

    `any`: the first vote decides. `all`: any rejection rejects; approved once every approver
    entry is covered by the approval of a different person (a user in two listed groups counts
    for one). `quorum`: approved at `quorum` approvals; rejected once the approvals so far plus
    `undecided_deciders` (people who may still decide; None: unknown, so never rejected for that)
    cannot reach it.
    """
    if not votes:
        return "pending"
    approvals = [vote for vote in votes if vote.approve]
    if policy == ApprovalPolicy.ANY:
        return "approved" if votes[0].approve else "rejected"
    if policy == ApprovalPolicy.ALL:
        if len(approvals) < len(votes):
            return "rejected"
        return "approved" if covers_every_entry(approvers, approvals) else "pending"
    needed = quorum or 1
    if len(approvals) >= needed:
        return "approved"
    if undecided_deciders is not None and len(approvals) + undecided_deciders < needed:
        return "rejected"
    return "pending"


def covers_every_entry(entries: Sequence[str], approvals: Sequence[Vote]) -> bool:
    """Whether each entry can be given its own approving vote (a bipartite matching, by
    augmenting paths: entries are few)."""
    holder: dict[int, str] = {}  # vote index -> the entry it covers

    def assign(entry: str, seen: set[int]) -> bool:
        for index, vote in enumerate(approvals):
            if entry not in vote.matched or index in seen:
                continue
            seen.add(index)
            if index not in holder or assign(holder[index], seen):
                holder[index] = entry
                return True
        return False

    return all(assign(entry, set()) for entry in entries)


@dataclass(frozen=True)
class ApprovalOutcome:
    """What `wf.approval` returns. `status` is "approved", "rejected" or "expired" (`approved`
    tells which way an expiry went: `on_expire="approve"` expires approved); `decided_by` is the
    username whose decision settled it (for `all`/`quorum` the last decider; None on expiry);
    `data` is that decider's cleaned form data; `decisions` lists every decision as
    `{user, approve, comment, data, at}`."""

    status: str
    approved: bool
    decided_by: str | None = None
    decided_at: datetime | None = None
    comment: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    decisions: list[dict[str, Any]] = field(default_factory=list)
    approval_id: str | None = None

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> ApprovalOutcome:
        """The outcome recorded as the approval step's result (`outcome_result`)."""
        decided_at = result.get("decided_at")
        return cls(
            status=result["status"],
            approved=bool(result["approved"]),
            decided_by=result.get("decided_by"),
            decided_at=datetime.fromisoformat(decided_at) if decided_at else None,
            comment=result.get("comment") or "",
            data=dict(result.get("data") or {}),
            decisions=list(result.get("decisions") or []),
            approval_id=result.get("approval_id"),
        )


def outcome_result(
    *,
    approval_id: Any,
    status: str,
    approved: bool,
    decided_by: str | None,
    decided_at: datetime | None,
    comment: str = "",
    data: Mapping[str, Any] | None = None,
    decisions: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The approval step's result: the JSON form of an ApprovalOutcome."""
    return {
        "approval_id": str(approval_id),
        "status": status,
        "approved": approved,
        "decided_by": decided_by,
        "decided_at": decided_at.isoformat() if decided_at else None,
        "comment": comment,
        "data": dict(data or {}),
        "decisions": [dict(decision) for decision in decisions],
    }
