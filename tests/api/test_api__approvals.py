"""The approval endpoints: list (filters `status`, `mine`, `run`; cursor pages), detail, approve,
reject and reassign through the engine (form errors, 409s, refusals); the permission matrix
(anonymous, no permission, the decide permission without being an approver, the approver, the
run's owner against another user, view permissions, the tenant hook); refusals keep their
`deny` row and the expiry they recorded under ATOMIC_REQUESTS; constant query counts."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.handlers.base import BaseHandler
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import resolve
from rest_framework.test import APIClient

import pikku_workflows as pw
from pikku_workflows.api import permissions
from pikku_workflows.models import WorkflowApproval, WorkflowApprovalDecision, WorkflowAuditEntry
from pikku_workflows.status import ApprovalStatus, RunStatus
from tests.api.conftest import API, PURCHASE
from tests.approvals import past_deadline
from tests.queue import drain_queue
from tests.rows import load_run

pytestmark = pytest.mark.django_db

APPROVALS = API + "approvals/"
FORM = PURCHASE
# The fields docs/http-api.md gives the approval that approve / reject answer.
DOCUMENTED_FIELDS = {
    "id",
    "run_id",
    "step_key",
    "status",
    "approvers",
    "policy",
    "expires_at",
    "decided_by",
    "decided_at",
    "comment",
    "data",
}
# Every request below starts with two queries for the user's permissions.
PERMISSIONS = 2


def url(approval: WorkflowApproval, verb: str = "") -> str:
    return f"{APPROVALS}{approval.pk}/{verb + '/' if verb else ''}"


def endpoints(approval: WorkflowApproval) -> list[tuple[str, str]]:
    """(method, url) of every endpoint of one approval."""
    return [("get", url(approval))] + [
        ("post", url(approval, verb)) for verb in ("approve", "reject", "reassign")
    ]


def call(api: APIClient, method: str, target: str, body: Any = None) -> Any:
    if method == "get":
        return api.get(target)
    return api.post(target, {"approvers": ["someone"]} if body is None else body, format="json")


def listed(api: APIClient, query: str = "") -> list[str]:
    response = api.get(APPROVALS + query)
    assert response.status_code == 200, response.content
    return [item["id"] for item in response.json()["results"]]


def nothing_written(approval: WorkflowApproval) -> None:
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert not WorkflowApprovalDecision.objects.filter(approval=approval).exists()
    assert not WorkflowAuditEntry.objects.filter(run_id=approval.run_id).exists()


def tenant_of_runs(request: Any, queryset: Any) -> Any:
    """A host's RUN_QUERYSET_FILTER: a tenant's runs have its name in their input."""
    return queryset.filter(input__tenant=request.user.username)


@pytest.fixture
def boss(make_user):
    """May decide, and is the approver of `pending`; sees no run but what he may decide."""
    return make_user("boss", "decide_workflowapproval")


@pytest.fixture
def pending(shop, alice, boss) -> WorkflowApproval:
    """Alice's run waits for the boss's approval."""
    return shop.awaiting(alice, approvers=["boss"], expires_in="1d", summary="Lamp for 120.00")


@pytest.fixture
def boss_api(client_for, boss) -> APIClient:
    return client_for(boss)


# --- list and detail -----------------------------------------------------------------------


def test_list__answers_each_approval_as_the_engine_describes_it(boss_api, pending):
    response = boss_api.get(APPROVALS)

    assert response.status_code == 200
    body = response.json()
    assert body["results"] == [pw.get_approval(pending.pk)]
    item = body["results"][0]
    assert set(item) >= DOCUMENTED_FIELDS
    assert (item["id"], item["run_id"], item["step_key"]) == (
        str(pending.pk),
        str(pending.run_id),
        "approval",
    )
    assert (item["status"], item["approvers"], item["policy"]) == ("pending", ["boss"], "any")
    assert (item["summary"], item["decided_by"], item["decisions"]) == ("Lamp for 120.00", None, [])
    assert item["expires_at"] is not None
    assert body["next"] is None


def test_detail__is_the_engines_approval_with_every_decision(shop, alice, make_user, client_for):
    deciders = [make_user(f"d{index}", "decide_workflowapproval") for index in range(2)]
    approval = shop.awaiting(alice, policy="quorum", quorum=3)
    for index, decider in enumerate(deciders):
        pw.decide_approval(approval.pk, approve=True, by=decider, comment=f"ok {index}")

    response = client_for(deciders[0]).get(url(approval))

    assert response.status_code == 200
    assert response.json() == pw.get_approval(approval.pk)
    assert [(d["user"], d["comment"]) for d in response.json()["decisions"]] == [
        ("d0", "ok 0"),
        ("d1", "ok 1"),
    ]


@pytest.mark.parametrize("approval_id", ["00000000-0000-4000-8000-000000000000", "not-a-uuid", "1"])
@pytest.mark.parametrize("verb", ["", "approve", "reject", "reassign"])
def test_unknown_or_malformed_id__is_approval_not_found(operator_api, approval_id, verb):
    target = f"{APPROVALS}{approval_id}/{verb + '/' if verb else ''}"

    response = call(operator_api, "get" if not verb else "post", target)

    assert response.status_code == 404
    assert response.json()["code"] == "APPROVAL_NOT_FOUND"


def test_filter_status__repeatable_or_comma_separated(shop, alice, boss, boss_api):
    approved = shop.awaiting(alice, approvers=["boss"])
    rejected = shop.awaiting(alice, approvers=["boss"])
    waiting = shop.awaiting(alice, approvers=["boss"])
    pw.decide_approval(approved.pk, approve=True, by=boss)
    pw.decide_approval(rejected.pk, approve=False, by=boss)

    assert listed(boss_api, "?status=pending") == [str(waiting.pk)]
    assert set(listed(boss_api, "?status=approved&status=rejected")) == {
        str(approved.pk),
        str(rejected.pk),
    }
    assert set(listed(boss_api, "?status=approved,pending")) == {
        str(approved.pk),
        str(waiting.pk),
    }
    assert len(listed(boss_api)) == 3


@pytest.mark.parametrize("query", ["status=maybe", "status=pending,maybe", "mine=yes", "run=12"])
def test_filters__a_malformed_value_is_invalid_input_naming_the_filter(boss_api, pending, query):
    response = boss_api.get(f"{APPROVALS}?{query}")

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
    assert set(response.json()["fields"]) == {query.partition("=")[0]}


@pytest.mark.parametrize("query", ["status=", "mine=", "run="])
def test_filters__an_empty_value_filters_nothing(boss_api, pending, query):
    assert listed(boss_api, f"?{query}") == [str(pending.pk)]


def test_filter_mine__the_ones_you_may_decide_now(shop, alice, boss, make_user, client_for):
    reader = make_user("reader", "decide_workflowapproval", "view_workflowrun")
    for_boss = shop.awaiting(alice, approvers=["boss"])
    for_reader = shop.awaiting(alice, approvers=["reader"])
    decided = shop.awaiting(alice, approvers=["reader"])
    pw.decide_approval(decided.pk, approve=True, by=reader)
    api = client_for(reader)

    assert listed(api, "?mine=1") == listed(api, "?mine=true") == [str(for_reader.pk)]
    everything_else = {str(for_boss.pk), str(decided.pk)}
    assert set(listed(api, "?mine=0")) == set(listed(api, "?mine=false")) == everything_else
    assert set(listed(api)) == {str(for_boss.pk), str(for_reader.pk), str(decided.pk)}
    assert listed(client_for(boss), "?mine=1&status=pending") == [str(for_boss.pk)]


def test_filter_run__the_approvals_of_one_run(shop, alice, boss, boss_api):
    first = shop.awaiting(alice, approvers=["boss"])
    shop.awaiting(alice, approvers=["boss"])

    assert listed(boss_api, f"?run={first.run_id}") == [str(first.pk)]
    assert listed(boss_api, f"?run={uuid.uuid4()}") == []
    assert listed(boss_api, f"?run={first.run_id}&mine=1&status=pending") == [str(first.pk)]


def test_pages__cursor_on_creation_newest_first(shop, alice, boss_api):
    approvals = [shop.awaiting(alice, approvers=["boss"]) for _ in range(3)]

    first = boss_api.get(APPROVALS + "?page_size=2").json()
    second = boss_api.get(first["next"]).json()

    newest_first = [str(approval.pk) for approval in reversed(approvals)]
    assert [item["id"] for item in first["results"] + second["results"]] == newest_first
    assert second["next"] is None
    bad = boss_api.get(APPROVALS + "?cursor=garbage")
    assert (bad.status_code, bad.json()["code"]) == (400, "INVALID_INPUT")


# --- deciding ------------------------------------------------------------------------------


def test_approve__with_a_comment_and_data_settles_it_and_the_run_goes_on(
    boss, boss_api, pending, worker
):
    response = worker(
        lambda: boss_api.post(
            url(pending, "approve"),
            {"comment": "within budget", "data": {"discount": 5}},
            format="json",
        )
    )

    assert response.status_code == 200
    body = response.json()
    assert set(body) >= DOCUMENTED_FIELDS
    assert (body["status"], body["decided_by"], body["comment"], body["data"]) == (
        "approved",
        "boss",
        "within budget",
        {"discount": 5},
    )
    assert body["decided_at"] is not None
    assert body == pw.get_approval(pending.pk)
    run = load_run(pending.run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.output["approval"] == {"approved": True, "data": {"discount": 5}}
    entry = WorkflowAuditEntry.objects.get(run_id=pending.run_id)
    assert (entry.action, entry.user, entry.reason) == ("approve", boss, "within budget")


def test_reject__settles_it_rejected_and_the_body_sees_it(boss_api, pending, worker):
    response = worker(lambda: boss_api.post(url(pending, "reject"), format="json"))

    assert response.status_code == 200
    assert (response.json()["status"], response.json()["comment"]) == ("rejected", "")
    assert load_run(pending.run_id).output["approval"] == {"approved": False, "data": {}}


def test_form__valid_data_is_recorded_cleaned(shop, alice, boss_api):
    approval = shop.awaiting(alice, approvers=["boss"], form=FORM)

    response = boss_api.post(
        url(approval, "approve"),
        {"data": {"cost_centre": "CC-042", "budget": "99.5"}},
        format="json",
    )

    assert response.status_code == 200
    assert response.json()["data"] == {"cost_centre": "CC-042", "budget": "99.5"}
    assert response.json()["form"] == FORM


@pytest.mark.parametrize(
    ("data", "fields"),
    [
        ({"cost_centre": "42", "budget": "-1"}, {"cost_centre", "budget"}),
        ({"budget": "1"}, {"cost_centre"}),
        (None, {"cost_centre", "budget"}),
        ({"cost_centre": "CC-000", "budget": "1"}, {"non_field_errors"}),
    ],
)
def test_form__invalid_data_is_invalid_input_with_the_forms_field_errors(
    shop, alice, boss_api, data, fields
):
    approval = shop.awaiting(alice, approvers=["boss"], form=FORM)

    response = boss_api.post(url(approval, "approve"), {"data": data}, format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "INVALID_INPUT"
    assert set(body["fields"]) == {"data"}
    assert set(body["fields"]["data"]) == fields
    assert all(
        isinstance(message, str)
        for messages in body["fields"]["data"].values()
        for message in messages
    )
    assert body["detail"].startswith("data.")
    nothing_written(approval)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"data": [1, 2]}, None),  # no form: any JSON object, not a list
        ({"data": "yes"}, None),
        ({"comment": "x" * 2001}, "comment"),
        ({"comment": ["not", "text"]}, "comment"),
        ({"comment": None}, "comment"),
        ([], "non_field_errors"),
    ],
)
def test_decide__a_malformed_body_is_invalid_input_and_nothing_is_written(
    boss_api, pending, body, field
):
    response = boss_api.post(url(pending, "approve"), body, format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "INVALID_INPUT"
    if field is not None:
        assert field in response.json()["fields"]
    nothing_written(pending)


def test_decide__malformed_json_is_invalid_input(boss_api, pending):
    response = boss_api.post(
        url(pending, "approve"), '{"comment": ', content_type="application/json"
    )

    assert (response.status_code, response.json()["code"]) == (400, "INVALID_INPUT")
    nothing_written(pending)


def test_decide__a_settled_approval_is_approval_resolved(boss_api, pending, make_user, client_for):
    assert boss_api.post(url(pending, "approve"), format="json").status_code == 200
    other = client_for(make_user("other", "decide_workflowapproval", "view_workflowrun"))

    again = boss_api.post(url(pending, "reject"), format="json")
    too_late = other.post(url(pending, "approve"), format="json")

    for response in (again, too_late):
        assert response.status_code == 409
        assert response.json()["code"] == "APPROVAL_RESOLVED"
    assert WorkflowApproval.objects.get(pk=pending.pk).status == ApprovalStatus.APPROVED
    assert WorkflowApprovalDecision.objects.count() == 1


def test_decide__a_second_decision_of_the_same_person_is_approval_resolved(
    shop, alice, boss, boss_api
):
    approval = shop.awaiting(alice, policy="quorum", quorum=2)

    first = boss_api.post(url(approval, "approve"), format="json")
    second = boss_api.post(url(approval, "approve"), format="json")

    assert (first.status_code, first.json()["status"]) == (200, "pending")
    assert (second.status_code, second.json()["code"]) == (409, "APPROVAL_RESOLVED")
    assert "already decided" in second.json()["detail"]
    assert WorkflowApprovalDecision.objects.filter(approval=approval).count() == 1


def test_decide__after_the_deadline_is_approval_resolved_and_the_expiry_is_recorded(
    boss_api, pending
):
    past_deadline(pending)

    response = boss_api.post(url(pending, "approve"), format="json")

    assert (response.status_code, response.json()["code"]) == (409, "APPROVAL_RESOLVED")
    pending.refresh_from_db()
    assert pending.status == ApprovalStatus.EXPIRED
    assert not WorkflowApprovalDecision.objects.exists()


def test_decide__a_run_cancelled_meanwhile_is_approval_resolved(
    operator, make_user, client_for, boss_api, pending
):
    reader = client_for(make_user("reader", "decide_workflowapproval", "view_workflowrun"))
    WorkflowApproval.objects.filter(pk=pending.pk).update(approvers=["boss", "reader"])
    pw.cancel_run(pending.run_id, by=operator)

    response = reader.post(url(pending, "approve"), format="json")

    assert (response.status_code, response.json()["code"]) == (409, "APPROVAL_RESOLVED")
    assert WorkflowApproval.objects.get(pk=pending.pk).status == ApprovalStatus.CANCELLED
    # The boss saw it only as his to decide: cancelled, it is not his any more.
    assert boss_api.post(url(pending, "approve"), format="json").status_code == 404


# --- reassigning ---------------------------------------------------------------------------


@pytest.fixture
def delegator(make_user):
    """May reassign approvals and read every run; may not decide."""
    return make_user("delegator", "reassign_workflowapproval", "view_workflowrun")


def test_reassign__new_approvers_decide_the_old_ones_may_not(
    delegator, client_for, pending, make_user, boss_api
):
    deputy = make_user("deputy", "decide_workflowapproval")

    response = client_for(delegator).post(
        url(pending, "reassign"),
        {"approvers": ["deputy", "group:finance"], "reason": "boss on leave"},
        format="json",
    )

    assert response.status_code == 200
    assert response.json()["approvers"] == ["deputy", "group:finance"]
    assert response.json()["status"] == "pending"
    entry = WorkflowAuditEntry.objects.get(run_id=pending.run_id)
    assert (entry.action, entry.user, entry.reason) == ("reassign", delegator, "boss on leave")
    assert entry.payload["approvers_before"] == ["boss"]
    # The boss no longer may decide it, so he no longer sees it; the deputy does.
    assert boss_api.post(url(pending, "approve"), format="json").status_code == 404
    decided = client_for(deputy).post(url(pending, "approve"), format="json")
    assert (decided.status_code, decided.json()["decided_by"]) == (200, "deputy")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "approvers"),
        ({"approvers": "deputy"}, "approvers"),
        ({"approvers": [""]}, "approvers"),
        ({"approvers": ["perm:not a permission"]}, None),
        ({"approvers": ["group:"]}, None),
        ({"approvers": ["deputy"], "reason": "x" * 2001}, "reason"),
    ],
)
def test_reassign__invalid_approvers_are_invalid_input(delegator, client_for, pending, body, field):
    response = client_for(delegator).post(url(pending, "reassign"), body, format="json")

    assert (response.status_code, response.json()["code"]) == (400, "INVALID_INPUT")
    if field is not None:
        assert field in response.json()["fields"]
    nothing_written(pending)


def test_reassign__a_settled_approval_is_approval_resolved(boss, delegator, client_for, pending):
    pw.decide_approval(pending.pk, approve=True, by=boss)

    response = client_for(delegator).post(
        url(pending, "reassign"), {"approvers": ["deputy"]}, format="json"
    )

    assert (response.status_code, response.json()["code"]) == (409, "APPROVAL_RESOLVED")
    assert WorkflowApproval.objects.get(pk=pending.pk).approvers == ["boss"]


# --- the permission matrix -----------------------------------------------------------------


def test_anonymous__every_endpoint_is_not_authenticated(pending):
    anonymous = APIClient()

    for method, target in [("get", APPROVALS), *endpoints(pending)]:
        response = call(anonymous, method, target)
        assert response.status_code == 403, target
        assert response.json()["code"] == "NOT_AUTHENTICATED", target
    nothing_written(pending)


def test_no_permission__another_users_approval_is_not_found_everywhere(
    make_user, client_for, pending
):
    api = client_for(make_user("stranger"))

    assert listed(api) == []
    for method, target in endpoints(pending):
        response = call(api, method, target)
        assert response.status_code == 404, target
        assert response.json()["code"] == "APPROVAL_NOT_FOUND", target
    nothing_written(pending)


def test_run_owner_without_permissions__sees_it_but_may_not_decide_nor_reassign(
    alice, client_for, pending
):
    api = client_for(alice)

    assert listed(api) == [str(pending.pk)]
    assert api.get(url(pending)).status_code == 200
    for verb in ("approve", "reject", "reassign"):
        response = call(api, "post", url(pending, verb))
        assert response.status_code == 403, verb
        assert response.json()["code"] == "PERMISSION_DENIED", verb
    nothing_written(pending)


def test_decide_permission_not_an_approver__does_not_see_it(make_user, client_for, pending):
    api = client_for(make_user("clerk", "decide_workflowapproval"))

    assert listed(api) == []
    for method, target in endpoints(pending):
        assert call(api, method, target).status_code == 404, target
    nothing_written(pending)


def test_decide_permission_not_an_approver_who_reads_the_run__is_forbidden_and_audited(
    make_user, client_for, pending
):
    clerk = make_user("clerk", "decide_workflowapproval", "view_workflowrun")
    api = client_for(clerk)

    assert listed(api) == [str(pending.pk)]
    assert listed(api, "?mine=1") == []
    response = api.post(url(pending, "approve"), {"comment": "sure"}, format="json")

    assert response.status_code == 403
    assert response.json()["code"] == "APPROVAL_FORBIDDEN"
    assert "not among the approvers" in response.json()["detail"]
    (deny,) = WorkflowAuditEntry.objects.filter(run_id=pending.run_id)
    assert (deny.action, deny.user, deny.payload["decision"]) == ("deny", clerk, "approve")
    pending.refresh_from_db()
    assert pending.status == ApprovalStatus.PENDING
    assert not WorkflowApprovalDecision.objects.exists()


def test_approver__sees_and_decides_it_without_reading_runs_then_still_sees_it(
    boss, boss_api, pending
):
    assert listed(boss_api, "?mine=1") == [str(pending.pk)]
    assert boss_api.get(f"{API}runs/{pending.run_id}/").status_code == 404  # not his run

    assert boss_api.post(url(pending, "approve"), format="json").status_code == 200

    # Decided by him: visible still, no longer his to decide.
    assert listed(boss_api) == [str(pending.pk)]
    assert listed(boss_api, "?mine=1") == []
    assert boss_api.get(url(pending)).json()["decided_by"] == "boss"


def test_group_approver__a_member_holding_the_permission_decides(
    shop, alice, make_user, client_for
):
    approval = shop.awaiting(alice, approvers=["group:managers"])
    manager = make_user("manager", "decide_workflowapproval")
    member_without_permission = make_user("member")
    group = Group.objects.create(name="managers")
    group.user_set.add(manager, member_without_permission)

    assert listed(client_for(member_without_permission)) == []
    response = client_for(get_user_model().objects.get(pk=manager.pk)).post(
        url(approval, "approve"), format="json"
    )

    assert (response.status_code, response.json()["decided_by"]) == (200, "manager")


def test_four_eyes__the_runs_owner_sees_it_and_is_forbidden(shop, make_user, client_for):
    requester = make_user("requester", "decide_workflowapproval")
    approval = shop.awaiting(requester, exclude_requester=True)
    api = client_for(requester)

    assert listed(api) == [str(approval.pk)]  # her run's
    assert listed(api, "?mine=1") == []
    response = api.post(url(approval, "approve"), format="json")

    assert (response.status_code, response.json()["code"]) == (403, "APPROVAL_FORBIDDEN")
    assert "four eyes" in response.json()["detail"]
    assert WorkflowAuditEntry.objects.get(run_id=approval.run_id).action == "deny"


def test_view_permissions__see_every_approval_but_decide_none(shop, make_user, client_for, pending):
    for codename in ("view_workflowrun", "view_workflowapproval"):
        api = client_for(make_user(f"auditor-{codename}", codename))

        assert listed(api) == [str(pending.pk)]
        response = api.post(url(pending, "approve"), format="json")
        assert (response.status_code, response.json()["code"]) == (403, "PERMISSION_DENIED")
    nothing_written(pending)


def test_reassign_permission__reassigns_but_may_not_decide(delegator, client_for, pending):
    api = client_for(delegator)

    assert api.post(url(pending, "approve"), format="json").status_code == 403
    reassigned = api.post(url(pending, "reassign"), {"approvers": ["x"]}, format="json")
    assert reassigned.status_code == 200


def test_superuser__decides_any_approval_without_approvers(shop, alice, make_user, client_for):
    approval = shop.awaiting(alice)
    api = client_for(make_user("root", is_superuser=True))

    assert api.post(url(approval, "approve"), format="json").status_code == 200


def test_tenant_hook__narrows_approvals_even_for_those_who_may_decide_them(
    shop, make_user, client_for, settings
):
    settings.PIKKU_WORKFLOWS = {"RUN_QUERYSET_FILTER": f"{__name__}.tenant_of_runs"}
    acme = make_user(
        "acme", "decide_workflowapproval", "reassign_workflowapproval", "view_workflowrun"
    )
    # Anybody holding the decide permission may decide both; the hook keeps acme to its own.
    own = shop.awaiting(acme, input={"tenant": "acme"})
    other = shop.awaiting(make_user("globex"), input={"tenant": "globex"})
    api = client_for(acme)

    assert listed(api) == [str(own.pk)]
    assert listed(api, "?mine=1") == [str(own.pk)]
    for method, target in endpoints(other):
        response = call(api, method, target)
        assert (response.status_code, response.json()["code"]) == (404, "APPROVAL_NOT_FOUND")
    nothing_written(other)
    assert api.post(url(own, "approve"), format="json").status_code == 200


# --- ATOMIC_REQUESTS -----------------------------------------------------------------------


@pytest.fixture
def atomic_requests(monkeypatch) -> None:
    """ATOMIC_REQUESTS on, as a host may set it: each request in one transaction. (The
    `settings` fixture cannot: the connection keeps its own copy of the database settings.)"""
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)


def test_atomic_requests__approval_views_own_their_transactions_run_views_do_not(
    atomic_requests, pending
):
    handler = BaseHandler()
    for target in [APPROVALS, *(t for _, t in endpoints(pending))]:
        view = resolve(target).func
        assert handler.make_view_atomic(view) is view, target
    runs = resolve(f"{API}runs/{pending.run_id}/cancel/").func
    assert handler.make_view_atomic(runs) is not runs


@pytest.mark.django_db(transaction=True)
def test_atomic_requests__a_forbidden_decision_keeps_its_deny_row(
    atomic_requests, make_user, client_for, pending
):
    clerk = make_user("clerk", "decide_workflowapproval", "view_workflowrun")

    response = client_for(clerk).post(url(pending, "approve"), {"comment": "me"}, format="json")

    assert (response.status_code, response.json()["code"]) == (403, "APPROVAL_FORBIDDEN")
    (deny,) = WorkflowAuditEntry.objects.filter(run_id=pending.run_id)
    assert (deny.action, deny.user_id) == ("deny", clerk.pk)
    assert WorkflowApproval.objects.get(pk=pending.pk).status == ApprovalStatus.PENDING


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("verb", ["approve", "reassign"])
def test_atomic_requests__a_decision_after_the_deadline_keeps_the_expiry_it_recorded(
    atomic_requests, make_user, client_for, pending, verb
):
    api = client_for(make_user("both", "decide_workflowapproval", "reassign_workflowapproval"))
    WorkflowApproval.objects.filter(pk=pending.pk).update(approvers=["both"])
    past_deadline(pending)

    response = api.post(url(pending, verb), {"approvers": ["x"]}, format="json")

    assert (response.status_code, response.json()["code"]) == (409, "APPROVAL_RESOLVED")
    assert WorkflowApproval.objects.get(pk=pending.pk).status == ApprovalStatus.EXPIRED
    drain_queue()  # the pass the expiry enqueued: the body sees it
    assert load_run(pending.run_id).output["approval"] == {"approved": False, "data": {}}


@pytest.mark.django_db(transaction=True)
def test_atomic_requests__the_engines_refusal_of_a_reassignment_keeps_its_deny_row(
    atomic_requests, make_user, client_for, pending, monkeypatch
):
    # The API asks for the permission before the engine does; without that check (or with a
    # permission withdrawn between the two) the engine's `deny` answers, and stays recorded.
    monkeypatch.delitem(permissions.APPROVAL_PERMISSIONS, "reassign")
    reader = make_user("reader", "view_workflowrun")

    response = client_for(reader).post(
        url(pending, "reassign"), {"approvers": ["x"]}, format="json"
    )

    assert (response.status_code, response.json()["code"]) == (403, "APPROVAL_FORBIDDEN")
    (deny,) = WorkflowAuditEntry.objects.filter(run_id=pending.run_id)
    assert (deny.action, deny.user_id, deny.payload["operation"]) == ("deny", reader.pk, "reassign")
    assert WorkflowApproval.objects.get(pk=pending.pk).approvers == ["boss"]


@pytest.mark.django_db(transaction=True)
def test_atomic_requests__a_decision_commits_and_the_run_goes_on(
    atomic_requests, boss_api, pending
):
    response = boss_api.post(url(pending, "approve"), format="json")

    assert response.status_code == 200
    assert WorkflowApprovalDecision.objects.filter(approval=pending).count() == 1
    drain_queue()
    assert load_run(pending.run_id).status == RunStatus.COMPLETED


# --- query counts --------------------------------------------------------------------------


def queries(api: APIClient, user: Any, target: str) -> int:
    # A fresh user object per request: its permission cache starts empty, as in production.
    api.force_authenticate(get_user_model().objects.get(pk=user.pk))
    with CaptureQueriesContext(connection) as captured:
        response = api.get(target)
    assert response.status_code == 200, response.content
    return len(captured)


def with_decisions(shop, starter, deciders: list[Any]) -> WorkflowApproval:
    """A pending approval (a quorum nobody reaches) with one decision per decider."""
    approval = shop.awaiting(starter, policy="quorum", quorum=len(deciders) + 5)
    for decider in deciders:
        pw.decide_approval(approval.pk, approve=True, by=decider, comment=decider.username)
    return approval


def test_list__constant_queries_whatever_the_page_size_and_decisions(
    shop, alice, make_user, operator, operator_api
):
    deciders = [make_user(f"d{index}", "decide_workflowapproval") for index in range(4)]
    with_decisions(shop, alice, deciders[:1])
    small = queries(operator_api, operator, APPROVALS + "?page_size=1")
    for count in (0, 4, 2, 3):
        with_decisions(shop, alice, deciders[:count])
    large = queries(operator_api, operator, APPROVALS + "?page_size=50")

    # The page of approvals (with their runs, steps and deciders), then their decisions.
    assert small == large == PERMISSIONS + 2
    assert len(listed(operator_api)) == 5


def test_list__constant_queries_for_a_decider_who_reads_no_runs(
    shop, alice, make_user, boss, boss_api
):
    deciders = [make_user(f"d{index}", "decide_workflowapproval") for index in range(3)]
    with_decisions(shop, alice, deciders[:1])
    small = queries(APIClient(), boss, APPROVALS + "?page_size=1&mine=1")
    for count in (0, 3, 2):
        with_decisions(shop, alice, deciders[:count])
    large = queries(APIClient(), boss, APPROVALS + "?page_size=50&mine=1")

    # Also their groups and the approvals they may decide, for what they see and for `mine`.
    assert small == large == PERMISSIONS + 6
    assert len(listed(boss_api, "?mine=1")) == 4


def test_detail__constant_queries_whatever_the_decisions(shop, alice, make_user, operator):
    deciders = [make_user(f"d{index}", "decide_workflowapproval") for index in range(6)]
    few = with_decisions(shop, alice, deciders[:1])
    many = with_decisions(shop, alice, deciders)
    api = APIClient()

    # The approval (with its run, step and decider), then its decisions.
    assert queries(api, operator, url(few)) == PERMISSIONS + 2
    assert queries(api, operator, url(many)) == PERMISSIONS + 2
