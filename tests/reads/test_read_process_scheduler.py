"""``pooltree scheduler --read-process`` as real processes: the read process owns the API port, the scheduler sees
each client's own address, the read process's death (kill -9) is taken over by the scheduler with an alert and a
counter while the official client loses and doubles no start, and neither process outlives the other."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import httpx
import psutil
import pytest
import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent.parent / "live"))
from live_procs import NODE_HEADERS, ROOT_AUTH, Procs, client, slotless_heartbeat, vanilla
from polling import wait_for

from pooltree.node import wire

READ_PROCESS_MODULE = "pooltree.reads.process"


def read_processes(scheduler_pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(scheduler_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if READ_PROCESS_MODULE in child.cmdline():
                found.append(child)
        except psutil.Error:
            continue
    return found


def the_read_process(scheduler_pid: int) -> psutil.Process:
    return wait_for(lambda: (read_processes(scheduler_pid) or [None])[0], timeout=20)


def clients_on(pid: int, port: int) -> int:
    """Client connections to ``port`` that process ``pid`` holds."""
    held = psutil.Process(pid).net_connections(kind="tcp")
    return sum(1 for c in held if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED)


def metric(url: str, name: str) -> float | None:
    text = httpx.get(f"{url}/metrics", headers=ROOT_AUTH, timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


@pytest.mark.parametrize("off", ["option", "environment"])
def test_turned_off_the_scheduler_serves_its_port_itself(procs: Procs, off: str) -> None:
    """``--no-read-process`` or ``POOLTREE_READ_PROCESS=0``: no read process (it is on by default since session 37,
    ``test_replica_process.py``)."""
    extra = ("--no-read-process",) if off == "option" else ()
    env = {"POOLTREE_READ_PROCESS": "0"} if off == "environment" else None
    process, url = procs.scheduler(procs.root / "data", 0, *extra, env=env)
    assert client(url).get("//sys/pool_trees/@default_tree") == "default"
    assert read_processes(process.pid) == []
    assert metric(url, "pooltree_read_process_up") is None


def heartbeat(url: str, address: str, source: str) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=10) as http:
        return http.post(
            f"{url}{wire.HEARTBEAT_PATH}", content=slotless_heartbeat(address), headers=NODE_HEADERS
        )


def test_node_authentication_reads_the_clients_address(procs: Procs) -> None:
    """Nodes from 127.0.0.2/31 only: a heartbeat from 127.0.0.2 through the read process is taken (the read process
    itself connects from 127.0.0.1), one from 127.0.0.1 is refused naming that address, and a node bound to .2 is
    refused from .3 (``bind_node`` sees each connection's own client)."""
    process, url = procs.scheduler(
        procs.root / "data", 0, "--read-process", "--node-networks", "127.0.0.2/31", "--heartbeat-port", "off"
    )
    the_read_process(process.pid)
    assert heartbeat(url, "n1", "127.0.0.2").status_code == 200
    refused = heartbeat(url, "n2", "127.0.0.1")
    assert refused.status_code in (401, 403)
    assert "from 127.0.0.1 refused: not a registered node network" in refused.text
    moved = heartbeat(url, "n1", "127.0.0.3")
    assert moved.status_code in (401, 403)
    assert "registered from 127.0.0.2" in moved.text
    forged = httpx.post(
        f"{url}{wire.HEARTBEAT_PATH}",
        content=slotless_heartbeat("n3"),
        headers={**NODE_HEADERS, "X-Forwarded-For": "127.0.0.2", "X-Real-IP": "127.0.0.2"},
        timeout=10,
    )
    assert forged.status_code in (401, 403), "a header named the client's address"


def test_kill_9_of_the_read_process_loses_and_doubles_no_start(procs: Procs) -> None:
    """The official client starts operations one after the other while the read process is killed with SIGKILL:
    the scheduler serves the port itself (alert ``read_process_died``, ``pooltree_read_process_deaths_total``),
    every start the client was answered exists once, and a new read process takes the port over."""
    process, url = procs.scheduler(procs.root / "data", 0, "--read-process")
    first = the_read_process(process.pid)
    yt = client(url)
    yt.create(
        "scheduler_pool", attributes={"name": "many", "pool_tree": "default", "max_operation_count": 10_000}
    )
    started: list[str] = []
    failures: list[BaseException] = []
    stop, stop_starts = threading.Event(), threading.Event()

    def start_operations() -> None:
        while not stop_starts.is_set() and len(started) < 200:
            try:
                started.append(yt.run_operation(vanilla("true", 1, pool="many"), sync=False).id)
            except Exception as error:  # what the client sees
                failures.append(error)

    plain_errors: list[str] = []
    plain_statuses: set[int] = set()

    def read_plainly() -> None:  # a client that does not retry: what it sees of the death
        with httpx.Client(base_url=url, headers=ROOT_AUTH, timeout=10) as http:
            while not stop.is_set():
                try:
                    plain_statuses.add(
                        http.get("/api/v4/get", params={"path": "//sys/pool_trees"}).status_code
                    )
                except httpx.TransportError as error:
                    plain_errors.append(type(error).__name__)

    starter = threading.Thread(target=start_operations, daemon=True)
    reader = threading.Thread(target=read_plainly, daemon=True)
    starter.start()
    reader.start()
    wait_for(lambda: len(started) >= 5, timeout=60)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    at_kill = len(started)
    wait_for(lambda: len(started) >= at_kill + 5, timeout=60)  # served by the scheduler itself now
    alerts = yt.get("//sys/scheduler/@alerts")
    died = [alert for alert in alerts if alert["attributes"].get("alert_type") == "read_process_died"]
    assert died and "killed by SIGKILL" in died[0]["message"], alerts
    assert metric(url, "pooltree_read_process_deaths_total") == 1.0
    second = wait_for(lambda: [p for p in read_processes(process.pid) if p.pid != first.pid], timeout=30)[0]
    wait_for(lambda: metric(url, "pooltree_read_process_up") == 1.0, timeout=30)
    at_restart = len(started)
    wait_for(lambda: len(started) >= at_restart + 5, timeout=60)
    stop_starts.set()
    starter.join(120)
    # the plain client kept its connection busy all along: the scheduler closed its own connections after their
    # next answers once the new read process served, so the client came back to it (else it stayed on the
    # scheduler's event loop)
    port = int(url.rsplit(":", 1)[1])
    wait_for(lambda: clients_on(process.pid, port) == 0 and clients_on(second.pid, port) >= 1, timeout=20)
    stop.set()
    reader.join(30)
    assert not starter.is_alive() and not reader.is_alive()
    assert failures == [], f"the client saw {failures!r}"
    assert plain_statuses == {200}, "a plain client saw an HTTP error, not a closed connection"
    assert len(plain_errors) <= 1, (
        plain_errors
    )  # at most its one request in flight at the kill, none at the return
    listed = yt.list_operations(limit=1000)["operations"]
    ids = [operation["id"] for operation in listed]
    assert sorted(ids) == sorted(started), "a start was lost or doubled"
    assert len(set(started)) == len(started)
    assert second.is_running()
    assert metric(url, "pooltree_read_process_restarts_total") == 1.0


def test_the_read_process_ends_with_its_scheduler(procs: Procs) -> None:
    process, url = procs.scheduler(procs.root / "data", 0, "--read-process")
    child = the_read_process(process.pid)
    assert procs.stop(process, signal.SIGTERM) == 0
    child.wait(20)  # stopped by the scheduler
    killed, url = procs.scheduler(procs.root / "data2", 0, "--read-process")
    orphan = the_read_process(killed.pid)
    killed.kill()
    killed.wait(10)
    orphan.wait(20)  # its pipe ended: no read process serves a port no scheduler is behind
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/api/v4/get?path=//sys/pool_trees", headers=ROOT_AUTH, timeout=5)


def test_the_whole_api_answers_the_same_through_the_read_process(procs: Procs) -> None:
    """A tour of the client's commands with the read process: files written and read back (large and small),
    Cypress, operations, errors with their codes."""
    process, url = procs.scheduler(procs.root / "data", 0, "--read-process")
    the_read_process(process.pid)
    yt = client(url)
    payload = bytes(range(256)) * (40 * 1024)  # 10 MiB
    yt.write_file("//tmp/big.bin", payload)
    assert yt.read_file("//tmp/big.bin").read() == payload
    yt.create("map_node", "//tmp/a/b", recursive=True)
    yt.set("//tmp/a/b/@x", {"y": [1, 2, 3]})
    assert yt.get("//tmp/a/b/@x") == {"y": [1, 2, 3]}
    with pytest.raises(ytw.YtResponseError) as missing:
        yt.get("//tmp/no/such/node")
    assert missing.value.is_resolve_error()
    op = yt.run_operation(vanilla("true", 1), sync=False)
    assert yt.get_operation(op.id, attributes=["state"])["state"] in ("pending", "running", "materializing")
    unauthenticated = httpx.get(f"{url}/api/v4/get?path=//sys", timeout=10)
    assert unauthenticated.status_code == 401
