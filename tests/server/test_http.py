"""The HTTP layer over a real uvicorn on 127.0.0.1: discovery, error format, auth, mutation ids, fuzzing."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polling import wait_for

from pooltree.security.policy import ANY_USER
from pooltree.server import CommandContext, CommandRegistry, create_app, open_store
from pooltree.server.store.base import mutation_key

try:
    from pooltree.server.mutations_in_flight import MutationsInFlight
except ImportError:  # checking the test on the code before it
    MutationsInFlight = None  # type: ignore[assignment,misc]

YSON_HEADER = {"X-YT-Header-Format": "<format=text>yson"}
TOKEN = "ytct-0000-" + "a1" * 16
"""Root's token on every test app; ``call`` sends it unless told otherwise."""


class Extra:
    """A later layer plugging commands into the registry (as the operations layer will)."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate: threading.Event | None = None
        """When set up, ``bump`` waits for it after counting (``bumping`` is set meanwhile)."""
        self.bumping = threading.Event()

    def register_commands(self, registry: CommandRegistry) -> None:
        def bump(ctx: CommandContext) -> dict[str, object]:
            self.calls += 1
            calls = self.calls
            if self.gate is not None:
                self.bumping.set()
                assert self.gate.wait(30)
            return {"calls": calls}

        def crash(ctx: CommandContext) -> None:
            raise RuntimeError("unexpected")

        def stderr(ctx: CommandContext) -> bytes:
            return b"line 1\nline 2\n"

        registry.register("bump", bump, is_volatile=True, rule=ANY_USER)
        registry.register("crash", crash, rule=ANY_USER)
        registry.register("get_job_stderr", stderr, output_type="binary", is_heavy=True)


@pytest.fixture
def server(tmp_path: Path, serve: Callable[[object], str]) -> tuple[str, Extra]:
    extra = Extra()
    app = create_app(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), operations=extra, host="test-proxy", token=TOKEN
    )
    return serve(app), extra


def call(
    base: str,
    method: str,
    command: str,
    params: dict[str, object] | str | None = None,
    *,
    auth: bool = True,
    **kw: object,
) -> httpx.Response:
    headers = dict(kw.pop("headers", {}) or {})  # type: ignore[call-overload]
    if auth:
        headers.setdefault("Authorization", f"OAuth {TOKEN}")
    if params is not None:
        headers["X-YT-Parameters"] = params if isinstance(params, str) else json.dumps(params)
        headers.setdefault("X-YT-Header-Format", "json")
    return httpx.request(method, f"{base}/api/v4/{command}", headers=headers, timeout=10, **kw)  # type: ignore[arg-type]


def assert_yt_error(response: httpx.Response, code: int, status: int = 400) -> dict[str, object]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code
    assert int(response.headers["X-YT-Response-Code"]) == code
    assert json.loads(response.headers["X-YT-Error"]) == body
    assert response.headers["X-YT-Response-Message"]
    assert body["attributes"]["host"] == "test-proxy" and body["attributes"]["datetime"].endswith("Z")
    return body


def test_discovery_hosts_and_registry(server: tuple[str, Extra]) -> None:
    base, _ = server
    commands = {c["name"]: c for c in httpx.get(f"{base}/api/v4", timeout=10).json()}
    assert set(commands) >= {"get", "list", "exists", "set", "create", "remove", "get_current_user", "bump"}
    assert commands["set"] == {
        "name": "set",
        "input_type": "structured",
        "output_type": "null",
        "is_volatile": True,
        "is_heavy": False,
    }
    assert commands["get_job_stderr"]["output_type"] == "binary" and commands["get_job_stderr"]["is_heavy"]
    assert httpx.get(f"{base}/hosts", params={"address_type": "http"}, timeout=10).json() == []
    stderr = call(base, "GET", "get_job_stderr", {"job_id": "j"})
    assert (
        stderr.content == b"line 1\nline 2\n" and stderr.headers["content-type"] == "application/octet-stream"
    )


def test_error_format_and_codes(server: tuple[str, Extra]) -> None:
    base, _ = server
    body = assert_yt_error(call(base, "GET", "get", {"path": "//nope"}), 500)
    assert body["message"] == "Error resolving path //nope" and body["inner_errors"][0]["code"] == 500
    assert_yt_error(call(base, "GET", "no_such_command", {}), 1)
    assert_yt_error(call(base, "GET", "get", {}), 1)  # missing path
    assert_yt_error(call(base, "GET", "get", "{path=", headers=YSON_HEADER), 1)
    assert_yt_error(call(base, "GET", "get", {"path": 5}), 1)
    assert_yt_error(call(base, "GET", "get", {"path": "//sys", "output_format": "dsv"}), 1)
    assert_yt_error(call(base, "GET", "create", {"type": "map_node"}), 1)  # volatile over GET
    assert_yt_error(call(base, "POST", "set", {"path": "//tmp/x"}), 1)  # input needs PUT
    assert_yt_error(call(base, "PUT", "set", {"path": "//tmp/x", "input_format": "json"}, content=b"{bad"), 1)
    crash = assert_yt_error(call(base, "GET", "crash", {}), 1)
    assert "RuntimeError: unexpected" in str(crash["message"])
    assert_yt_error(httpx.get(f"{base}/elsewhere", timeout=10), 1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    command=st.sampled_from(["get", "list", "exists", "set", "create", "remove", "bump"]),
    method=st.sampled_from(["GET", "POST", "PUT"]),
    header=st.one_of(
        st.none(),
        st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40).map(str.strip),
    ),
    header_format=st.sampled_from([None, "json", "yson", "<format=text>yson", "junk<"]),
    body=st.binary(max_size=40),
)
def test_malformed_requests_never_get_5xx(
    server: tuple[str, Extra],
    command: str,
    method: str,
    header: str | None,
    header_format: str | None,
    body: bytes,
) -> None:
    base, _ = server
    headers = {"Authorization": f"OAuth {TOKEN}"}
    if header is not None:
        headers["X-YT-Parameters"] = header
    if header_format is not None:
        headers["X-YT-Header-Format"] = header_format
    response = httpx.request(method, f"{base}/api/v4/{command}", headers=headers, content=body, timeout=10)
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert int(response.headers["X-YT-Response-Code"]) != 0 and "code" in response.json()


def test_mutation_ids_deduplicate_retries(server: tuple[str, Extra]) -> None:
    base, extra = server
    params = {"mutation_id": "1-2-3-4", "retry": False}
    assert call(base, "POST", "bump", params).json() == {"calls": 1}
    assert call(base, "POST", "bump", {**params, "retry": True}).json() == {"calls": 1}
    assert extra.calls == 1
    assert_yt_error(call(base, "POST", "bump", params), 1)
    assert call(base, "POST", "bump", {"mutation_id": "5-6-7-8"}).json() == {"calls": 2}
    created = call(base, "POST", "create", {"type": "map_node", "path": "//tmp/d", "mutation_id": "a-b-c-d"})
    again = call(
        base,
        "POST",
        "create",
        {"type": "map_node", "path": "//tmp/d", "mutation_id": "a-b-c-d", "retry": True},
    )
    assert created.json() == again.json() and "node_id" in created.json()


def test_a_retried_batch_answers_its_requests_saved_answers_without_running_them_again(
    server: tuple[str, Extra],
) -> None:
    """A batch sent again with its requests' mutation ids (as after a lost answer) answers what the first run
    answered and applies nothing again; without "retry" each such request is refused, as a single command is."""
    base, extra = server

    def batch(retry: bool) -> list[dict[str, Any]]:
        requests = [
            {
                "command": "create",
                "parameters": {"type": "map_node", "path": "//tmp/b", "mutation_id": "b-1"},
            },
            {"command": "set", "parameters": {"path": "//tmp/b/@n", "mutation_id": "b-2"}, "input": 7},
            {"command": "bump", "parameters": {"mutation_id": "b-3"}},
            {"command": "get", "parameters": {"path": "//tmp/b/@n"}},
        ]
        for request in requests[:3]:
            request["parameters"]["retry"] = retry
        response = call(base, "POST", "execute_batch", {"requests": requests})
        assert response.status_code == 200, response.text
        return response.json()["results"]

    first = batch(retry=False)
    assert "node_id" in first[0]["output"] and first[1:] == [
        {},
        {"output": {"calls": 1}},
        {"output": {"value": 7}},
    ]
    assert (
        call(base, "PUT", "set", {"path": "//tmp/b/@n", "input_format": "json"}, content=b"8").status_code
        == 200
    )
    again = batch(retry=True)
    assert again[:3] == first[:3], f"the retried batch ran its requests again: {again} after {first}"
    assert again[3] == {"output": {"value": 8}}, "the retried set applied again"
    assert extra.calls == 1
    refused = batch(retry=False)
    assert [r.get("error", {}).get("message", "")[:38] for r in refused[:3]] == [
        'Duplicate request is not marked as "re'
    ] * 3
    assert refused[3] == {"output": {"value": 8}} and extra.calls == 1


def test_a_batch_request_with_the_batchs_own_mutation_id_is_refused_at_once(
    server: tuple[str, Extra],
) -> None:
    """The batch holds its own mutation id while it runs: a request of it with that id would wait for itself."""
    base, extra = server
    requests = [{"command": "bump", "parameters": {"mutation_id": "own-1"}}]
    response = call(base, "POST", "execute_batch", {"mutation_id": "own-1", "requests": requests})
    assert response.status_code == 200, response.text
    assert "mutation id of the batch itself" in response.json()["results"][0]["error"]["message"]
    assert extra.calls == 0


def test_post_body_parameters_and_outputs(server: tuple[str, Extra]) -> None:
    base, _ = server
    response = httpx.post(
        f"{base}/api/v4/create",
        content=b'{type="scheduler_pool_tree";attributes={name="physical"};output_format=<format=text>yson}',
        headers={"Content-Type": "application/x-yt-yson-text", "Authorization": f"OAuth {TOKEN}"},
        timeout=10,
    )
    assert response.status_code == 200 and response.content.startswith(b'{"object_id"=')
    assert call(base, "GET", "get", {"path": "//sys/pool_trees"}).json() == {"value": {"physical": {}}}
    assert call(base, "GET", "get", {"path": "//sys/pool_trees", "return_only_value": True}).json() == {
        "physical": {}
    }
    got = call(
        base,
        "GET",
        "get",
        {
            "path": "//sys/pool_trees",
            "output_format": {"$value": "yson", "$attributes": {"format": "pretty"}},
            "return_only_value": True,
        },
    )
    assert got.content == b'{\n    "physical" = {\n    };\n}\n'
    assert call(base, "GET", "exists", {"path": "//sys/pool_trees/physical"}).json() == {"value": True}
    assert call(  # identity comes from the token, never from X-Started-By
        base, "GET", "get_current_user", {}, headers={"X-Started-By": '{"user"="alice";"pid"=1}'}
    ).json() == {"user": "root"}
    assert call(base, "GET", "get_current_user", {}).json() == {"user": "root"}
    put = call(
        base, "PUT", "set", {"path": "//tmp/k", "input_format": "json"}, content='"\u00d0\u00ba"'.encode()
    )
    assert put.status_code == 200 and put.content == b""
    assert (
        call(
            base,
            "GET",
            "get",
            {
                "path": "//tmp/k",
                "return_only_value": True,
                "output_format": {"$value": "json", "$attributes": {"encode_utf8": False}},
            },
        ).content.decode()
        == '"к"'
    )


def test_token_auth(tmp_path: Path, serve: Callable[[object], str]) -> None:
    base = serve(
        create_app(
            open_store(f"sqlite:///{tmp_path / 'a.db'}"), token="s3cret-0123456789abcdef", host="test-proxy"
        )
    )
    assert httpx.get(f"{base}/api/v4", timeout=10).status_code == 200
    assert httpx.get(f"{base}/hosts", timeout=10).status_code == 200
    assert_yt_error(call(base, "GET", "get", {"path": "//sys"}, auth=False), 900, status=401)
    assert_yt_error(
        call(base, "GET", "get", {"path": "//sys"}, headers={"Authorization": "OAuth wrong"}), 900, status=401
    )
    assert_yt_error(call(base, "GET", "get_current_user", {}, auth=False), 900, status=401)
    ok = call(
        base,
        "GET",
        "get",
        {"path": "//sys/pool_trees", "return_only_value": True},
        headers={"Authorization": "OAuth s3cret-0123456789abcdef"},
    )
    assert ok.status_code == 200 and ok.json() == {}


def test_old_mutation_ids_are_pruned(tmp_path: Path, serve: Callable[[object], str]) -> None:
    now = [1000.0]
    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    base = serve(create_app(store, clock=lambda: now[0], host="test-proxy", token=TOKEN))
    call(base, "POST", "create", {"type": "map_node", "path": "//tmp/a", "mutation_id": "old"})
    now[0] += 7200
    call(base, "POST", "create", {"type": "map_node", "path": "//tmp/b", "mutation_id": "new"})
    assert store.get_mutation(mutation_key("root", "old")) == (False, None)
    assert store.get_mutation(mutation_key("root", "new"))[0] is True


def test_binary_yson_set_body(server: tuple[str, Extra]) -> None:
    import struct

    base, _ = server
    params = '{path="//tmp/w";input_format=<format=binary>yson;mutation_id="b-1";retry=%false}'
    put = call(base, "PUT", "set", params, headers=YSON_HEADER, content=b"\x03" + struct.pack("<d", 5.0))
    assert put.status_code == 200, put.text
    got = call(base, "GET", "get", '{path="//tmp/w";return_only_value=%true;output_format=<format=binary>yson}',
               headers=YSON_HEADER)  # fmt: skip
    assert got.headers["content-type"] == "application/x-yt-yson-binary"
    assert got.content == b"\x03" + struct.pack("<d", 5.0)


def test_a_retry_while_the_first_request_runs_waits_and_answers_its_answer(
    server: tuple[str, Extra], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry with the mutation id of a request still running (its change not yet remembered) waits for it and
    answers what it answered; the command runs once."""
    base, extra = server
    waiting = threading.Event()
    if MutationsInFlight is not None:  # the code before it has no wait to note
        held = MutationsInFlight.held

        def noting(self: Any, key: str, timeout: float | None = None) -> Any:
            if key in self._running:
                waiting.set()
            return held(self, key, timeout)

        monkeypatch.setattr(MutationsInFlight, "held", noting)
    extra.gate = threading.Event()
    answers: list[httpx.Response] = []
    params = {"mutation_id": "held-1", "retry": True}
    first = threading.Thread(target=lambda: answers.append(call(base, "POST", "bump", params)), daemon=True)
    first.start()
    try:
        assert extra.bumping.wait(30)
        second = threading.Thread(
            target=lambda: answers.append(call(base, "POST", "bump", params)), daemon=True
        )
        second.start()
        wait_for(lambda: waiting.is_set() or extra.calls == 2, 30)
    finally:
        extra.gate.set()
    first.join(30)
    second.join(30)
    assert extra.calls == 1, "the retry ran the command a second time"
    assert [answer.json() for answer in answers] == [{"calls": 1}, {"calls": 1}]
