"""Operation aliases through the official client (``aliases.py``): a spec's ``*name`` names the operation for
the operation commands; one running operation holds it at a time, then it passes on; it survives a scheduler
restart; it is resolved before the command is authorized, so a user cannot reach an operation through its
alias that the id would refuse."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent))
from live_cluster import Cluster, wait_for


def _service(client: ytw.YtClient, alias: str) -> str:
    spec = (
        ytw.VanillaSpecBuilder().task("main", {"command": "sleep 600", "job_count": 1}).spec({"alias": alias})
    )
    return client.run_operation(spec, sync=False).id


def _token(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def test_an_alias_names_one_running_operation_then_the_next(cluster: Cluster) -> None:
    client = cluster.client()
    first = _service(client, "*clique")
    assert client.get_operation(operation_alias="*clique")["id"] == first
    with pytest.raises(ytw.YtResponseError, match="already used by an operation") as taken:
        _service(client, "*clique")
    assert first in str(taken.value)
    with pytest.raises(ytw.YtResponseError, match="should start with"):
        _service(client, "clique")
    with pytest.raises(ytw.YtResponseError, match="No such operation"):
        client.get_operation(operation_alias="*nobody")

    client.abort_operation(operation_alias="*clique")
    wait_for(lambda: client.get_operation(first)["state"] == "aborted", timeout=60)
    assert client.get_operation(operation_alias="*clique")["id"] == first, "a finished holder keeps its alias"
    second = _service(client, "*clique")
    assert client.get_operation(operation_alias="*clique")["id"] == second

    cluster.restart_scheduler()  # the index is the store's: a new scheduler finds the same holder
    client = cluster.client()
    assert client.get_operation(operation_alias="*clique")["id"] == second
    with pytest.raises(ytw.YtResponseError, match="already used by an operation"):
        _service(client, "*clique")
    client.abort_operation(second)


def test_an_alias_is_authorized_as_the_operation_it_names(cluster: Cluster) -> None:
    root = cluster.client()
    root.create("user", attributes={"name": "mallory"})
    mallory = cluster.client(_token(root.issue_token("mallory")))
    victim = _service(root, "*roots")
    with pytest.raises(ytw.YtResponseError) as refused:
        mallory.abort_operation(operation_alias="*roots")
    assert refused.value.is_access_denied() or "denied" in str(refused.value).lower(), refused.value
    assert victim in str(refused.value) and "mallory" in str(refused.value)
    assert root.get_operation(victim)["state"] in ("running", "pending", "materializing", "starting")
    root.abort_operation(victim)
