"""The engine's named statements: each has a contract, takes its row locks by clause (pinned here
with comments stripped, so a comment that mentions a lock cannot stand in for it), never casts a
value to a length-limited type (PostgreSQL's cast to varchar(n) truncates silently), and lists
exactly the columns of the model it writes."""

from __future__ import annotations

import re

import pytest

from pikku_workflows import dispatch
from pikku_workflows.engine.store import debounce_transitions, run_rows, step_transitions
from pikku_workflows.models import WorkflowRun, WorkflowStep
from pikku_workflows.sql import parse_blocks, without_comments

ALL_STATEMENTS = [
    (step_transitions.STATEMENTS, name) for name in step_transitions.STATEMENTS.blocks
] + [
    (statements, name)
    for statements in (run_rows.STATEMENTS, debounce_transitions.STATEMENTS)
    for name in statements.blocks
]


def stripped(statements, name: str) -> str:
    return " ".join(without_comments(statements[name]).split())


@pytest.mark.parametrize(("statements", "name"), ALL_STATEMENTS, ids=lambda v: str(v)[:40])
def test_statement__has_a_one_line_contract(statements, name):
    assert len(statements.blocks[name].contract) > 20


@pytest.mark.parametrize(("statements", "name"), ALL_STATEMENTS, ids=lambda v: str(v)[:40])
def test_statement__never_casts_to_a_length_limited_type(statements, name):
    text = stripped(statements, name).lower()
    assert not re.search(r"::\s*(varchar|character varying|char\b|character\b)", text)


def test_run_held_by_pass__holds_the_run_for_share():
    text = stripped(step_transitions.STATEMENTS, "run_held_by_pass")
    assert text.endswith("AND lease_holder = %(lease_holder)s FOR SHARE")


def test_insert_step_in_run__takes_the_run_guard_before_inserting():
    text = stripped(step_transitions.STATEMENTS, "insert_step_in_run")
    guard = text.index("WITH guard AS (SELECT id FROM")
    assert text.index("FOR SHARE)", guard) < text.index("INSERT INTO")


def test_claim_queued_step__shares_the_run_unless_another_transaction_holds_it():
    text = stripped(step_transitions.STATEMENTS, "claim_queued_step")
    assert "FOR SHARE OF run SKIP LOCKED)" in text
    assert text.index("FOR SHARE OF run SKIP LOCKED)") < text.index("UPDATE")


def test_record_outcome_and_insert_step__records_first_then_guards_then_inserts():
    text = stripped(step_transitions.STATEMENTS, "record_outcome_and_insert_step")
    moved, guard = text.index("WITH moved AS ( UPDATE"), text.index("guard AS (SELECT id FROM")
    assert moved < guard < text.index("FOR SHARE)") < text.index("INSERT INTO")
    assert "FROM guard WHERE EXISTS (SELECT 1 FROM moved)" in text


def test_record_step_outcome_taking_run_lease__never_waits_for_the_run_row():
    text = stripped(step_transitions.STATEMENTS, "record_step_outcome_taking_run_lease")
    assert "FOR NO KEY UPDATE SKIP LOCKED" in text


def test_insert_run__meets_an_open_debounce_window_on_its_index_and_inserts_nothing():
    text = stripped(run_rows.STATEMENTS, "insert_run")
    clause = (
        "ON CONFLICT (workflow, debounce_key) WHERE status = 'queued' AND debounce_key IS NOT "
        "NULL DO NOTHING RETURNING id, status )"
    )
    assert clause in text
    # The clause names the index by its condition: the two must say the same thing.
    [window] = [c for c in WorkflowRun._meta.constraints if c.name == "pikku_run_debounce_window"]
    assert sorted(window.condition.children) == [
        ("debounce_key__isnull", False),
        ("status", "queued"),
    ]


def test_join_debounced_run__joins_only_a_run_still_queued():
    text = stripped(debounce_transitions.STATEMENTS, "join_debounced_run")
    assert text.startswith("WITH joined AS ( UPDATE")
    assert "AND run.status = %(run_queued)s::text RETURNING" in text


def test_statement__a_lock_mentioned_only_in_a_comment_does_not_count():
    [block] = parse_blocks(
        "-- name: x\n-- the contract\nSELECT 1 -- FOR SHARE, says the comment\n"
    ).values()
    assert "FOR SHARE" not in without_comments(block.body)


def columns_of(model) -> set[str]:
    return {field.column for field in model._meta.concrete_fields}


def test_new_step_columns__are_every_column_of_a_step():
    listed = {
        column.strip() for column in step_transitions.STATEMENTS["new_step_columns"].split(",")
    }
    assert listed == columns_of(WorkflowStep)


def test_insert_run__lists_every_column_of_a_run():
    text = stripped(run_rows.STATEMENTS, "insert_run")
    listed = text.split(f"INSERT INTO {WorkflowRun._meta.db_table!r}".replace("'", '"'), 1)[1]
    columns = listed.split("(", 1)[1].split(")", 1)[0]
    assert {column.strip() for column in columns.split(",")} == columns_of(WorkflowRun)


def test_queue_message__is_supplied_by_dispatch_and_composed_into_the_dispatch():
    fragment = dispatch.queue_fragments()["queue_message"]
    assert fragment.startswith("queue_message AS (")
    assert fragment in step_transitions.STATEMENTS["insert_dispatched_step"]
