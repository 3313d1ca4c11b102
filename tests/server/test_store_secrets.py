"""Nothing secret at rest, on SQLite and PostgreSQL: after tokens are issued (also inside a batch), passwords set
and an operation started with a ``secure_vault``, no table of the store (nor the SQLite files' bytes) holds a
token, a password, its SHA-256 or a vault value. Mutation ids are scoped to their user: bob replaying alice's
``issue_token`` mutation id gets no token of hers. The vault comes back after a restart with the key file, and an
operation whose vault cannot be opened (another key) fails instead of running its jobs without their secrets."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yt.wrapper as ytw

from pooltree.security.credentials import sha256_hex
from pooltree.security.sealing import Sealer
from pooltree.server.service import SchedulerService
from pooltree.server.store import Store, StoreError, StoreRefused, open_store
from pooltree.server.store.base import mutation_key
from pooltree.server.store.postgres import PostgresStore
from pooltree.server.store.sqlite import SqliteStore

ROOT_TOKEN = "ytct-0000-" + "5ec2" * 8
NODE_SECRET = "ptns-secrets-test-" + "ab" * 16
PASSWORD = "alice-password-1234"
VAULT_VALUE = "vault-value-" + uuid.uuid4().hex


def _client(url: str, token: str) -> ytw.YtClient:
    return ytw.YtClient(proxy=url, token=token, config={"proxy": {"enable_proxy_discovery": False}})


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _command(url: str, token: str, name: str, params: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{url}/api/v4/{name}",
        headers={
            "Authorization": f"OAuth {token}",
            "X-YT-Parameters": json.dumps(params),
            "X-YT-Header-Format": "json",
            "X-YT-Output-Format": "json",
        },
        timeout=30,
    )


def _rows(store_url: str) -> Iterator[tuple[str, str]]:
    """(table, text of one row) of every table of the store."""
    if store_url.startswith("sqlite:///"):
        conn = sqlite3.connect(store_url[len("sqlite:///") :])
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                for row in conn.execute(f'SELECT * FROM "{table}"'):
                    yield table, repr(row)
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(store_url) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        ]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                yield table, repr(row)


def _ephemeral_store(store_url: str) -> Store:
    if store_url.startswith("sqlite:///"):
        return SqliteStore(Path(store_url[len("sqlite:///") :]), sealer=Sealer.ephemeral())
    return PostgresStore(store_url, sealer=Sealer.ephemeral())


def _service(store_url: str, key_file: Path) -> SchedulerService:
    return SchedulerService(
        open_store(store_url, key_file=key_file), token=ROOT_TOKEN, node_secret=NODE_SECRET
    )


def test_no_secret_in_any_table(store_url: str, tmp_path: Path, serve: Callable[[object], str]) -> None:
    key_file = tmp_path / "keys" / "store_key"
    service = _service(store_url, key_file)
    url = serve(service.app)
    root = _client(url, ROOT_TOKEN)
    root.create("scheduler_pool_tree", "//sys/pool_trees/default")
    for name in ("alice", "bob"):
        root.create("user", attributes={"name": name})
    root.set_user_password("alice", PASSWORD)
    tokens = [_text(root.issue_token("bob"))]
    alice_id = str(uuid.uuid4())
    first = _command(url, ROOT_TOKEN, "issue_token", {"user": "alice", "mutation_id": alice_id})
    assert first.status_code == 200, first.text
    tokens.append(first.json())
    # a retry by the same user gets the same answer
    again = _command(
        url, ROOT_TOKEN, "issue_token", {"user": "alice", "mutation_id": alice_id, "retry": True}
    )
    assert again.json() == tokens[-1]
    # bob replaying that mutation id gets no token of alice's: his request is his own (refused: not his user)
    replay = _command(
        url, tokens[0], "issue_token", {"user": "alice", "mutation_id": alice_id, "retry": True}
    )
    assert replay.status_code != 200 and tokens[-1] not in replay.text
    own = _command(url, tokens[0], "issue_token", {"user": "bob", "mutation_id": alice_id, "retry": True})
    assert tokens[-1] not in own.text  # bob has no password: refused (901), never alice's saved answer
    if own.status_code == 200:
        tokens.append(own.json())
    batch = _command(
        url,
        ROOT_TOKEN,
        "execute_batch",
        {
            "mutation_id": str(uuid.uuid4()),
            "requests": [
                {"command": "issue_token", "parameters": {"user": "bob", "mutation_id": str(uuid.uuid4())}}
            ],
        },
    )
    assert batch.status_code == 200, batch.text
    tokens.append(batch.json()["results"][0]["output"])
    alice = _client(url, tokens[1])
    assert alice.get_user_name() == "alice"
    tokens.append(_text(alice.issue_token("alice", password=PASSWORD)))
    spec = ytw.VanillaSpecBuilder().task("main", {"command": "sleep 1000", "job_count": 1})
    spec = spec.secure_vault({"MY_SECRET": VAULT_VALUE, "OTHER": {"nested": VAULT_VALUE + "-2"}})
    operation_id = root.run_operation(spec, sync=False).id

    secrets = {
        "root token": ROOT_TOKEN,
        "password": PASSWORD,
        "password sha256": sha256_hex(PASSWORD),
        "vault value": VAULT_VALUE,
        **{f"token {i}": token for i, token in enumerate(tokens)},
    }
    assert all(token.startswith("ytct-") for token in tokens)
    rows = list(_rows(store_url))
    assert {table for table, _ in rows} >= {"cypress_nodes", "kv", "operations", "mutations"}
    found = [(what, table) for what, value in secrets.items() for table, row in rows if value in row]
    assert found == []
    if store_url.startswith("sqlite:///"):  # the files' bytes too (pages, journal)
        database = Path(store_url[len("sqlite:///") :])
        for path in database.parent.glob(database.name + "*"):
            data = path.read_bytes()
            assert not [what for what, value in secrets.items() if value.encode() in data], path
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"

    # the vault comes back after a restart with the same key (the jobs get it), not with another one
    service.store.close()
    revived = _service(store_url, key_file)
    revived.scheduler.revive(1e10)
    vault = revived.scheduler.operations[operation_id].spec["secure_vault"]
    assert vault == {"MY_SECRET": VAULT_VALUE, "OTHER": {"nested": VAULT_VALUE + "-2"}}
    revived.store.close()
    with pytest.raises(StoreError):  # another key file: refused at start, naming the fix
        _service(store_url, tmp_path / "other_key")
    # a key of the process only (no key file) is not checked: the vault it cannot open fails the operation
    stranger = SchedulerService(_ephemeral_store(store_url), token=ROOT_TOKEN, node_secret=NODE_SECRET)
    stranger.scheduler.revive(1e10)
    assert operation_id not in stranger.scheduler.operations
    record = stranger.store.get_operation(operation_id)
    assert record is not None and record.state == "failed"
    assert "store key" in json.dumps(record.document["error"])
    stranger.store.close()


def test_a_scheduler_with_another_store_key_is_refused_at_start(store_url: str, tmp_path: Path) -> None:
    first = tmp_path / "first_key"
    store = open_store(store_url, key_file=first)
    store.remember_mutation(mutation_key("root", "m"), {"token": "ytct-0000-" + "ab" * 16}, 1.0)
    store.close()
    with pytest.raises(StoreError) as refused:
        open_store(store_url, key_file=tmp_path / "second_key")
    assert "another key" in refused.value.message and "--store-key-file" in refused.value.message
    again = open_store(store_url, key_file=first)  # the right key opens it, and the saved answer
    try:
        assert again.get_mutation(mutation_key("root", "m"))[0] is True
    finally:
        again.close()


def test_a_standby_checks_its_key_without_writing(fresh_postgres_url: str, tmp_path: Path) -> None:
    """``verify_key``, a standby's check: nothing to check on an empty database (and nothing created there), the
    sealed value opened with the same key, ``StoreRefused`` naming the fix with another key."""
    first, second = Sealer.from_file(tmp_path / "first_key"), Sealer.from_file(tmp_path / "second_key")
    standby = PostgresStore(fresh_postgres_url, init_schema=False, sealer=first)
    try:
        assert standby.verify_key() is False
        assert standby.execute_autocommit("SELECT to_regclass('meta') IS NULL") is True  # nothing created
    finally:
        standby.close()
    PostgresStore(fresh_postgres_url, sealer=second).close()  # the first leader seals its key's value
    for sealer in (first, Sealer.ephemeral()):
        stranger = PostgresStore(fresh_postgres_url, init_schema=False, sealer=sealer)
        try:
            if sealer is first:
                with pytest.raises(StoreRefused) as refused:
                    stranger.verify_key()
                assert "another key" in refused.value.message and "--store-key-file" in refused.value.message
            else:
                assert stranger.verify_key() is False  # a key of the process only is not checked
        finally:
            stranger.close()
    same = PostgresStore(fresh_postgres_url, init_schema=False, sealer=second)
    try:
        assert same.verify_key() is True
    finally:
        same.close()
