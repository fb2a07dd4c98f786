from __future__ import annotations

import random

import pytest

from pikku_workflows.exceptions import InvalidInput
from pikku_workflows.retry import EXPONENTIAL, RetryPolicy

SECOND = 1_000
CAP = 300_000


def test_resolve__retries_zero_is_honoured():
    policy = RetryPolicy.resolve(0, None, default=5)
    assert policy.retries == 0
    assert policy.attempt_limit == 1


def test_resolve__none_takes_the_default():
    policy = RetryPolicy.resolve(None, None, default=5)
    assert policy.retries == 5
    assert policy.attempt_limit == 6


def test_resolve__explicit_retries_win_over_default():
    assert RetryPolicy.resolve(2, None, default=5).attempt_limit == 3


@pytest.mark.parametrize("retries", [-1, True, 1.5, "3"])
def test_resolve__invalid_retries_rejected(retries):
    with pytest.raises(InvalidInput):
        RetryPolicy.resolve(retries, None, default=5)


@pytest.mark.parametrize("retry_delay", [None, EXPONENTIAL])
def test_resolve__exponential_by_default_and_by_name(retry_delay):
    assert RetryPolicy.resolve(3, retry_delay, default=5).delay_ms is None


def test_resolve__int_delay_is_fixed_milliseconds():
    policy = RetryPolicy.resolve(3, 1500, default=5)
    assert policy.delay_ms == 1500
    assert [policy.backoff_ms(n) for n in (1, 2, 3, 10)] == [1500] * 4


def test_resolve__duration_string_delay_is_fixed():
    policy = RetryPolicy.resolve(3, "10s", default=5)
    assert policy.delay_ms == 10 * SECOND
    assert [policy.backoff_ms(n) for n in (1, 2, 7)] == [10 * SECOND] * 3


@pytest.mark.parametrize("retry_delay", ["soon", -5, True, "", "linear"])
def test_resolve__invalid_delay_rejected(retry_delay):
    with pytest.raises(InvalidInput):
        RetryPolicy.resolve(3, retry_delay, default=5)


def test_backoff_ms__exponential_doubles_from_one_second_within_jitter():
    policy = RetryPolicy.resolve(20, None, default=5)
    rng = random.Random(1234)
    for failed_attempt in range(1, 20):
        base = min(SECOND * 2 ** (failed_attempt - 1), CAP)
        delay = policy.backoff_ms(failed_attempt, rng)
        assert 0.8 * base <= delay <= min(1.2 * base, CAP), (failed_attempt, delay)


def test_backoff_ms__exponential_never_exceeds_five_minutes_even_with_jitter():
    policy = RetryPolicy(retries=50, delay_ms=None)
    rng = random.Random(7)
    delays = [policy.backoff_ms(attempt, rng) for attempt in range(10, 50)]
    assert all(0.8 * CAP <= delay <= CAP for delay in delays)
    assert min(delays) < CAP  # jitter still spreads them below the cap


def test_backoff_ms__exponential_without_jitter_is_exactly_the_doubling():
    class NoJitter(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return 0.0

    policy = RetryPolicy(retries=20, delay_ms=None)
    delays = [policy.backoff_ms(attempt, NoJitter()) for attempt in range(1, 12)]
    assert delays == [
        1_000,
        2_000,
        4_000,
        8_000,
        16_000,
        32_000,
        64_000,
        128_000,
        256_000,
        CAP,
        CAP,
    ]


def test_backoff_ms__jitter_reaches_both_sides_and_is_seeded():
    policy = RetryPolicy(retries=5, delay_ms=None)
    first = [policy.backoff_ms(3, random.Random(seed)) for seed in range(200)]
    again = [policy.backoff_ms(3, random.Random(seed)) for seed in range(200)]
    assert first == again
    assert min(first) < 4_000 * 0.9
    assert max(first) > 4_000 * 1.1
    assert all(3_200 <= delay <= 4_800 for delay in first)


def test_backoff_ms__returns_int_milliseconds():
    assert isinstance(RetryPolicy(3, None).backoff_ms(2, random.Random(0)), int)


@pytest.mark.parametrize(
    ("retries", "retry_delay"),
    [(0, None), (5, EXPONENTIAL), (3, 0), (3, 2500), (1, "5m"), (4, "500ms")],
)
def test_stored_delay__round_trips_through_from_stored(retries, retry_delay):
    policy = RetryPolicy.resolve(retries, retry_delay, default=5)
    stored = policy.stored_delay
    assert isinstance(stored, str)
    assert RetryPolicy.from_stored(policy.retries, stored) == policy


def test_stored_delay__exponential_is_named():
    assert RetryPolicy.resolve(1, None, default=5).stored_delay == EXPONENTIAL
    assert RetryPolicy.resolve(1, "2s", default=5).stored_delay == "2000"


def test_from_stored__empty_means_exponential():
    # The step row's default retry_delay is "".
    assert RetryPolicy.from_stored(5, "").delay_ms is None
