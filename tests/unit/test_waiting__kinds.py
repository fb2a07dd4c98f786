"""The waiting kinds are declared once: every kind has its runs (the filter the admin and the API
use), its fields, and the schema's words come from them."""

from __future__ import annotations

from pikku_workflows.api.serializers import WaitingOnSerializer
from pikku_workflows.querysets import WAITING_KINDS
from pikku_workflows.waiting import WAITING_FIELDS, WaitingKind, kinds_carrying


def test_kinds__every_kind_has_its_runs_in_the_order_of_the_kinds():
    assert list(WAITING_KINDS) == WaitingKind.values


def test_kinds__every_kind_has_its_fields():
    assert list(WAITING_FIELDS) == WaitingKind.values


def test_kinds_carrying__names_the_kinds_of_a_field():
    assert kinds_carrying("child_run_id") == "kind child"
    assert kinds_carrying("lease_expires_at") == "kinds step, lease"


def test_kinds__the_schema_names_every_kind_once():
    kind = WaitingOnSerializer().fields["kind"]
    assert kind.help_text.split(" | ") == WaitingKind.values
