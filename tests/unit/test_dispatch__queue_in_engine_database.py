"""When django-q2's queue is a table of the engine's database, a step and its message are
written in one statement; any other broker gets the message through django-q2's enqueue."""

from __future__ import annotations

import pytest
from django_q.conf import Conf

from pikku_workflows.dispatch import queue_in_engine_database

ORM_BROKERS = ["pikku_workflows.broker.SkipLockedOrmBroker", "django_q.brokers.orm.ORM"]


@pytest.fixture
def conf(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name, value in {"SYNC": False, "ORM": "default", "IRON_MQ": None, "SQS": None}.items():
        monkeypatch.setattr(Conf, name, value)
    return monkeypatch


@pytest.mark.parametrize("broker_class", ORM_BROKERS)
def test_orm_broker_classes_on_the_default_database__qualify(conf, broker_class):
    conf.setattr(Conf, "BROKER_CLASS", broker_class)
    assert queue_in_engine_database()


def test_djangos_own_orm_broker_without_broker_class__qualifies(conf):
    conf.setattr(Conf, "BROKER_CLASS", None)
    assert queue_in_engine_database()


@pytest.mark.parametrize(
    "changes",
    [
        {"BROKER_CLASS": "django_q.brokers.Broker"},  # not the ORM table
        {"BROKER_CLASS": None, "ORM": None},  # django-q2's default: Redis
        {"BROKER_CLASS": None, "SQS": {"aws_region": "eu-west-1"}},
        {"BROKER_CLASS": ORM_BROKERS[0], "ORM": "queue_db"},  # the queue lives elsewhere
        {"BROKER_CLASS": ORM_BROKERS[0], "SYNC": True},  # sync mode runs tasks at enqueue
    ],
)
def test_other_queues__do_not(conf, changes):
    for name, value in changes.items():
        conf.setattr(Conf, name, value)
    assert not queue_in_engine_database()
