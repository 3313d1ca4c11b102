"""``/auth/whoami``: the HTTP proxy's "whose token is this", which ``yt.wrapper``'s ``get_user_name()`` asks
(issue 27). YTsaurus answers ``{"login", "realm", "csrf_token"}`` for valid credentials and 401 with the
authentication error otherwise (its ``THttpAuthenticator::HandleRequest``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yt.wrapper as ytw

from pooltree.server import create_app, open_store

sys.path.insert(0, str(Path(__file__).parent))
from live_cluster import ROOT_TOKEN
from live_cluster import client as live_client


@pytest.fixture
def base(tmp_path: Path, serve: Callable[[object], str]) -> str:
    return serve(create_app(open_store(f"sqlite:///{tmp_path / 'state.db'}"), token=ROOT_TOKEN))


def test_get_user_name_names_the_tokens_owner(base: str) -> None:
    root = live_client(base)
    assert root.get_user_name() == "root"
    root.create("user", attributes={"name": "alice"})
    token = root.issue_token("alice")
    alice = live_client(base, token.decode() if isinstance(token, bytes) else token)
    assert alice.get_user_name() == "alice"
    answer = httpx.post(f"{base}/auth/whoami", headers={"Authorization": f"OAuth {ROOT_TOKEN}"}, timeout=10)
    assert answer.status_code == 200 and answer.json() == {"login": "root", "realm": "cypress"}
    assert httpx.get(f"{base}/auth/whoami", headers={"Authorization": f"OAuth {ROOT_TOKEN}"}).json()[
        "login"
    ] == ("root")


def test_whoami_without_valid_credentials_is_the_authentication_error(base: str) -> None:
    for headers in ({}, {"Authorization": "OAuth not-a-token"}, {"Authorization": "Basic abc"}):
        answer = httpx.post(f"{base}/auth/whoami", headers=headers, timeout=10)
        assert answer.status_code == 401 and answer.json()["code"] == 900, (headers, answer.text)
    with pytest.raises(ytw.errors.YtTokenError) as refused:  # what the client raises for a 401
        live_client(
            base, "not-a-token", proxy={"enable_proxy_discovery": False, "retries": {"count": 1}}
        ).get_user_name()
    assert "the token is not valid" in str(refused.value)


def test_whoami_is_not_a_command_and_has_a_rule(base: str) -> None:
    commands = {c["name"] for c in httpx.get(f"{base}/api/v4", timeout=10).json()}
    assert "auth_whoami" not in commands and "whoami" not in commands
    from pooltree.security.policy import ROUTE_RULES, RULES

    assert "auth_whoami" in RULES  # deny-by-default authorization needs a rule for it
    assert "/auth/whoami" in ROUTE_RULES  # and the route one
