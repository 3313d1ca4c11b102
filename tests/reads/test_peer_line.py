"""The internal listener's first line (``pooltree/reads/peer.py``) and the read process's health (``health.py``)."""

from __future__ import annotations

import pytest

from pooltree.reads.health import RESTART_DELAY_MAX, STABLE_AFTER, ReadProcessHealth
from pooltree.reads.peer import parse_peer_line
from pooltree.reads.relay import peer_line

SECRET = b"5" * 32


@pytest.mark.parametrize(
    ("host", "port"), [("127.0.0.2", 40000), ("10.1.2.3", 0), ("::1", 65535), ("fe80::1", 1)]
)
def test_a_peer_line_names_the_client(host: str, port: int) -> None:
    assert parse_peer_line(peer_line(SECRET, host, port)[:-2], SECRET) == (host, port)


@pytest.mark.parametrize(
    "line",
    [
        b"POOLTREE-PEER " + b"6" * 32 + b" 127.0.0.2 1",  # another secret
        b"POOLTREE-PEER " + b"5" * 31 + b" 127.0.0.2 1",  # a shorter one
        b"POOLTREE-PEER  127.0.0.2 1",
        b"POOLTREE-PEER " + SECRET + b" 127.0.0.2",
        b"POOLTREE-PEER " + SECRET + b" 127.0.0.2 1 extra",
        b"POOLTREE-PEER " + SECRET + b" host.example 1",  # a name, not an address
        b"POOLTREE-PEER " + SECRET + b" 127.0.0.2 65536",
        b"POOLTREE-PEER " + SECRET + b" 127.0.0.2 -1",
        b"POOLTREE-PEER " + SECRET + b" 127.0.0.2 x",
        b"PROXY TCP4 127.0.0.2 127.0.0.1 1 2",
        b"GET / HTTP/1.1",
        b"",
    ],
)
def test_anything_else_names_no_client(line: bytes) -> None:
    assert parse_peer_line(line, SECRET) is None


def test_deaths_in_a_row_double_the_wait_and_a_stable_process_ends_the_row() -> None:
    health = ReadProcessHealth()
    health.serving(0.0, restarted=False)
    assert health.alert(100.0) is None
    assert health.died("killed by SIGKILL", 100.0, 1.0) == 1.0
    alert = health.alert(100.5)
    assert alert is not None and alert["attributes"]["alert_type"] == "read_process_died"
    assert "serves the API port itself" in alert["message"]
    health.serving(2.0, restarted=True)
    assert health.died("killed by SIGKILL", 103.0, 3.0) == 2.0
    health.serving(5.0, restarted=True)
    assert health.died("killed by SIGKILL", 106.0, 6.0) == 4.0
    for _ in range(10):
        health.serving(7.0, restarted=True)
        delay = health.died("exited with status 1", 108.0, 8.0)
    assert delay == RESTART_DELAY_MAX
    health.serving(10.0, restarted=True)
    assert "a new one serves" in (health.alert(109.0) or {})["message"]
    assert health.died("killed by SIGTERM", 200.0, 10.0 + STABLE_AFTER) == 1.0  # a new row
    health.serving(11.0 + STABLE_AFTER, restarted=True)
    assert health.alert(200.0 + 601.0) is None  # held 10 minutes after the last death
    assert (health.deaths, health.restarts) == (14, 14)
