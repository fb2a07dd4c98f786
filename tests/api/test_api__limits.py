"""Named limits over HTTP: `GET limits/` with each limit's rate and live usage, and
`PATCH limits/{name}/`, which sets the rate from the next start on (an operator's edit)."""

from __future__ import annotations

import pytest

import pikku_workflows as pw
from pikku_workflows.models import WorkflowLimit, WorkflowRun
from tests.api.conftest import API

pytestmark = pytest.mark.django_db


@pytest.fixture
def limited() -> None:
    pw.define_limit("api_limits.vendor", rate="1/h", burst=0)

    @pw.workflow("api_limits.call", limits=["api_limits.vendor"])
    def call(wf, input):
        return input


def test_limits__list_each_limit_with_its_rate_and_live_usage(operator_api, limited):
    pw.start_workflow("api_limits.call", {})
    pw.start_workflow("api_limits.call", {})

    listed = operator_api.get(API + "limits/").json()

    vendor = next(item for item in listed if item["name"] == "api_limits.vendor")
    assert vendor["rate"] == "1/h"
    assert (vendor["burst"], vendor["managed_by"]) == (0, "code")
    assert vendor["code"] == {"rate": "1/h", "burst": 0, "max_running": None}
    assert vendor["usage"]["queued"] == 1
    assert vendor["usage"]["next_start_at"] is not None


def test_limits__a_limit_of_max_running_alone_lists_its_bound_and_no_rate(operator_api):
    pw.define_limit("api_limits.slots", max_running=2)

    listed = operator_api.get(API + "limits/").json()

    slots = next(item for item in listed if item["name"] == "api_limits.slots")
    assert (slots["rate"], slots["max_running"]) == (None, 2)
    assert slots["code"] == {"rate": None, "burst": 0, "max_running": 2}
    assert slots["usage"] == {"running": 0, "queued": 0, "next_start_at": None}


def test_limits__patch_sets_the_rate_the_next_start_takes(make_user, client_for, limited):
    editor = client_for(make_user("editor", "change_workflowlimit"))
    pw.start_workflow("api_limits.call", {})

    response = editor.patch(API + "limits/api_limits.vendor/", {"rate": "1000/s"}, format="json")

    assert response.status_code == 200, response.content
    assert (response.json()["rate"], response.json()["managed_by"]) == ("1000/s", "admin")
    assert WorkflowLimit.objects.get(name="api_limits.vendor").rate == "1000/s"
    second = pw.start_workflow("api_limits.call", {})
    assert WorkflowRun.objects.get(pk=second).status == "running"


def test_limits__a_bad_rate_is_400_an_unknown_limit_404_and_editing_needs_the_permission(
    make_user, client_for, operator_api, limited
):
    editor = client_for(make_user("editor", "change_workflowlimit"))

    bad = editor.patch(API + "limits/api_limits.vendor/", {"rate": "10/x"}, format="json")
    unknown = editor.get(API + "limits/nowhere/")
    forbidden = operator_api.patch(API + "limits/api_limits.vendor/", {"burst": 3}, format="json")

    assert (bad.status_code, bad.json()["code"]) == (400, "INVALID_INPUT")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "LIMIT_NOT_FOUND")
    assert forbidden.status_code == 403
    assert not WorkflowLimit.objects.exists()


@pytest.fixture
def bounded() -> None:
    pw.define_limit("api_limits.slots", max_running=2, rate="10/s")


def test_limits__patch_sets_max_running_and_null_gives_the_code_s_back(
    make_user, client_for, bounded
):
    editor = client_for(make_user("editor", "change_workflowlimit"))

    raised = editor.patch(API + "limits/api_limits.slots/", {"max_running": 5}, format="json")
    read = editor.get(API + "limits/api_limits.slots/").json()
    reset = editor.patch(API + "limits/api_limits.slots/", {"max_running": None}, format="json")

    assert raised.status_code == 200, raised.content
    assert (raised.json()["max_running"], raised.json()["managed_by"]) == (5, "admin")
    assert read["max_running"] == 5
    assert read["code"]["max_running"] == 2
    assert (read["rate"], read["usage"]["running"]) == ("10/s", 0)
    assert reset.status_code == 200, reset.content
    assert reset.json()["max_running"] == 2
    assert WorkflowLimit.objects.get(name="api_limits.slots").max_running is None


@pytest.mark.parametrize("max_running", [0, -1, 1.5, "many", True, 100_001])
def test_limits__a_bad_max_running_is_400_and_writes_nothing(
    make_user, client_for, bounded, max_running
):
    editor = client_for(make_user("editor", "change_workflowlimit"))

    response = editor.patch(
        API + "limits/api_limits.slots/", {"max_running": max_running, "burst": 4}, format="json"
    )

    assert (response.status_code, response.json()["code"]) == (400, "INVALID_INPUT")
    assert not WorkflowLimit.objects.exists()


def test_limits__max_running_on_a_limit_the_code_bounds_not_is_400_and_writes_nothing(
    make_user, client_for, limited
):
    editor = client_for(make_user("editor", "change_workflowlimit"))

    response = editor.patch(API + "limits/api_limits.vendor/", {"max_running": 3}, format="json")

    assert (response.status_code, response.json()["code"]) == (400, "INVALID_INPUT")
    assert "no max_running in code" in response.json()["detail"]
    assert not WorkflowLimit.objects.exists()


def test_limits__a_rate_the_code_adds_after_an_edit_of_max_running_alone_applies(
    make_user, client_for
):
    editor = client_for(make_user("editor", "change_workflowlimit"))
    pw.define_limit("api_limits.later", max_running=2)
    edited = editor.patch(API + "limits/api_limits.later/", {"max_running": 3}, format="json")
    # A deploy gives the limit a rate: the operator's row has none, so the code's applies.
    pw.define_limit("api_limits.later", max_running=2, rate="1/h")

    @pw.workflow("api_limits.later_call", limits=["api_limits.later"])
    def call(wf, input):
        return input

    starts = [pw.start_workflow("api_limits.later_call", {}) for _ in range(2)]
    read = editor.get(API + "limits/api_limits.later/").json()

    assert edited.status_code == 200, edited.content
    assert (edited.json()["rate"], WorkflowLimit.objects.get().rate) == (None, "")
    assert [WorkflowRun.objects.get(pk=s).status for s in starts] == ["running", "queued"]
    assert (read["rate"], read["max_running"], read["usage"]["queued"]) == ("1/h", 3, 1)
