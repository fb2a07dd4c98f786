"""Pure helpers of the admin: durations as people read them, run-id search terms, badges."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db.models import Q

import pikku_workflows
from pikku_workflows.admin import format_duration, run_id_query
from pikku_workflows.status import RunStatus, StepStatus

ADMIN_CSS = Path(pikku_workflows.__file__).parent / "static" / "pikku_workflows" / "admin.css"


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(0), "0 ms"),
        (timedelta(milliseconds=850), "850 ms"),
        (timedelta(seconds=4.25), "4.2 s"),
        (timedelta(seconds=12.9), "12 s"),
        (timedelta(minutes=3), "3 min"),
        (timedelta(minutes=3, seconds=5), "3 min 5 s"),
        (timedelta(hours=2, minutes=3, seconds=59), "2 h 3 min"),
        (timedelta(hours=5), "5 h"),
        (timedelta(days=4, hours=2, minutes=30), "4 d 2 h"),
        (timedelta(days=9), "9 d"),
        (timedelta(seconds=-3), "0 ms"),  # clock skew between app and database
    ],
)
def test_format_duration(delta, text):
    assert format_duration(delta) == text


def test_run_id_query__full_id_in_any_spelling_is_an_exact_match():
    run_id = uuid.UUID("abcd1234-0000-4000-8000-000000000001")

    for term in (str(run_id), str(run_id).upper(), run_id.hex, f"{{{run_id}}}", f" {run_id} "):
        assert run_id_query(term) == Q(pk=run_id)


def test_run_id_query__prefix_is_a_primary_key_range():
    expected = Q(
        pk__gte=uuid.UUID("abcd1200-0000-0000-0000-000000000000"),
        pk__lte=uuid.UUID("abcd12ff-ffff-ffff-ffff-ffffffffffff"),
    )

    assert run_id_query("ABCD12") == expected
    assert run_id_query("abcd-12") == expected


@pytest.mark.parametrize("term", ["", "abc", "order_fulfilment", "abcd 1234", "g123", "a" * 33])
def test_run_id_query__other_terms_are_not_ids(term):
    assert run_id_query(term) is None


def test_every_status_has_a_badge_colour():
    css = ADMIN_CSS.read_text()

    for status in [*RunStatus.values, *StepStatus.values]:
        assert f".pikku-status-{status} {{" in css
