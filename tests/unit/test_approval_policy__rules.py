"""The approval policy without a database: options checked (every problem listed), approvers
matched, who is refused and why, and how any / all / quorum settle from the votes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from pikku_workflows.approvals.policy import (
    ApprovalOutcome,
    Decider,
    Vote,
    approval_id_for,
    checked_request,
    covers_every_entry,
    matched_entries,
    outcome_result,
    refusal,
    settle,
)
from pikku_workflows.exceptions import InvalidInput

ALICE = Decider("1", "alice", groups=frozenset({"managers"}), may_decide=True)
BOB = Decider("2", "bob", groups=frozenset({"managers", "finance"}), may_decide=True)
CAROL = Decider("3", "carol", permissions=frozenset({"shop.approve_refund"}), may_decide=True)
ROOT = Decider("4", "root", is_superuser=True, may_decide=True)
NOBODY = Decider("5", "nobody", groups=frozenset({"managers"}), may_decide=False)


def problems_of(**options) -> list[str]:
    with pytest.raises(InvalidInput) as caught:
        checked_request(**options)
    return caught.value.problems


# --- options -------------------------------------------------------------------------------


def test_checked_request__defaults_and_durations_in_milliseconds():
    request = checked_request(expires_in="2d", remind_every="1h", data={"total": (1, 2)})

    assert request.policy == "any" and request.on_expire == "reject"
    assert request.approvers == () and request.quorum is None
    assert (request.expires_in_ms, request.remind_every_ms) == (172_800_000, 3_600_000)
    assert request.data == {"total": [1, 2]}  # the JSON round trip, as replays read it


def test_checked_request__repeated_approvers_count_once():
    assert checked_request(approvers=["bob", "bob", "group:x"]).approvers == ("bob", "group:x")


def test_checked_request__lists_every_problem_at_once():
    problems = problems_of(
        approvers="alice",
        policy="most",
        expires_in="soon",
        remind_every=0,
        exclude_requester="yes",
        summary=7,
        data=float("nan"),
    )

    assert len(problems) == 7, problems
    assert all(problem.startswith("wf.approval: ") for problem in problems)
    text = "\n".join(problems)
    for words in ("approvers", "policy", "expires_in", "remind_every", "exclude_requester"):
        assert words in text
    assert "summary" in text and "data is not storable JSON" in text


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"policy": "quorum"}, "needs quorum"),
        ({"policy": "quorum", "quorum": 0}, "needs quorum"),
        ({"policy": "quorum", "quorum": True}, "needs quorum"),
        ({"policy": "quorum", "quorum": 3, "approvers": ["a", "b"]}, "can never be reached"),
        ({"quorum": 2}, "only meaningful with policy 'quorum'"),
        ({"policy": "all"}, "needs approvers"),
        ({"on_expire": "escalate", "expires_in": "1h"}, "needs escalate_to"),
        ({"escalate_to": ["boss"], "expires_in": "1h"}, "only meaningful with on_expire"),
        ({"on_expire": "approve"}, "needs expires_in"),
        ({"approvers": ["group:"]}, "names no group"),
        ({"approvers": ["perm:approve"]}, "perm:<app_label.codename>"),
        ({"approvers": [""]}, "non-empty string"),
        ({"approvers": ["x" * 300]}, "longer than"),
    ],
)
def test_checked_request__refuses_options_that_cannot_work(options, problem):
    assert any(problem in text for text in problems_of(**options)), problems_of(**options)


def test_checked_request__a_quorum_of_groups_is_not_counted_ahead():
    # Groups may hold any number of people: only a list of usernames bounds the quorum.
    request = checked_request(policy="quorum", quorum=5, approvers=["group:managers"])
    assert request.quorum == 5


# --- who may decide ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decider", "entry", "matches"),
    [
        (ALICE, "alice", True),
        (ALICE, "bob", False),
        (ALICE, "group:managers", True),
        (ALICE, "group:finance", False),
        (CAROL, "perm:shop.approve_refund", True),
        (ALICE, "perm:shop.approve_refund", False),
        (ROOT, "perm:shop.approve_refund", True),  # a superuser holds every permission
        (ROOT, "group:managers", False),  # ... but is in no group by being one
        (ROOT, "root", True),
    ],
)
def test_decider__matches_usernames_groups_and_permissions(decider, entry, matches):
    assert decider.matches(entry) is matches


def test_refusal__needs_the_decide_permission_whatever_the_approvers():
    why = refusal(NOBODY, ["group:managers"], exclude_requester=False, requesters=[])
    assert why is not None and "pikku_workflows.decide_workflowapproval" in why


def test_refusal__only_approvers_decide_and_none_listed_means_anyone_permitted():
    assert refusal(ALICE, ["bob"], exclude_requester=False, requesters=[]) is not None
    assert refusal(BOB, ["bob"], exclude_requester=False, requesters=[]) is None
    assert refusal(CAROL, [], exclude_requester=False, requesters=[]) is None


def test_refusal__four_eyes_keeps_the_requester_out():
    why = refusal(ALICE, ["group:managers"], exclude_requester=True, requesters=["1"])
    assert why is not None and "four eyes" in why
    assert refusal(BOB, ["group:managers"], exclude_requester=True, requesters=["1"]) is None
    # Without four eyes the requester may decide like anyone else.
    assert refusal(ALICE, ["group:managers"], exclude_requester=False, requesters=["1"]) is None


def test_matched_entries__every_entry_a_decider_matches():
    assert matched_entries(BOB, ["group:managers", "group:finance", "alice"]) == (
        "group:managers",
        "group:finance",
    )


# --- settling ------------------------------------------------------------------------------


def vote(user: str, approve: bool, *matched: str) -> Vote:
    return Vote(user, approve, matched)


@pytest.mark.parametrize("approve", [True, False])
def test_settle__any_the_first_decision_decides(approve):
    assert settle("any", [], None, [vote("1", approve)]) == ("approved" if approve else "rejected")
    assert settle("any", [], None, []) == "pending"


def test_settle__all_needs_every_listed_user():
    approvers = ["alice", "bob"]
    assert settle("all", approvers, None, [vote("1", True, "alice")]) == "pending"
    both = [vote("1", True, "alice"), vote("2", True, "bob")]
    assert settle("all", approvers, None, both) == "approved"


def test_settle__all_any_rejection_rejects():
    votes = [vote("1", True, "alice"), vote("2", False, "bob")]
    assert settle("all", ["alice", "bob", "carol"], None, votes) == "rejected"


def test_settle__all_one_member_per_group_and_a_different_person_for_each_entry():
    approvers = ["group:managers", "group:finance"]
    # Bob is in both groups: his one approval covers one entry, not two.
    assert settle("all", approvers, None, [vote("2", True, *approvers)]) == "pending"
    # Alice (managers) and Bob (managers, finance): Bob must take finance — the matching finds it.
    votes = [vote("2", True, *approvers), vote("1", True, "group:managers")]
    assert settle("all", approvers, None, votes) == "approved"


def test_covers_every_entry__needs_a_distinct_voter_per_entry():
    votes = [vote("1", True, "a", "b"), vote("2", True, "a")]
    assert covers_every_entry(["a", "b"], votes)
    assert not covers_every_entry(["a", "b", "c"], votes)
    assert not covers_every_entry(["a", "b"], [vote("1", True, "a", "b")])


def test_settle__quorum_n_approvals_approve():
    votes = [vote("1", True), vote("2", False), vote("3", True)]
    assert settle("quorum", [], 2, votes[:2], undecided_deciders=5) == "pending"
    assert settle("quorum", [], 2, votes, undecided_deciders=5) == "approved"


def test_settle__quorum_rejects_once_it_cannot_be_reached():
    votes = [vote("1", True), vote("2", False)]
    # One approval, one person left: two is still reachable.
    assert settle("quorum", [], 2, votes, undecided_deciders=1) == "pending"
    assert settle("quorum", [], 2, votes, undecided_deciders=0) == "rejected"
    # Nobody counted who is left: never rejected for that.
    assert settle("quorum", [], 2, votes, undecided_deciders=None) == "pending"


# --- the outcome ---------------------------------------------------------------------------


def test_outcome__round_trips_through_the_step_result():
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    decisions = [
        {"user": "bob", "approve": True, "comment": "ok", "data": {}, "at": at.isoformat()}
    ]
    result = outcome_result(
        approval_id="a1",
        status="approved",
        approved=True,
        decided_by="bob",
        decided_at=at,
        comment="ok",
        data={"discount": 5},
        decisions=decisions,
    )

    outcome = ApprovalOutcome.from_result(result)

    assert outcome == ApprovalOutcome(
        status="approved",
        approved=True,
        decided_by="bob",
        decided_at=at,
        comment="ok",
        data={"discount": 5},
        decisions=decisions,
        approval_id="a1",
    )


def test_approval_id__follows_from_the_step_and_attempt():
    step = uuid.uuid4()
    assert approval_id_for(step, 1) == approval_id_for(str(step), 1)
    assert approval_id_for(step, 1) != approval_id_for(step, 2)
