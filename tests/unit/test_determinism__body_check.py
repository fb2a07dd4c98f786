"""Workflow bodies that read the clock, draw random numbers, make uuids or read the environment
themselves: found in their source when they register, warned of by `manage.py check` (W009,
naming the line), and an error inside tests that ask (pikku_workflows.testing)."""

from __future__ import annotations

import datetime
import inspect
import os
import random as dice
import time
import uuid
from datetime import date
from datetime import datetime as moment

import pytest
from django.utils import timezone

import pikku_workflows as pw
from pikku_workflows.checks import check_workflow_determinism
from pikku_workflows.determinism import nondeterministic_calls
from pikku_workflows.exceptions import InvalidInput
from pikku_workflows.registry import registry
from pikku_workflows.testing import assert_deterministic, strict_determinism


def careless(wf, input):
    started = datetime.datetime.now()
    stamp = moment.utcnow()
    today = date.today()
    seconds = time.time()
    roll = dice.randint(1, 6)
    token = uuid.uuid4()
    host = os.environ.get("HOST")
    django_now = timezone.now()

    def branch():
        return moment.today()

    return [started, stamp, today, seconds, roll, token, host, django_now, branch]


def careful(wf, input):
    time.sleep(0)  # not a value the body goes on with
    return [wf.now(), wf.random(), wf.uuid4(), wf.uuid7(), datetime.timedelta(seconds=1)]


def line_of(text: str) -> int:
    lines, first = inspect.getsourcelines(careless)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_body_check__finds_each_call_through_the_module_s_imports_with_its_line():
    found = [(finding.name, finding.line) for finding in nondeterministic_calls(careless)]
    assert found == [
        ("datetime.datetime.now()", line_of("datetime.datetime.now()")),
        ("datetime.datetime.utcnow()", line_of("moment.utcnow()")),
        ("datetime.date.today()", line_of("date.today()")),
        ("time.time()", line_of("time.time()")),
        ("random.randint()", line_of("dice.randint")),
        ("uuid.uuid4()", line_of("uuid.uuid4()")),
        ("os.environ", line_of("os.environ")),
        ("django.utils.timezone.now()", line_of("timezone.now()")),
        ("datetime.datetime.today()", line_of("moment.today()")),
    ]
    assert nondeterministic_calls(careful) == ()


def test_body_check__a_function_level_import_counts_too():
    def body(wf, input):
        from random import choice

        return choice([1, 2])

    [finding] = nondeterministic_calls(body)
    assert (finding.name, finding.instead) == ("random.choice()", "wf.random()")


def test_system_check__warns_w008_per_call_naming_the_workflow_file_and_line():
    pw.workflow("check.careless")(careless)
    pw.workflow("check.careful")(careful)
    messages = [m for m in check_workflow_determinism() if m.obj == "workflow 'check.careless'"]
    assert {message.id for message in messages} == {"pikku_workflows.W009"}
    assert len(messages) == 9
    first = messages[0].msg
    assert f"test_determinism__body_check.py:{line_of('datetime.datetime.now()')}" in first
    assert "Use wf.now() instead" in first
    assert not [m for m in check_workflow_determinism() if "check.careful" in m.obj]


def test_testing__assert_deterministic_fails_listing_each_place():
    pw.workflow("check.careless")(careless)
    pw.workflow("check.careful")(careful)
    assert_deterministic("check.careful")
    with pytest.raises(AssertionError) as failure:
        assert_deterministic("check.careless", "check.careful")
    assert str(failure.value).count("check.careless") == 9


def test_testing__strict_determinism_refuses_the_registration():
    with strict_determinism(), pytest.raises(InvalidInput) as refused:
        pw.workflow("check.strict")(careless)
    assert len(refused.value.problems) == 9
    assert "check.strict" not in registry.workflows
    pw.workflow("check.relaxed")(careless)  # outside, a warning only
    assert "check.relaxed" in registry.workflows
