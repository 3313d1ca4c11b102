"""Deny by default: every command and every HTTP route the scheduler serves has an authorization rule, a command
or route without one is refused, and every route that is not public refuses a caller without credentials (real
HTTP on loopback, the scheduler service as ``pooltree scheduler`` builds it)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from pooltree.errors import PooltreeError
from pooltree.security.policy import ROUTE_RULES, RULES
from pooltree.server import CommandContext, CommandRegistry
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TOKEN = "ytct-0000-" + "d4" * 16
RUNNER_ROUTES = {"/internal/store_health"}
"""Served by ``SchedulerRunner`` in front of the service's app (tested with real processes in
``test_security_attacks.py``)."""


@pytest.fixture
def service(tmp_path: Path) -> SchedulerService:
    return SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token=TOKEN, node_secret="ptns-" + "e5" * 16
    )


def test_every_served_command_and_route_has_a_rule(service: SchedulerService) -> None:
    descriptors = service.app.state.registry.descriptors()
    names = {d.name for d in descriptors}
    # the commands the issue found open are served, and each by its rule
    assert {"read_file", "write_file", "lock", "put_file_to_cache", "abort_transaction", "abort_job"} <= names
    for descriptor in descriptors:
        assert descriptor.rule is not None, descriptor.name
        assert descriptor.rule.needs, descriptor.name
    # the table's rule, or (table and dynamic-table commands, answered "not supported") the one they were given
    assert {n for n in names if n not in RULES} == {
        d.name for d in descriptors if "not supported" in d.rule.needs
    }
    paths = {route.path for route in service.app.router.routes} | RUNNER_ROUTES
    assert paths - set(ROUTE_RULES) == set(), "routes served without a rule"
    assert set(ROUTE_RULES) - paths == set(), "rules for routes nobody serves"


def test_a_command_without_a_rule_is_never_registered(service: SchedulerService) -> None:
    registry = CommandRegistry()
    with pytest.raises(PooltreeError, match="no authorization rule"):
        registry.register("frobnicate", lambda ctx: None)
    assert "frobnicate" not in registry
    with pytest.raises(PooltreeError) as error:
        service.security.authorize("frobnicate", "alice", {})
    assert error.value.code == 901 and error.value.attributes["command"] == "frobnicate"
    assert error.value.message.startswith('Access denied for user "alice"')


def _fill(path: str) -> str:
    return re.sub(r"\{[^}:]+(:path)?\}", "x", path)


def test_non_public_routes_refuse_the_unauthenticated(
    service: SchedulerService, serve: Callable[[object], str]
) -> None:
    url = serve(service.app)
    checked = 0
    for path, rule in ROUTE_RULES.items():
        if path in RUNNER_ROUTES or rule.access == "public":
            continue
        methods = next(r.methods for r in service.app.router.routes if getattr(r, "path", None) == path)
        for method in sorted(methods - {"HEAD"}):
            answer = httpx.request(method, url + _fill(path), timeout=10)
            assert answer.status_code == 401, (path, method, answer.status_code, answer.text[:200])
            checked += 1
    # every command, without a token
    for descriptor in service.app.state.registry.descriptors():
        answer = httpx.request(descriptor.method, f"{url}/api/v4/{descriptor.name}", timeout=10)
        assert answer.status_code == 401 and answer.json()["code"] == 900, descriptor.name
        checked += 1
    assert checked > 50


def test_a_route_added_without_a_rule_is_refused(
    service: SchedulerService, serve: Callable[[object], str]
) -> None:
    async def secret(request: Request) -> PlainTextResponse:
        return PlainTextResponse("the leader's secrets")

    service.app.router.routes.insert(0, Route("/internal/debug_dump", secret, methods=["GET"]))
    url = serve(service.app)
    answer = httpx.get(url + "/internal/debug_dump", headers={"Authorization": f"OAuth {TOKEN}"}, timeout=10)
    assert answer.status_code == 403 and "secrets" not in answer.text
    assert answer.json()["code"] == 901 and answer.json()["attributes"]["route"] == "/internal/debug_dump"
    # the routes with rules are served as before
    whoami = httpx.get(
        url + "/api/v4/get_current_user", headers={"Authorization": f"OAuth {TOKEN}"}, timeout=10
    )
    assert whoami.json() == {"user": "root"}


def test_registered_rules_are_used_by_batches(service: SchedulerService) -> None:
    """``execute_batch`` authorizes each request by its own command's rule (a denied read stays denied)."""
    service.cypress.create(
        "map_node",
        "//tmp/private",
        attributes={"acl": [{"action": "deny", "subjects": ["alice"], "permissions": ["read"]}]},
    )
    service.security.directory.create_user("alice")
    registry = service.app.state.registry
    _, batch = registry.lookup("execute_batch")
    ctx = CommandContext(
        "execute_batch",
        {"requests": [{"command": "get", "parameters": {"path": "//tmp/private"}}]},
        user="alice",
    )
    result = batch(ctx)["results"][0]
    assert result["error"]["code"] == 901
