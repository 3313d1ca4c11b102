"""Nodes are not users: a heartbeat needs the cluster node secret, must come from a registered node network, and
a node address stays bound to the host it first heartbeated from."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path

import httpx
from security_harness import ServerThread

from pooltree.errors import PooltreeError
from pooltree.node.service import NODE_SECRET_HEADER
from pooltree.security.directory import AUTHENTICATION_ERROR
from pooltree.security.guard import check_node_credentials, parse_networks
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

SECRET = "ptns-nodes-test-" + "ab" * 16
TOKEN = "ytct-0000-" + "cd" * 16
LIMITS = {"user_slots": 1, "cpu": 1, "memory": 1 << 30}


def _post(
    url: str, address: str, *, source: str = "127.0.0.1", secret: str | None = SECRET
) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    headers = {NODE_SECRET_HEADER: secret} if secret is not None else {}
    with httpx.Client(transport=transport, timeout=10) as client:
        return client.post(
            f"{url}/internal/node_heartbeat",
            json={"node_address": address, "resource_limits": LIMITS},
            headers=headers,
        )


def test_heartbeats_need_the_secret_and_a_registered_network(tmp_path: Path) -> None:
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        token=TOKEN,
        node_secret=SECRET,
        node_networks=parse_networks("127.0.0.2/32"),
        create_default_tree=True,
    )
    with ServerThread(service.app) as server:
        assert _post(server.url, "n1", source="127.0.0.2").status_code == 200
        refused = _post(server.url, "n2", source="127.0.0.1")
        assert refused.status_code == 401 and "not a registered node network" in refused.json()["message"]
        assert _post(server.url, "n3", source="127.0.0.2", secret=None).status_code == 401
        assert _post(server.url, "n3", source="127.0.0.2", secret=SECRET + "x").status_code == 401
        assert set(service.scheduler.nodes) == {"n1"}


def test_a_node_address_stays_with_its_host(tmp_path: Path, serve: Callable[[object], str]) -> None:
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"),
        token=TOKEN,
        node_secret=SECRET,
        create_default_tree=True,
    )
    url = serve(service.app)
    assert _post(url, "n1", source="127.0.0.1").status_code == 200
    taken = _post(url, "n1", source="127.0.0.3")
    assert taken.status_code == 401 and "registered from 127.0.0.1" in taken.json()["message"]
    assert _post(url, "n1", source="127.0.0.1").status_code == 200
    service.security.forget_node("n1")  # what the sweep does when n1 times out
    assert _post(url, "n1", source="127.0.0.3").status_code == 200


def test_without_a_node_secret_configured_no_heartbeat_is_accepted(
    tmp_path: Path, serve: Callable[[object], str]
) -> None:
    service = SchedulerService(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token=TOKEN)
    url = serve(service.app)
    assert _post(url, "n1").status_code == 401
    assert _post(url, "n1", secret="").status_code == 401


def test_serving_off_loopback_without_authentication_is_refused(tmp_path: Path) -> None:
    import asyncio

    import pytest

    from pooltree.errors import PooltreeError
    from pooltree.server.service import serve

    with pytest.raises(PooltreeError, match="without authentication"):
        asyncio.run(serve(f"sqlite:///{tmp_path / 'db.sqlite'}", host="0.0.0.0", authentication=False))
    assert not (tmp_path / "db.sqlite").exists()  # refused before anything was opened


def test_the_kept_network_verdict_is_the_plain_walks() -> None:
    """``check_node_credentials`` keeps whether a peer is in the node networks per (address, networks): the same
    verdict as walking the networks, for each network set (a peer allowed by one set is refused by another)."""
    wide = parse_networks("10.0.0.0/8,127.0.0.0/8,::1/128")
    narrow = parse_networks("10.1.0.0/16")
    peers = ["10.1.2.3", "10.9.9.9", "127.0.0.1", "::1", "192.168.1.1", "10.1.2.3", "fe80::1", "not-an-ip"]
    for networks in (wide, narrow, wide):
        for peer in peers:
            try:
                ip = ipaddress.ip_address(peer)
            except ValueError:
                ip = None
            expected = ip is not None and any(ip in network for network in networks)
            try:
                check_node_credentials("s", peer, "s", networks)
            except PooltreeError as error:
                assert not expected, (peer, error)
                assert error.code == AUTHENTICATION_ERROR
            else:
                assert expected, peer
