"""A shard names the host a node reached it at as Starlette's ``request.url.hostname`` does, without the URL."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from pooltree.shards.process import request_hostname


def _request(host: bytes | None, server: tuple[str, int] | None, scheme: str = "http") -> Request:
    headers = [(b"content-type", b"application/json")] + ([(b"host", host)] if host is not None else [])
    scope = {
        "type": "http",
        "scheme": scheme,
        "method": "POST",
        "path": "/internal/node_heartbeat",
        "query_string": b"a=1",
        "headers": headers,
        "server": server,
    }
    return Request(scope)


@pytest.mark.parametrize(
    ("host", "server", "scheme"),
    [
        (b"127.0.0.1:8123", ("127.0.0.1", 8123), "http"),
        (b"Scheduler.Example:80", ("10.0.0.1", 80), "http"),
        (b"[::1]:9000", ("::1", 9000), "http"),
        (b"node-host", None, "https"),
        (None, ("10.1.2.3", 8080), "http"),
        (None, ("10.1.2.3", 80), "http"),
        (None, ("10.1.2.3", 443), "https"),
        (None, None, "http"),
    ],
)
def test_the_hostname_is_starlettes(host: bytes | None, server: tuple[str, int] | None, scheme: str) -> None:
    assert (
        request_hostname(_request(host, server, scheme).scope) == _request(host, server, scheme).url.hostname
    )
