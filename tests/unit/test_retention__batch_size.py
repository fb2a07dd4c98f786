"""A purge sizes each batch from how long the last one held its locks: toward the target,
never more than doubling, never past the purge's `batch`, never below one run."""

from __future__ import annotations

import pytest

from pikku_workflows.retention import BATCH_TARGET_MS, next_batch_size


@pytest.mark.parametrize(
    ("size", "took_ms", "most", "expected"),
    [
        (100, BATCH_TARGET_MS, 1000, 100),  # on target: the same again
        (100, BATCH_TARGET_MS * 4, 1000, 25),  # four times too long: a quarter
        (100, BATCH_TARGET_MS / 10, 1000, 200),  # far too short: doubled, no more
        (800, BATCH_TARGET_MS / 2, 1000, 1000),  # never past the purge's batch
        (3, BATCH_TARGET_MS * 100, 1000, 1),  # a very slow database: one run at a time
        (50, 0.0, 1000, 100),  # a batch measured as instant
    ],
)
def test_next_batch_size(size, took_ms, most, expected):
    assert next_batch_size(size, took_ms, most) == expected
