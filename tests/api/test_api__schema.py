"""The OpenAPI schema: committed as docs/openapi.yaml (this fails when it drifts), served with
Swagger UI and Redoc from local static files, and fuzzed with schemathesis: zero server errors
and zero responses that break the schema, for valid requests (against a live server, over real
sockets) and invalid ones (through the WSGI application) alike."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import Permission
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import API, PURCHASE

pytestmark = pytest.mark.django_db

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
REGENERATE = "make openapi"
# Examples per operation and generation mode: bounded, so the run adds seconds, not minutes.
# Seeded, the invalid ones reach every (location, mutation, keyword, parameter) and every status
# code of each operation by the 11th: a 12th added none (measured over the 38 operations).
EXAMPLES = {GenerationMode.POSITIVE: 12, GenerationMode.NEGATIVE: 11}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def test_schema__committed_file_matches_the_generated_schema(client):
    response = client.get(API + "schema/")

    assert response.status_code == 200
    assert response.content.decode() == COMMITTED.read_text(), (
        f"docs/openapi.yaml is out of date: run `{REGENERATE}` and commit it"
    )


def test_schema__covers_every_endpoint_of_the_api_and_nothing_else(client):
    import yaml

    paths = yaml.safe_load(client.get(API + "schema/").content)["paths"]

    assert set(paths) == {
        f"{API}{path}"
        for path in (
            "definitions/",
            "definitions/{name}/",
            "definitions/{name}/runs/",
            "runs/",
            "runs/counts/",
            "runs/bulk/{operation}/",
            "runs/{id}/",
            "runs/{id}/timeline/",
            "runs/{id}/state/",
            "runs/{id}/events/",
            "runs/{id}/cancel/",
            "runs/{id}/suspend/",
            "runs/{id}/resume/",
            "runs/{id}/retry/",
            "runs/{id}/fork/",
            "runs/{id}/signals/{name}/",
            "runs/{id}/hold/",
            "runs/{id}/release/",
            "runs/{id}/updates/{name}/",
            "approvals/",
            "approvals/{id}/",
            "approvals/{id}/approve/",
            "metrics/",
            "approvals/{id}/reject/",
            "approvals/{id}/reassign/",
            "limits/",
            "limits/{name}/",
            "schedules/",
            "schedules/{name}/",
            "schedules/{name}/pause/",
            "schedules/{name}/resume/",
            "schedules/{name}/trigger/",
            "schedules/{name}/backfill/",
            "schedules/{name}/ticks/",
        )
    }


@pytest.mark.parametrize(
    ("page", "asset"), [("swagger/", "swagger-ui-bundle.js"), ("redoc/", "redoc.standalone.js")]
)
def test_schema__docs_pages_load_everything_from_this_site(client, page, asset):
    response = client.get(API + "schema/" + page)

    html = response.content.decode()
    assert response.status_code == 200
    assert "/static/drf_spectacular_sidecar/" in html
    assert asset in html
    # Every script, stylesheet and font is served here: none is loaded from another host (the
    # page's random CSRF token may spell "cdn", so look at the addresses, not the word).
    scripts = re.findall(r"""<script[^>]*\ssrc=["']?([^"' >]+)""", html)
    links = re.findall(r"""<link[^>]*\shref=["']?([^"' >]+)""", html)
    assert scripts and all(src.startswith("/") and not src.startswith("//") for src in scripts)
    assert all(href.startswith("/") and not href.startswith("//") for href in links), links
    assert API + "schema/" in html


@pytest.fixture
def real_runs(shop, operator) -> list[str]:
    """Runs in every status, so fuzzed requests reach real runs as well as unknown ids."""
    runs = [
        shop.start(operator),
        shop.failed(operator),
        shop.start(operator, review=True),
        shop.start(operator, sleep="1h"),
        shop.start(operator, sleep="1h"),
        shop.start(operator, signal="payment.settled"),
    ]
    return [str(run.pk) for run in runs]


@pytest.fixture
def real_approvals(shop, operator, make_user) -> list[str]:
    """Approvals the fuzzing user may decide and reassign (with and without a form, one for a
    quorum, one for someone else), so fuzzed decisions reach the engine's judgement."""
    operator.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["decide_workflowapproval", "reassign_workflowapproval"]
        )
    )
    requester = make_user("requester")
    approvals = [
        shop.awaiting(requester),
        shop.awaiting(requester, form=PURCHASE),
        shop.awaiting(requester, policy="quorum", quorum=2),
        shop.awaiting(requester, approvers=["someone-else"]),
        shop.awaiting(requester, expires_in="1h", on_expire="approve"),
    ]
    return [str(approval.pk) for approval in approvals]


@pytest.fixture
def wsgi_app() -> Any:
    """The project's WSGI application, minus the end-of-request connection cleanup that would
    close the test's transaction (what Django's test client leaves out too)."""
    from django.core import signals
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def fuzz_every_operation(
    schema: Any, token: str, mode: GenerationMode, runs: list[str], approvals: list[str]
) -> None:
    """Every operation of `schema`, EXAMPLES[mode] requests each in `mode`, each again against a
    real run or approval when it names one: no server error, nothing the schema does not say."""
    headers = {"Authorization": f"Token {token}"}
    known_runs, known_approvals = itertools.cycle(runs), itertools.cycle(approvals)
    # A live run's event stream never ends: its summary is enough to check.
    schema.config.max_stream_events = 1
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 38

    def exercise(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)
        if "id" in (case.path_parameters or {}):
            # The same request against a real run or approval: fuzzed bodies and queries meet
            # real state.
            approval = case.operation.path.startswith(API + "approvals/")
            case.path_parameters["id"] = next(known_approvals if approval else known_runs)
            case.call_and_validate(headers=headers, checks=CHECKS)

    unnegatable: list[str] = []
    for operation in operations:
        strategy = operation.as_strategy(generation_mode=mode)

        @given(case=strategy)
        @settings(
            max_examples=EXAMPLES[mode],
            derandomize=True,  # seeded: the same examples on every run
            database=None,
            deadline=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case: Any) -> None:
            exercise(case)

        try:
            fuzz()
        except Unsatisfiable:
            # Nothing in this operation can be made invalid (no parameters, no body).
            assert mode is GenerationMode.NEGATIVE, operation.label
            unnegatable.append(operation.label)
    assert len(unnegatable) < len(operations) / 2, unnegatable


@pytest.mark.slow
# Negative cases take the longest (about a minute on a busy 2-core machine): more room than the
# suite's deadlock timeout, still bounded by EXAMPLES.
@pytest.mark.fuzz
@pytest.mark.timeout(300)
def test_schema__fuzzed_invalid_requests_never_fail_the_server_or_the_schema(
    operator, real_runs, real_approvals, wsgi_app
):
    schema = schemathesis.openapi.from_wsgi(API + "schema/", wsgi_app)
    token = Token.objects.create(user=operator).key

    fuzz_every_operation(schema, token, GenerationMode.NEGATIVE, real_runs, real_approvals)


@pytest.mark.slow
@pytest.mark.timeout(300)
# A real server in a thread of its own, over real sockets: what the tests' WSGI calls skip
# (request parsing, chunked event streams, connections per thread) is in the way too.
@pytest.mark.fuzz
@pytest.mark.django_db(transaction=True)
def test_schema__fuzzed_valid_requests_to_a_live_server_never_fail_it_or_the_schema(
    live_server, operator, real_runs, real_approvals
):
    schema = schemathesis.openapi.from_url(live_server.url + API + "schema/")
    token = Token.objects.create(user=operator).key

    fuzz_every_operation(schema, token, GenerationMode.POSITIVE, real_runs, real_approvals)
