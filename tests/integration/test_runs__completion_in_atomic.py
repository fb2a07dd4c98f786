"""`run_to_completion` inside the caller's transaction (ATOMIC_REQUESTS, `TestCase`): a run that
finishes inline returns as usual; one that parks could never finish (its rows are invisible to
workers until the commit), so it is refused with InvalidInput at once, and nothing of it is
kept."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

import pikku_workflows as pw
from pikku_workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db  # each test runs inside a transaction, as TestCase does


@pytest.fixture(autouse=True)
def workflows() -> None:
    @pw.workflow("atomic.quick")
    def quick(wf: pw.Workflow, input: Any) -> str:
        return wf.do("double", lambda: input * 2)

    @pw.workflow("atomic.parks")
    def parks(wf: pw.Workflow, input: Any) -> str:
        wf.sleep("overnight", "12h")
        return "morning"


def test_run_to_completion__in_a_transaction_a_run_that_finishes_returns_its_output():
    assert transaction.get_connection().in_atomic_block
    assert pw.run_to_completion("atomic.quick", 21) == 42


@pytest.mark.timeout(20)
def test_run_to_completion__in_a_transaction_a_run_that_parks_is_refused_at_once():
    with pytest.raises(pw.InvalidInput, match="transaction"):
        pw.run_to_completion("atomic.parks", {})

    assert not WorkflowRun.objects.exists()  # the attempt left nothing in the transaction
