"""The pytest plugin (registered as `pikku_workflows` in the `pytest11` entry points): the
`workflows` fixture, `pikku_workflows.testing` at hand in a test.

```python
def test_order_ships(db, workflows):
    run_id = pw.start_workflow("order_fulfilment", {"id": 7, "amount": 12})
    assert workflows.drain(run_id, advance="10m")["status"] == "completed"

def test_a_large_order_waits_for_a_manager(db, workflows, manager):  # manager: a user of yours
    run_id = pw.start_workflow("order_fulfilment", {"id": 8, "amount": 900})
    assert workflows.approve(run_id, "manager-ok", by=manager)["status"] == "completed"
```

It asks for no database access itself: use it with pytest-django's `db`, `transactional_db` or
the `django_db` mark. Importing this module imports nothing of Django.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest


@pytest.fixture
def workflows() -> SimpleNamespace:
    """`drain`, `approve`, `reject` and `signal` from `pikku_workflows.testing`."""
    from pikku_workflows import testing

    return SimpleNamespace(
        drain=testing.drain,
        approve=testing.approve,
        reject=testing.reject,
        signal=testing.signal,
    )
