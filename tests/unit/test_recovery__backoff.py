"""RedispatchBackoff: per-run holds of 30 s doubling to 10 min, in bounded memory (docs/architecture.md §8)."""

from __future__ import annotations

import itertools
import uuid

import pytest
from django.test import override_settings

from pikku_workflows.engine.operations import recovery
from pikku_workflows.engine.operations.recovery import RedispatchBackoff


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_allow__first_dispatch_is_free_then_held_30s():
    clock = FakeClock()
    backoff = RedispatchBackoff(clock=clock)

    assert backoff.allow("run-a") is True
    clock.now += 29.9
    assert backoff.allow("run-a") is False
    clock.now += 0.1
    assert backoff.allow("run-a") is True


def test_allow__holds_double_up_to_ten_minutes():
    clock = FakeClock()
    backoff = RedispatchBackoff(clock=clock)
    allowed_at = []
    for _ in range(400):
        if backoff.allow("run-a"):
            allowed_at.append(clock.now)
        clock.now += 10
    gaps = [later - earlier for earlier, later in itertools.pairwise(allowed_at)]

    assert gaps[:7] == [30, 60, 120, 240, 480, 600, 600]
    assert set(gaps[5:]) == {600}


def test_allow__held_calls_do_not_lengthen_the_hold():
    clock = FakeClock()
    backoff = RedispatchBackoff(clock=clock)
    assert backoff.allow("run-a")
    for _ in range(29):
        clock.now += 1
        assert backoff.allow("run-a") is False
    clock.now += 1
    assert backoff.allow("run-a") is True


def test_allow__runs_are_held_independently():
    clock = FakeClock()
    backoff = RedispatchBackoff(clock=clock)

    assert backoff.allow("run-a")
    assert backoff.allow("run-b")
    assert backoff.allow("run-a") is False
    assert backoff.allow("run-b") is False
    assert backoff.allow("run-c")


def test_allow__keys_runs_by_their_string_id():
    run_id = uuid.uuid4()
    backoff = RedispatchBackoff(clock=FakeClock())

    assert backoff.allow(run_id)
    assert backoff.allow(str(run_id)) is False


def test_allow__memory_is_bounded_and_forgets_the_oldest(monkeypatch):
    monkeypatch.setattr(recovery, "BACKOFF_MEMORY", 3)
    backoff = RedispatchBackoff(clock=FakeClock())

    for run_id in ["a", "b", "c", "d"]:
        assert backoff.allow(run_id)

    assert len(backoff._holds) == 3
    assert backoff.allow("a") is True  # forgotten: free again (costs one extra message)
    assert backoff.allow("d") is False  # remembered
    assert len(backoff._holds) == 3


def test_allow__memory_bound_holds_under_many_runs():
    backoff = RedispatchBackoff(clock=FakeClock())

    for index in range(recovery.BACKOFF_MEMORY + 500):
        backoff.allow(f"run-{index}")

    assert len(backoff._holds) == recovery.BACKOFF_MEMORY


@pytest.mark.parametrize(
    ("first", "maximum", "expected"), [(1, 4, [1, 2, 4, 4, 4]), (5, 600, [5, 10, 20, 40, 80])]
)
def test_allow__hold_and_cap_come_from_settings(first, maximum, expected):
    clock = FakeClock()
    backoff = RedispatchBackoff(clock=clock)
    settings = {"REDISPATCH_BACKOFF_SECONDS": first, "REDISPATCH_BACKOFF_MAX_SECONDS": maximum}
    allowed_at = []
    with override_settings(PIKKU_WORKFLOWS=settings):
        for _ in range(2000):
            if backoff.allow("run-a"):
                allowed_at.append(clock.now)
            clock.now += 0.5
    gaps = [later - earlier for earlier, later in itertools.pairwise(allowed_at)]

    assert gaps[: len(expected)] == expected


def test_allow__a_run_that_progressed_since_its_last_relay_starts_afresh():
    clock = FakeClock()
    backoff = RedispatchBackoff(clock=clock)
    for _ in range(4):  # stuck at one point: holds of 30, 60, 120, 240 s
        clock.now += 1000
        assert backoff.allow("run-a", progress="step 3 at 10:00")

    clock.now += 1
    assert backoff.allow("run-a", progress="step 3 at 10:00") is False  # held 240 s now
    assert backoff.allow("run-a", progress="step 4 at 10:40") is True  # it moved on since
    clock.now += 30
    assert backoff.allow("run-a", progress="step 4 at 10:40") is True  # back to the first hold
