"""A shard process that starts allocations killed (SIGKILL) while the leader holds one of its claims: no job is
lost or run twice. The node's pass has booked one start in the truth (its job stored, the answer never reaches the
node) and holds a second granted allocation when the shard dies: that one goes back to its controller, the first
is the node's missing job (lost after ``LOST_AFTER_MISSED_HEARTBEATS`` heartbeats, run again by its controller),
the shard is restarted (its replicas copied anew), and every job index completes exactly once."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from polling import wait_for
from recorded_run import PREEMPTING, Node
from test_shard_processes import HEARTBEAT, sharded_service

from pooltree.node import wire
from pooltree.shards import remote
from pooltree.shards.host import shard_of
from pooltree.shards.remote import ProcessShardStarts
from pooltree.shards.replica import Claim, ClaimAnswer

JOBS = 6


def _dead(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _drive(
    service: Any,
    starts: ProcessShardStarts,
    clock: Any,
    nodes: list[Node],
    op: Any,
    killed: list[int],
    victim: int,
) -> dict[str, list[str]]:
    """Heartbeats of ``nodes`` in turn through their shards (a fair-share update every second) until ``op``
    completes; returns, per job id, the nodes that were told to start it."""
    scheduler = service.scheduler
    ran: dict[str, list[str]] = {}
    with httpx.Client(timeout=30.0) as client:
        for step in range(1, 161):
            now = step * 0.25
            clock.now = now
            if now == int(now):
                scheduler.update_fair_share("default", now)
            node = nodes[step % len(nodes)]
            url = service.shards.url_for(node.address, "127.0.0.1")
            if url is None:  # the shard is being restarted: its nodes wait for it
                wait_for(lambda a=node.address: service.shards.url_for(a, "127.0.0.1"), timeout=60.0)
                url = service.shards.url_for(node.address, "127.0.0.1")
            assert url is not None
            service.shards.sync()
            try:
                response = client.post(url + HEARTBEAT, json=node.heartbeat(now))
            except httpx.TransportError:  # the shard died under this heartbeat: no answer
                assert killed and shard_of(node.address, 2) == victim
                wait_for(lambda: starts.links[victim] is None or not starts.links[victim].alive, timeout=30.0)
                continue
            if response.status_code != 200:  # the leader answered for a shard it lost (503)
                continue
            answer = response.json()
            answer.pop(wire.HEARTBEAT_URL)
            for entry in answer[wire.START]:
                ran.setdefault(entry["job_id"], []).append(node.address)
            node.apply(answer, now)
            if op.state == "completed":
                break
    return ran


def _operation(service: Any, jobs: int, seconds: float) -> tuple[Any, list[Node], int]:
    """A vanilla operation of ``jobs`` one-cpu jobs of ``seconds`` each, three nodes to run them, and the shard
    of n0 (the one killed)."""
    scheduler = service.scheduler
    spec = {"pool": "a", "tasks": {"main": {"command": "true", "cpu_limit": 1, "job_count": jobs}}}
    op = scheduler.start_operation("vanilla", spec, "u", 0.0)
    scheduler.update_fair_share("default", 0.0)
    return op, [Node(f"n{i}", {op.id: seconds}) for i in range(3)], shard_of("n0", 2)


def _kill(service: Any, victim: int, killed: list[int]) -> None:
    pid = service.shards.pids()[victim]
    assert pid is not None
    killed.append(pid)  # (before the kill: the heartbeat's HTTP request fails at once)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _dead(pid), timeout=30.0)


def test_a_shard_killed_with_a_claim_in_flight_loses_no_job_and_runs_none_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with sharded_service(tmp_path, PREEMPTING, True) as (service, clock, starts):
        assert starts is not None and service.shards is not None
        op, nodes, victim = _operation(service, JOBS, 2.0)
        claim_of = ProcessShardStarts._remote_claim
        granted_on_n0: list[str] = []
        killed: list[int] = []

        def claim(self: ProcessShardStarts, state: Any, message: Claim, granted: set[str]) -> ClaimAnswer:
            answer = claim_of(self, state, message, granted)
            if message.address == "n0" and answer.allocation is not None and not killed:
                granted_on_n0.append(answer.allocation.id)
                if len(granted_on_n0) == 2:  # the first one is booked already: kill before this one is
                    _kill(service, victim, killed)
            return answer

        monkeypatch.setattr(ProcessShardStarts, "_remote_claim", claim)
        monkeypatch.setattr(remote, "GRANTS_PER_PASS", 0)  # every start a claim (grants: the test below)
        ran = _drive(service, starts, clock, nodes, op, killed, victim)
        assert killed, "the shard was never killed with a claim in flight"
        assert op.state == "completed"
        jobs = list(op.jobs.values())
        completed = [job for job in jobs if job.state == "completed"]
        # every job index completed once; nothing was started twice on nodes
        assert sorted(job.job_index for job in completed) == list(range(JOBS))
        assert all(len(addresses) == 1 for addresses in ran.values())
        assert {job.id for job in completed} <= set(ran)
        # the start booked before the kill was stored but never reached its node: lost, then run again
        lost = [job for job in jobs if job.abort_reason == "node_offline"]
        assert len(lost) == 1 and lost[0].id not in ran and lost[0].allocation_id == granted_on_n0[0]
        # the allocation granted to the claim in flight went back to its controller (never a job)
        assert all(job.allocation_id != granted_on_n0[1] for job in jobs)
        # the restarted shard got a new copy and ran its nodes' passes again
        assert service.shards.restarts == 1 and starts.snapshots >= 3
        assert starts.shard_passes[victim] > 0


def test_a_shard_killed_with_grants_in_flight_loses_no_job_and_runs_none_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shard dies after the leader granted its pass allocations ahead and before it booked any: every grant is taken back by its controller (never a job, nothing lost), the shard is
    restarted, and every job index completes exactly once."""
    with sharded_service(tmp_path, PREEMPTING, True) as (service, clock, starts):
        assert starts is not None and service.shards is not None
        op, nodes, victim = _operation(service, 2 * JOBS, 1.0)
        grants_of = ProcessShardStarts._grants
        granted: list[str] = []
        killed: list[int] = []

        def grants(
            self: ProcessShardStarts, tree: str, state: Any, truth: Any, node: Any, now: float, limit: int
        ) -> Any:
            made = grants_of(self, tree, state, truth, node, now, limit)
            if node.address == "n0" and made and not killed:
                granted.extend(grant.allocation.id for grant in made)
                _kill(service, victim, killed)
            return made

        monkeypatch.setattr(ProcessShardStarts, "_grants", grants)
        ran = _drive(service, starts, clock, nodes, op, killed, victim)
        assert killed and granted, "the shard was never killed with grants in flight"
        assert op.state == "completed"
        jobs = list(op.jobs.values())
        completed = [job for job in jobs if job.state == "completed"]
        assert sorted(job.job_index for job in completed) == list(range(2 * JOBS))
        assert all(len(addresses) == 1 for addresses in ran.values())
        # the grants went back to the controller as if never made (their allocation numbers given again): none
        # became a job record, none was lost; each job ran once
        assert len(jobs) == len(completed) == 2 * JOBS
        assert starts.grants_taken_back >= len(granted)
        assert service.shards.restarts == 1 and starts.shard_passes[victim] > 0
