"""Pure helpers of the admin: durations as people read them, run-id search terms, badges."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.contrib import admin
from django.db.models import Q

import pikku_workflows
from pikku_workflows.admin import format_duration, run_id_query
from pikku_workflows.admin.display import describe_waiting, format_moment, pretty_error
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


# -- errors, moments and waiting ------------------------------------------------------------


def test_pretty_error__code_message_fields_and_a_folded_traceback():
    html = pretty_error(
        {
            "code": "STEP_FAILED",
            "message": "card <declined>",
            "type": "shop.PaymentDeclined",
            "traceback": "Traceback:\n  boom",
        }
    )

    assert '<code class="pikku-error-code">STEP_FAILED</code>' in html
    assert '<span class="pikku-error-message">card &lt;declined&gt;</span>' in html
    assert "<dt>type</dt><dd>shop.PaymentDeclined</dd>" in html
    assert (
        '<details class="pikku-traceback"><summary>Traceback</summary>'
        '<pre class="pikku-json">Traceback:\n  boom</pre></details>'
    ) in html


@pytest.mark.parametrize("error", [None, {}, ""])
def test_pretty_error__nothing_is_a_dash(error):
    assert pretty_error(error) == "-"


def test_pretty_error__anything_else_is_json():
    assert pretty_error(["odd"]) == '<pre class="pikku-json">[\n  &quot;odd&quot;\n]</pre>'


@pytest.mark.parametrize(
    ("offset", "text"),
    [
        (timedelta(seconds=4), "in 4.0 s"),
        (timedelta(seconds=-42.4), "42 s ago"),
        (timedelta(minutes=59, seconds=59.4), "in 1 h"),
        (timedelta(minutes=12, seconds=31), "in 13 min"),
        (timedelta(days=-2, hours=-3), "2 d 3 h ago"),
    ],
)
def test_format_moment(offset, text):
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    html = format_moment(now + offset, now)

    assert html.endswith(f">{text}</time>")
    assert f'datetime="{(now + offset).isoformat()}"' in html


def test_describe_waiting__each_kind():
    site = admin.site
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    later = (now + timedelta(seconds=30)).isoformat()
    child = "abcd1234-0000-4000-8000-000000000001"

    def text(waiting):
        return re.sub(r"<[^>]+>", "", describe_waiting(site, waiting, now))

    assert text(None) == "-"
    assert text({"kind": "timer", "step_key": "cool-off", "until": later}) == (
        "timer cool-off in 30 s"
    )
    assert text({"kind": "retry", "step_key": "charge", "attempt": 3, "until": later}) == (
        "retry charge attempt 3 in 30 s"
    )
    # Plain words: a running step runs (for how long), a lapsed lease is a lost worker.
    assert text({"kind": "step", "step_key": "ship", "lease_expires_at": later}) == "running ship"
    assert re.sub(
        r"<[^>]+>",
        "",
        describe_waiting(
            site,
            {"kind": "step", "step_key": "ship", "lease_expires_at": later},
            now,
            since=now - timedelta(seconds=18),
        ),
    ) == ("running ship for 18 s")
    assert text({"kind": "step", "step_key": "ship"}) == "queued ship waiting for a worker"
    earlier = (now - timedelta(seconds=12)).isoformat()
    assert text({"kind": "lease", "step_key": "ship", "lease_expires_at": earlier}) == (
        "worker lost ship its worker went silent 12 s ago; another worker runs it again"
    )
    assert text({"kind": "child", "step_key": "invoice", "child_run_id": child}) == (
        "child invoice run abcd1234"
    )
    assert text({"kind": "suspend", "reason": "manual review"}) == "suspend manual review"
    assert text({"kind": "approval", "step_key": "ok", "approval_id": 1}) == "approval ok"
    signal = {"kind": "signal", "step_key": "paid", "signal": "payment.settled"}
    assert text(signal) == "signal paid payment.settled"
    # Who may send it, where an operator looks for it.
    assert "Can send signals to workflow runs" in describe_waiting(site, signal, now)


def test_waiting_on_filter__offers_every_waiting_kind_in_its_words():
    from pikku_workflows.admin.filters import WaitingOnFilter
    from pikku_workflows.waiting import WaitingKind

    offered = WaitingOnFilter.lookups(None, None, None)  # type: ignore[arg-type]
    assert offered == [(kind.value, kind.label) for kind in WaitingKind]
