"""Cost of authentication and authorization per request, in process (no HTTP): prints one JSON object.

Measures ``Security.authenticate`` + ``authorize("get_operation", blocking=False)`` (the fast path every get_operation
takes), ``authorize("start_operation")`` and ``authorize("remove")`` of a pool with 100 subpools (``remove`` is
checked on the pool and every descendant, as YTsaurus does) for a user who is not a superuser, on a pool tree with
``--pools`` pools three levels deep, each carrying an ACL. Medians of ``--repeat`` runs of ``--calls`` calls each
(a tenth of them for the removal).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TOKEN = "ytct-0000-" + "be" * 16


def build(root: Path, pools: int) -> tuple[SchedulerService, str, str, str]:
    service = SchedulerService(open_store(f"sqlite:///{root / 'db.sqlite'}"), token=TOKEN)
    service.cypress.create(
        "scheduler_pool_tree",
        "//sys/pool_trees/default",
        attributes={"acl": [{"action": "allow", "subjects": ["analysts"], "permissions": ["write"]}]},
    )
    acl = [{"action": "allow", "subjects": ["analysts"], "permissions": ["use", "write", "remove"]}]
    leaf = ""
    for index in range(pools):
        path = f"//sys/pool_trees/default/p{index // 100}"
        if index % 100 == 0:
            service.cypress.create("scheduler_pool", path, attributes={"acl": acl})
        child = f"{path}/q{index}"
        service.cypress.create("scheduler_pool", child, attributes={"acl": acl})
        leaf = f"q{index}"
    directory = service.security.directory
    directory.create_user("alice")
    directory.create_group("analysts")
    directory.add_member("alice", "analysts")
    token = directory.issue_token("alice")
    op = service.scheduler.start_operation(
        "vanilla",
        {
            "tasks": {"main": {"command": "true", "job_count": 1}},
            "pool": leaf,
            "acl": [{"action": "allow", "subjects": ["analysts"], "permissions": ["read"]}],
        },
        "bob",
        time.time(),
    )
    return service, token, op.id, leaf


def per_call_us(function: Any, calls: int) -> float:
    began = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - began) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=200)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pooltree-bench-security-") as tmp:
        service, token, operation_id, leaf = build(Path(tmp), args.pools)
        security = service.security
        headers = {"authorization": f"OAuth {token}"}

        def get_operation() -> None:
            user = security.authenticate(headers)
            assert security.authorize("get_operation", user, {"operation_id": operation_id}, blocking=False)

        def start_operation() -> None:
            security.authorize("start_operation", "alice", {"spec": {"pool": leaf}})

        def remove_pool() -> None:
            security.authorize("remove", "alice", {"path": "//sys/pool_trees/default/p0", "recursive": True})

        results = {
            name: [per_call_us(function, max(1, args.calls // divisor)) for _ in range(args.repeat)]
            for name, function, divisor in (
                ("get_operation_check_us", get_operation, 1),
                ("start_operation_check_us", start_operation, 1),
                ("remove_pool_with_100_subpools_check_us", remove_pool, 10),
            )
        }
        service.store.close()
    print(
        json.dumps(
            {
                "parameters": vars(args),
                **{
                    name: {"median": round(statistics.median(v), 1), "runs": [round(x, 1) for x in v]}
                    for name, v in results.items()
                },
                "machine": {
                    "cpus": os.cpu_count(),
                    "load_average_1m": round(os.getloadavg()[0], 1),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
