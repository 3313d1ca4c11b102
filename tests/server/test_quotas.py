"""Accounts and quotas with the official client: ``//sys/accounts/{sys,tmp}``, ``@resource_limits`` and
``@resource_usage``, nodes charged to the account of their place (or their own ``@account``), and YTsaurus's error
902 "Account "tmp" is over disk space limit" for a write that would pass the limit, before its bytes are stored.
Reads and removals are still served over the limit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yt.wrapper as ytw

from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

ROOT_TOKEN = "ytct-0000-" + "9a07" * 8
MIB = 1 << 20


def _client(url: str, token: str) -> ytw.YtClient:
    return ytw.YtClient(proxy=url, token=token, config={"proxy": {"enable_proxy_discovery": False}})


@pytest.fixture
def cluster(
    tmp_path: Path, serve: Callable[[object], str]
) -> tuple[SchedulerService, ytw.YtClient, ytw.YtClient]:
    service = SchedulerService(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token=ROOT_TOKEN)
    url = serve(service.app)
    root = _client(url, ROOT_TOKEN)
    root.create("user", attributes={"name": "alice"})
    alice = _client(url, _text(root.issue_token("alice")))
    return service, root, alice


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def test_builtin_accounts_and_usage(cluster: tuple[SchedulerService, ytw.YtClient, ytw.YtClient]) -> None:
    _service, root, alice = cluster
    assert sorted(root.list("//sys/accounts")) == ["sys", "tmp"]
    assert root.get("//tmp/@account") == "tmp" and root.get("//sys/@account") == "sys"
    before = root.get("//sys/accounts/tmp/@resource_usage")
    alice.create("map_node", "//tmp/a")
    alice.write_file("//tmp/a/f", b"x" * 1000)
    assert root.get("//tmp/a/f/@account") == "tmp"
    after = root.get("//sys/accounts/tmp/@resource_usage")
    assert after["node_count"] == before["node_count"] + 2
    assert after["disk_space"] == before["disk_space"] + 1000
    limits = root.get("//sys/accounts/tmp/@resource_limits")
    assert limits["disk_space"] == 1 << 30 and limits["node_count"] == 100_000


def test_over_the_disk_space_limit_is_refused_before_the_bytes_are_stored(
    cluster: tuple[SchedulerService, ytw.YtClient, ytw.YtClient],
) -> None:
    service, root, alice = cluster
    root.set("//sys/accounts/tmp/@resource_limits", {"disk_space": 3 * MIB, "node_count": 50})
    alice.write_file("//tmp/big", b"a" * (2 * MIB))
    blobs_before = len([k for k in service.store.load_nodes()])
    requests = 0
    for _ in range(5):
        with pytest.raises(ytw.YtResponseError) as refused:
            alice.write_file("//tmp/big2", b"b" * (2 * MIB))
        requests += 1
        assert refused.value.contains_code(902)
        assert 'Account "tmp" is over disk space limit' in str(refused.value)
    assert requests == 5
    assert len(service.store.load_nodes()) == blobs_before + 1  # the empty //tmp/big2 node only, no content
    stored_blobs = [key for key in _kv_keys(service) if key.startswith("blob/")]
    assert len(stored_blobs) == 1  # only //tmp/big's content is in the store
    # reads and removals are served; space comes back
    assert alice.read_file("//tmp/big").read() == b"a" * (2 * MIB)
    alice.remove("//tmp/big")
    alice.write_file("//tmp/big2", b"b" * (2 * MIB))
    assert root.get("//sys/accounts/tmp/@resource_usage/disk_space") == 2 * MIB


def _kv_keys(service: SchedulerService) -> list[str]:
    store = service.store
    return [row[0] for row in store._rows("SELECT key FROM kv")]  # type: ignore[attr-defined]


def test_node_count_limit_and_own_accounts(
    cluster: tuple[SchedulerService, ytw.YtClient, ytw.YtClient],
) -> None:
    _service, root, alice = cluster
    used = root.get("//sys/accounts/tmp/@resource_usage/node_count")
    root.set("//sys/accounts/tmp/@resource_limits/node_count", used + 2)
    alice.create("map_node", "//tmp/n1")
    alice.create("map_node", "//tmp/n2")
    with pytest.raises(ytw.YtResponseError) as refused:
        alice.create("map_node", "//tmp/n3")
    assert refused.value.contains_code(902) and 'Account "tmp" is over node count limit' in str(refused.value)
    # an account of one's own: created by root, limits set, a directory charged to it
    root.create(
        "account", attributes={"name": "team", "resource_limits": {"disk_space": 100, "node_count": 10}}
    )
    assert "team" in root.list("//sys/accounts")
    root.create("map_node", "//home/team", recursive=True, attributes={"account": "team"})
    root.write_file("//home/team/f", b"z" * 100)
    assert root.get("//sys/accounts/team/@resource_usage") == {"disk_space": 100, "node_count": 2}
    with pytest.raises(ytw.YtResponseError) as over:
        root.write_file("//home/team/g", b"z")
    assert over.value.contains_code(902) and 'Account "team" is over disk space limit' in str(over.value)
    with pytest.raises(ytw.YtResponseError) as unknown:
        root.set("//home/team/@account", "nope")
    assert 'Account "nope" does not exist' in str(unknown.value)
    with pytest.raises(ytw.YtResponseError):
        root.remove("//sys/accounts/tmp")
    with pytest.raises(ytw.YtResponseError) as bad:
        root.set("//sys/accounts/team/@resource_limits/disk_space", -1)
    assert "non-negative" in str(bad.value)


def test_charging_an_account_needs_use_on_it(
    cluster: tuple[SchedulerService, ytw.YtClient, ytw.YtClient],
) -> None:
    _service, root, alice = cluster
    alice.create("map_node", "//tmp/mine")
    for attempt in (
        lambda: alice.set("//tmp/mine/@account", "sys"),  # out of tmp's quota into sys: refused
        lambda: alice.create("map_node", "//tmp/other", attributes={"account": "sys"}),
        lambda: alice.create("account", attributes={"name": "mine"}),
        lambda: alice.set("//sys/accounts/tmp/@resource_limits/disk_space", 1 << 40),
    ):
        with pytest.raises(ytw.YtResponseError) as denied:
            attempt()
        assert denied.value.contains_code(901), str(denied.value)
    assert alice.get("//tmp/mine/@account") == "tmp"
    alice.set("//tmp/mine/@account", "tmp")  # every user may use tmp
    root.create("account", attributes={"name": "team", "resource_limits": {"node_count": 10}})
    root.set("//sys/accounts/team/@acl", [{"action": "allow", "subjects": ["alice"], "permissions": ["use"]}])
    alice.set("//tmp/mine/@account", "team")
    assert root.get("//sys/accounts/team/@resource_usage/node_count") == 1
