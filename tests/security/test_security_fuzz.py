"""A bounded, seeded fuzz of every command the scheduler serves, as alice, bob, root and an unauthenticated caller,
over real HTTP (uvicorn on loopback, the service as ``pooltree scheduler`` builds it): parameters are drawn from
paths that matter (bob's private file and pool, ``//sys``, the file cache, transactions and operations of each
user), wrong types where strings are expected, attributed values, lone surrogates, absurd numbers.

It asserts 0 "Internal error" answers, 0 5xx and 0 records at ERROR (or with a traceback) for what clients do,
and that alice and the unauthenticated caller changed nothing of bob's. ``POOLTREE_FUZZ_REQUESTS`` (default 1500)
and ``POOLTREE_FUZZ_SECONDS`` (default 40) bound it; the seed is fixed, so a failure replays."""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TOKEN = "ytct-0000-" + "17" * 16
SEED = 24
REQUESTS = int(os.environ.get("POOLTREE_FUZZ_REQUESTS", "1500"))
SECONDS = float(os.environ.get("POOLTREE_FUZZ_SECONDS", "40"))
TREE = "//sys/pool_trees/default"
BOB_FILE = b"echo bob\n"


def _setup(service: SchedulerService) -> dict[str, Any]:
    cypress, directory = service.cypress, service.security.directory
    cypress.create("scheduler_pool_tree", TREE)
    deny_alice = [
        {"action": "allow", "subjects": ["bob"], "permissions": ["read", "write", "remove", "use"]},
        {
            "action": "deny",
            "subjects": ["alice"],
            "permissions": ["read", "write", "remove", "administer", "use"],
        },
    ]
    cypress.create("scheduler_pool", TREE + "/team", attributes={"acl": [_allow("alice", "write")]})
    cypress.create("scheduler_pool", TREE + "/team/bobs", attributes={"acl": deny_alice})
    cypress.create("map_node", "//home/bob", recursive=True, attributes={"acl": deny_alice})
    cypress.create("file", "//home/bob/run.sh")
    tokens = {"root": TOKEN}
    for name in ("alice", "bob"):
        directory.create_user(name)
        tokens[name] = directory.issue_token(name)
    files = service.app.state.files
    ops = {}
    for name in ("alice", "bob"):
        spec = {
            "tasks": {"main": {"command": "true", "job_count": 1}},
            "pool": "bobs" if name == "bob" else "team",
        }
        if name == "bob":
            spec["acl"] = [{"action": "deny", "subjects": ["alice"], "permissions": ["read", "manage"]}]
        ops[name] = service.scheduler.start_operation("vanilla", spec, name, time.time()).id
    return {"tokens": tokens, "files": files, "ops": ops, "acl": deny_alice}


def json_header(token: str) -> dict[str, str]:
    return {"Authorization": f"OAuth {token}", "X-YT-Header-Format": "json"}


def _allow(subject: str, *permissions: str) -> dict[str, Any]:
    return {"action": "allow", "subjects": [subject], "permissions": list(permissions)}


PATHS = [
    "//home/bob/run.sh", "//home/bob", "//home/bob/new", TREE + "/team/bobs", TREE + "/team", TREE,
    TREE + "/team/bobs/@acl", TREE + "/team/@", TREE + "/team/bobs/@parent_name", "//sys", "//sys/cache",
    "//tmp", "//tmp/f", "//tmp/cache", "//sys/users/bob", "//sys/groups/superusers", "/", "#1-2-3-4",
    "//tmp/\ud800", "//a\x01b", "", "//sys/scheduler/orchid/scheduler",
]  # fmt: skip
TRUSTED_PATHS = [
    p for p in PATHS if p.startswith(("//tmp", "//sys/cache", "#", "//a", "//sys/scheduler")) or not p
]
"""What root's and bob's requests touch: they may do anything there, so bob's file and pool stay the attacked."""
ODD = [None, 0, -1, 2**63, 10**30, 1e308, True, "", "x" * 300, [], {}, {"a": 1}, ["x"], "\udfff", "ж"]
NAMES = [
    "path", "source_path", "destination_path", "cache_path", "md5", "transaction_id", "operation_id",
    "operation_alias", "job_id", "type", "attributes", "recursive", "force", "mode", "user", "permission",
    "group", "member", "parameters", "spec", "operation_type", "requests", "password_sha256", "new_password_sha256",
    "token_sha256", "offset", "length", "timeout", "limit", "filter", "state", "pool",
]  # fmt: skip


def _value(rng: random.Random, name: str, ctx: dict[str, Any], who: str | None) -> Any:
    pick = rng.random()
    if pick < 0.15:
        return rng.choice(ODD)
    if name.endswith("path"):
        path = rng.choice(PATHS if who in ("alice", None) else TRUSTED_PATHS)
        return {"$value": path, "$attributes": {"append": True}} if rng.random() < 0.1 else path
    if name in ("operation_id", "operation_alias"):
        return rng.choice([*ctx["ops"].values(), "1-2-3-4"])
    if name == "transaction_id":
        return rng.choice([*ctx["transactions"], "0-0-0-0", "1-2-3-4"])
    if name == "type":
        return rng.choice(["map_node", "file", "scheduler_pool", "user", "group", "table", "document"])
    if name == "attributes":
        return rng.choice([{"acl": [_allow("alice", "administer")]}, {"name": "p", "pool_tree": "default",
                          "parent_name": rng.choice(["bobs", "team"])}, {"inherit_acl": False}, {"owner": "alice"}])  # fmt: skip
    if name == "parameters":
        return rng.choice([{"pool": "bobs"}, {"acl": [_allow("alice", "manage")]}, {"pool": {"x": 1}}])
    if name == "spec":
        return {
            "tasks": {
                "main": {"command": "true", "job_count": 1, "file_paths": [_value(rng, "path", ctx, who)]}
            },
            "pool": rng.choice(["bobs", "team", {"a": 1}, "bobs$alice", "\ud800"]),
        }
    if name in ("user", "member"):
        return rng.choice(["alice", "bob", "root", "nobody"])
    if name == "permission":
        return rng.choice(["read", "write", "administer", "manage", "nope"])
    if name == "requests":
        return [
            {"command": rng.choice(ctx["commands"]), "parameters": _params(rng, "get", ctx, who)}
            for _ in range(2)
        ]
    if name == "mode":
        return rng.choice(["snapshot", "exclusive", "shared", "x"])
    return rng.choice([*ODD, "abc", 5])


def _params(rng: random.Random, command: str, ctx: dict[str, Any], who: str | None) -> dict[str, Any]:
    names = rng.sample(NAMES, rng.randrange(1, 6))
    if command in ("get", "list", "exists", "set", "remove", "read_file", "write_file", "lock", "create"):
        names.append("path")
    return {name: _value(rng, name, ctx, who) for name in names}


def test_fuzz_every_command(tmp_path: Path, serve: Callable[[object], str], caplog: Any) -> None:
    service = SchedulerService(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token=TOKEN)
    ctx = _setup(service)
    url = serve(service.app)
    tokens = ctx["tokens"]
    with httpx.Client(base_url=url, timeout=30) as http:
        written = http.put(
            "/api/v4/write_file",
            headers={**json_header(tokens["bob"]), "X-YT-Parameters": '{"path": "//home/bob/run.sh"}'},
            content=BOB_FILE,
        )
        assert written.status_code == 200, written.text
        ctx["transactions"] = []
        for name in ("alice", "bob"):
            answer = http.post(
                "/api/v4/start_transaction", headers={"Authorization": f"OAuth {tokens[name]}"}
            )
            ctx["transactions"].append(answer.json()["transaction_id"])
        descriptors = service.app.state.registry.descriptors()
        ctx["commands"] = [d.name for d in descriptors]
        rng = random.Random(SEED)
        caplog.set_level(logging.WARNING)
        statuses: Counter[int] = Counter()
        internal: list[str] = []
        sent = 0
        deadline = time.monotonic() + SECONDS
        while sent < REQUESTS and time.monotonic() < deadline:
            descriptor = rng.choice(descriptors)
            who = rng.choice(["alice", "alice", "bob", "root", None])
            headers = {"X-YT-Header-Format": "json"}
            if who is not None:
                headers["Authorization"] = f"OAuth {tokens[who]}"
            params = _params(rng, descriptor.name, ctx, who)
            headers["X-YT-Parameters"] = json.dumps(params, ensure_ascii=True)
            body = None
            if descriptor.input_type == "structured":
                body = json.dumps(_value(rng, rng.choice(NAMES), ctx, who), ensure_ascii=True).encode()
                headers["Content-Type"] = "application/json"
            elif descriptor.input_type != "null":
                body = b"echo alice\n"
            answer = http.request(
                descriptor.method, f"/api/v4/{descriptor.name}", headers=headers, content=body
            )
            sent += 1
            statuses[answer.status_code] += 1
            if "Internal error" in answer.text[:2000] or answer.status_code >= 500:
                internal.append(
                    f"{who} {descriptor.name} {params!r}: {answer.status_code} {answer.text[:300]}"
                )
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        print(
            f"fuzz: {sent} requests, statuses {dict(sorted(statuses.items()))}, {len(descriptors)} commands"
        )
        assert sent >= min(REQUESTS, 300), sent
        assert internal == []
        assert [r.getMessage() for r in errors] == []
        # alice (and nobody) broke nothing of bob's
        bob = json_header(tokens["bob"])
        read = http.get(
            "/api/v4/read_file", headers={**bob, "X-YT-Parameters": '{"path": "//home/bob/run.sh"}'}
        )
        assert read.content == BOB_FILE
    acl = service.cypress.get(TREE + "/team/bobs/@acl")
    assert acl == ctx["acl"]
