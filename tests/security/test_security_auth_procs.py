"""Authentication with real processes: ``pooltree scheduler`` and two ``pooltree node`` processes, the official
``yt`` CLI and ``yt.wrapper`` with tokens of three users. Users, groups, passwords and tokens are managed with the
client's own commands; an unauthenticated call or a node without the secret gets nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent.parent / "live"))
from live_procs import NODE_SECRET, PYTHON, ROOT_TOKEN, Procs, client, state, vanilla, yt_cli
from polling import wait_for

from pooltree.security.credentials import sha256_hex

ALICE_PASSWORD = "alice-password-1234"


def text(value: str | bytes) -> str:
    """``issue_token``'s answer (the Python client gives the YSON string as bytes)."""
    return value.decode() if isinstance(value, bytes) else value


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs = Procs(root)
        self.process, self.url = self.procs.scheduler(root / "data", 0)
        for name in ("n1", "n2"):
            self.procs.node(self.url, name, "user_slots=2,cpu=2,memory=2Gi")
        self.root_client = client(self.url)
        wait_for(lambda: len(self.root_client.get("//sys/scheduler/orchid/scheduler/nodes")) == 2, timeout=30)

    def cli(
        self, *args: str, token: str | None = ROOT_TOKEN, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return yt_cli(self.url, self.root, *args, token=token, check=check)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = Cluster(tmp_path_factory.mktemp("auth"))
    try:
        yield made
    finally:
        made.procs.close()


@pytest.fixture(scope="module")
def tokens(cluster: Cluster) -> dict[str, str]:
    """alice, bob and carol created with ``yt create user``, each with a token from ``yt issue-token``."""
    out = {}
    for name in ("alice", "bob", "carol"):
        cluster.cli("create", "user", "--attributes", f"{{name={name}}}")
        out[name] = cluster.cli("issue-token", name).stdout.strip().strip('"')
    cluster.cli("create", "group", "--attributes", "{name=analysts}")
    cluster.cli("add-member", "alice", "analysts")
    cluster.cli("add-member", "carol", "analysts")
    return out


def test_unauthenticated_calls_get_nothing_but_discovery(cluster: Cluster) -> None:
    denied = cluster.cli("list", "//sys/pool_trees", token=None, check=False)
    assert denied.returncode != 0 and "failed to authenticate" in denied.stderr
    assert httpx.get(f"{cluster.url}/api/v4", timeout=10).status_code == 200
    assert httpx.get(f"{cluster.url}/api", timeout=10).status_code == 200
    for path in ("/api/v4/get?path=//sys", "/api/v4/list_operations", "/metrics"):
        response = httpx.get(cluster.url + path, timeout=10)
        assert response.status_code == 401 and response.json()["code"] == 900, path
    wrong = httpx.get(
        f"{cluster.url}/api/v4/get_current_user", headers={"Authorization": "OAuth ytct-0000-" + "0" * 32}
    )
    assert wrong.status_code == 401
    with pytest.raises(ytw.YtTokenError):
        client(cluster.url, token=None).run_operation(vanilla("true", 1), sync=False)
    assert (
        httpx.get(f"{cluster.url}/metrics", headers={"Authorization": f"OAuth {ROOT_TOKEN}"}).status_code
        == 200
    )


def test_a_fake_node_gets_no_job(cluster: Cluster) -> None:
    op = cluster.root_client.run_operation(
        vanilla("sleep 30", 8), sync=False
    )  # more jobs than slots: pending
    try:
        wait_for(lambda: state(cluster.root_client, op.id) == "running", timeout=20)
        heartbeat = {
            "node_address": "fake",
            "resource_limits": {"user_slots": 8, "cpu": 8, "memory": 8 << 30},
        }
        for headers in (
            {},
            {"Authorization": f"OAuth {ROOT_TOKEN}"},  # a user token, even root's, is no node credential
            {"X-Pooltree-Node-Secret": "ptns-guessed"},
        ):
            response = httpx.post(f"{cluster.url}/internal/node_heartbeat", json=heartbeat, headers=headers)
            assert response.status_code == 401 and "start" not in response.text, headers
            assert response.json()["code"] == 900
        # a real node name claimed with the right secret from the same host is the node itself; the scheduler
        # never answers a job spec to a caller without the secret
        assert "fake" not in cluster.root_client.get("//sys/scheduler/orchid/scheduler/nodes")
        assert (
            NODE_SECRET
            not in httpx.get(
                f"{cluster.url}/api/v4/get?path=//sys", headers={"Authorization": f"OAuth {ROOT_TOKEN}"}
            ).text
        )
    finally:
        cluster.root_client.abort_operation(op.id)


def test_users_groups_and_whoami_with_the_cli(cluster: Cluster, tokens: dict[str, str]) -> None:
    for name, token in tokens.items():
        assert cluster.cli("whoami", token=token).stdout.strip() == name
        assert token.startswith("ytct-")
    assert cluster.cli("whoami").stdout.strip() == "root"
    spoof = httpx.get(
        f"{cluster.url}/api/v4/get_current_user",
        headers={"Authorization": f"OAuth {tokens['bob']}", "X-Started-By": '{user="root"}'},
    )
    assert spoof.json() == {"user": "bob"}  # identity comes from the token only
    members = cluster.root_client.get("//sys/groups/analysts/@members")
    assert sorted(members) == ["alice", "carol"]
    assert "analysts" in cluster.root_client.get("//sys/users/alice/@member_of")
    assert cluster.root_client.exists("//sys/users/bob") and not cluster.root_client.exists(
        "//sys/users/dave"
    )
    attributes = cluster.root_client.get("//sys/users/alice/@")
    assert "hashed_password" not in attributes and "password_salt" not in attributes
    # only superusers manage users and groups
    bob = client(cluster.url, tokens["bob"])
    for call in (
        lambda: bob.create("user", attributes={"name": "mallory"}),
        lambda: bob.add_member("bob", "superusers"),
        lambda: bob.remove_member("carol", "analysts"),
        lambda: bob.remove("//sys/users/alice"),
    ):
        with pytest.raises(ytw.YtResponseError) as denied:
            call()
        assert denied.value.contains_code(901)
    assert not cluster.root_client.exists("//sys/users/mallory")
    cluster.cli("remove-member", "carol", "analysts")
    assert cluster.root_client.get("//sys/groups/analysts/@members") == ["alice"]


def test_passwords_and_own_tokens(cluster: Cluster, tokens: dict[str, str]) -> None:
    cluster.root_client.set_user_password("alice", ALICE_PASSWORD)
    alice = client(cluster.url, tokens["alice"])
    with pytest.raises(ytw.YtResponseError) as no_password:
        alice.issue_token("alice")
    assert no_password.value.contains_code(901)
    with pytest.raises(ytw.YtResponseError):
        alice.issue_token("alice", password="wrong-password-123")
    own = text(alice.issue_token("alice", password=ALICE_PASSWORD))
    assert client(cluster.url, own).get_current_user()["user"] == "alice"
    listed = json.loads(alice.list_user_tokens("alice", password=ALICE_PASSWORD))  # the raw answer
    assert sha256_hex(own) in listed and sha256_hex(tokens["alice"]) in listed
    with pytest.raises(ytw.YtResponseError) as other:
        alice.issue_token("bob", password=ALICE_PASSWORD)  # her password is no key to bob
    assert other.value.contains_code(901)
    with pytest.raises(ytw.YtResponseError):
        alice.list_user_tokens("bob", password=ALICE_PASSWORD)
    alice.revoke_token("alice", token=own, password=ALICE_PASSWORD)
    with pytest.raises(ytw.YtTokenError):
        client(cluster.url, own).list("//sys/pool_trees")
    # the CLI's own commands, as root (passwordless: root administers every user)
    spare = cluster.cli("issue-token", "carol").stdout.strip().strip('"')
    assert sha256_hex(spare) in cluster.cli("list-user-tokens", "carol").stdout
    cluster.cli("revoke-token", "carol", "--token-sha256", sha256_hex(spare))
    assert cluster.cli("whoami", token=spare, check=False).returncode != 0
    # changing her own password needs the current one
    with pytest.raises(ytw.YtResponseError):
        alice.set_user_password("alice", "new-password-12345", current_password="wrong-password-123")
    alice.set_user_password("alice", "new-password-12345", current_password=ALICE_PASSWORD)
    assert text(alice.issue_token("alice", password="new-password-12345")).startswith("ytct-")


def test_operations_belong_to_the_token_owner(cluster: Cluster, tokens: dict[str, str]) -> None:
    carol = client(cluster.url, tokens["carol"])
    op = carol.run_operation(vanilla("true", 1), sync=False)
    wait_for(lambda: state(carol, op.id) == "completed", timeout=30)
    assert carol.get_operation(op.id)["authenticated_user"] == "carol"
    assert cluster.root_client.list_operations(user="carol")["operations"][0]["id"] == op.id


def test_no_authentication_is_refused_off_loopback(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            PYTHON,
            "-m",
            "pooltree.cli",
            "scheduler",
            "--data",
            str(tmp_path),
            "--host",
            "0.0.0.0",
            "--no-authentication",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1 and "--no-authentication is refused on 0.0.0.0" in result.stderr
    short = subprocess.run(
        [PYTHON, "-m", "pooltree.cli", "scheduler", "--data", str(tmp_path), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "POOLTREE_TOKEN": "short"},
    )
    assert short.returncode == 1
