"""Span and trace ids derived from the rows: the same (run, step key, attempt) always gives the
same span id, another attempt another; traceparents are read strictly."""

from __future__ import annotations

import uuid

from pikku_workflows.observability.tracing import (
    attempt_span_id,
    format_traceparent,
    parse_traceparent,
    run_span_id,
    trace_id_of,
)

RUN = uuid.UUID("7a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b")


def test_ids__derived_from_run_step_and_attempt() -> None:
    assert attempt_span_id(RUN, "charge", 1) == attempt_span_id(str(RUN), "charge", 1)
    ids = {
        attempt_span_id(RUN, "charge", 1),
        attempt_span_id(RUN, "charge", 2),
        attempt_span_id(RUN, "charge#1", 1),
        run_span_id(RUN),
    }
    assert len(ids) == 4
    assert all(0 < span_id < 2**64 for span_id in ids)


def test_ids__a_run_without_a_caller_is_its_own_trace() -> None:
    assert trace_id_of(RUN, None) == RUN.int
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert trace_id_of(RUN, caller) == 0x4BF92F3577B34DA6A3CE929D0E0E4736


def test_traceparent__round_trip_and_garbage_refused() -> None:
    text = format_traceparent(RUN.int, 0x00F067AA0BA902B7)
    assert parse_traceparent(text) == (RUN.int, 0x00F067AA0BA902B7)
    for garbage in (None, "", "00-xyz-00f067aa0ba902b7-01", f"00-{'0' * 32}-00f067aa0ba902b7-01"):
        assert parse_traceparent(garbage) is None
