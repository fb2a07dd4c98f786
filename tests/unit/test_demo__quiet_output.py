"""The demo's terminal shows what the engine says: django-q2 speaks at WARNING and above there
(it logs every process start and task at INFO)."""

from __future__ import annotations

import logging

import django_q.conf  # noqa: F401 - sets django-q2's log level from Q_CLUSTER, as its cluster does


def test_demo__django_q2_logs_only_warnings_and_errors():
    assert logging.getLogger("django-q").level == logging.WARNING
