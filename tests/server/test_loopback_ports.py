"""The ports test servers get: none can be taken by another process between choosing and binding it (CI saw
``address already in use`` when an outgoing connection took the port a test had just been handed)."""

from __future__ import annotations

import socket

import pytest
from loopback import ServerThread, _ephemeral_low, free_port


def test_free_ports_lie_below_the_ephemeral_range() -> None:
    low = _ephemeral_low()
    ports = [free_port() for _ in range(50)]
    assert all(1024 <= port < low for port in ports), ports


def test_a_server_thread_holds_its_port_from_the_moment_it_is_made() -> None:
    server = ServerThread(object())
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", server.port))
    finally:
        server.socket.close()
