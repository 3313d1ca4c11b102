"""End to end with the official client: the real ``yt`` CLI and ``yt.wrapper.YtClient`` against uvicorn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yt.wrapper as ytw

from pooltree.server import create_app, open_store

YT = str(Path(sys.executable).parent / "yt")
TREES = "//sys/pool_trees"
TOKEN = "ytct-0000-" + "e2" * 16


def cli_env(home: Path, proxy: str, **extra: str) -> dict[str, str]:
    """A clean environment for the CLI: root's token, no ambient proxy, HOME without ~/.yt/token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("YT_")}
    env.update({"HOME": str(home), "YT_PROXY": proxy, "YT_TOKEN": TOKEN}, **extra)
    return env


def yt(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([YT, *args], env=env, capture_output=True, text=True, timeout=60)
    if check:
        assert result.returncode == 0, f"yt {' '.join(args)} failed:\n{result.stderr}"
    return result


@pytest.fixture
def proxy(tmp_path: Path, serve: Callable[[object], str]) -> str:
    return serve(create_app(open_store(f"sqlite:///{tmp_path / 'state.db'}"), token=TOKEN))


def test_cli_pool_lifecycle(proxy: str, tmp_path: Path) -> None:
    env = cli_env(tmp_path, proxy)
    yt(env, "create", "scheduler_pool_tree", "--attributes", "{name=physical;config={main_resource=cpu}}")
    pool_id = yt(env, "create", "scheduler_pool", "--attributes",
                 "{name=p1;pool_tree=physical;strong_guarantee_resources={cpu=100}}").stdout.strip()  # fmt: skip
    assert len(pool_id.split("-")) == 4
    yt(env, "create", "scheduler_pool", "--attributes", "{name=child;pool_tree=physical;parent_name=p1}")
    yt(env, "set", f"{TREES}/physical/p1/child/@weight", "2")
    yt(env, "set", f"{TREES}/physical/p1/child/@strong_guarantee_resources", "{cpu=60}")
    assert yt(env, "get", f"{TREES}/physical/p1/child/@weight").stdout.strip() == "2"
    assert yt(env, "get", TREES).stdout.startswith(
        '{\n    "physical" = {\n        "p1" = {\n            "child" = {'
    )
    assert yt(env, "list", f"{TREES}/physical/p1").stdout.split() == ["child"]
    assert "scheduler_pool" in yt(env, "list", "-l", f"{TREES}/physical/p1").stdout
    assert yt(env, "exists", f"{TREES}/physical/p1/child").stdout.strip() == "true"
    assert yt(env, "exists", f"{TREES}/physical/nope").stdout.strip() == "false"
    yt(env, "create-pool", "p2")  # asks the orchid for the default tree first
    assert yt(env, "get", "//sys/scheduler/orchid/scheduler/default_pool_tree").stdout.strip() == '"physical"'
    assert yt(env, "whoami").stdout.strip()

    rejected = yt(
        env, "set", f"{TREES}/physical/p1/child/@strong_guarantee_resources", "{cpu=500}", check=False
    )
    assert rejected.returncode != 0
    assert (
        "Invalid pool trees configuration" in rejected.stderr
        and "strong_guarantee_resources" in rejected.stderr
    )
    assert yt(env, "get", f"{TREES}/physical/p1/child/@strong_guarantee_resources").stdout.split() == [
        "{",
        '"cpu"',
        "=",
        "60;",
        "}",
    ]

    missing = yt(env, "remove", f"{TREES}/physical/ghost", check=False)
    assert missing.returncode != 0 and "Error resolving path" in missing.stderr
    yt(env, "remove", f"{TREES}/physical/p1", "--recursive")
    assert yt(env, "list", f"{TREES}/physical").stdout.split() == ["p2"]


def test_cli_without_host_discovery(proxy: str, tmp_path: Path) -> None:
    env = cli_env(tmp_path, proxy, YT_USE_HOSTS="0")
    yt(env, "create", "scheduler_pool_tree", "--attributes", "{name=gpu}")
    yt(env, "create", "scheduler_pool", "--attributes", "{name=g1;pool_tree=gpu}")
    assert yt(env, "list", f"{TREES}/gpu").stdout.split() == ["g1"]
    error = yt(env, "get", "//sys/client_config", check=False)
    assert error.returncode != 0 and "Error resolving path //sys/client_config" in error.stderr


def test_cli_with_json_wire_format(proxy: str, tmp_path: Path) -> None:
    env = cli_env(
        tmp_path, proxy, YT_CONFIG_PATCHES="{structured_data_format=json}", YT_STRUCTURED_DATA_FORMAT="json"
    )
    yt(env, "set", "//tmp/привет", '"мир"')
    printed = yt(env, "get", "//tmp/привет").stdout  # the CLI prints JSON verbatim, encode_utf8 applied
    assert json.loads(printed).encode("latin-1").decode("utf-8") == "мир"


@pytest.mark.parametrize("config", [{}, {"structured_data_format": "json"}], ids=["yson-wire", "json-wire"])
def test_python_client(proxy: str, config: dict[str, object]) -> None:
    client = ytw.YtClient(proxy=proxy, config=config, token=TOKEN)
    client.create("scheduler_pool_tree", attributes={"name": "physical", "config": {"main_resource": "cpu"}})
    client.create("scheduler_pool", attributes={"name": "research", "pool_tree": "physical"})
    client.create(
        "scheduler_pool", attributes={"name": "ml", "pool_tree": "physical", "parent_name": "research"}
    )
    client.set(f"{TREES}/physical/research/@weight", 5.0)
    client.set(f"{TREES}/physical/research/@strong_guarantee_resources", {"cpu": 40})
    client.set(f"{TREES}/physical/research/ml/@strong_guarantee_resources", {"cpu": 30})
    assert client.get(f"{TREES}/physical/research/@weight") == 5.0
    assert client.get(TREES) == {"physical": {"research": {"ml": {}}}}
    assert client.list(f"{TREES}/physical") == ["research"]
    assert client.exists(f"{TREES}/physical/research/ml")
    assert not client.exists(f"{TREES}/physical/research/ghost")
    assert client.get("//sys/scheduler/orchid/scheduler/default_pool_tree") == "physical"

    with pytest.raises(ytw.YtResponseError) as info:
        client.set(f"{TREES}/physical/research/ml/@strong_guarantee_resources", {"cpu": 41})
    assert "less than the sum of children guarantees" in str(info.value)
    assert client.get(f"{TREES}/physical/research/ml/@strong_guarantee_resources") == {"cpu": 30}
    with pytest.raises(ytw.YtResponseError) as info:
        client.get(f"{TREES}/physical/ghost")
    assert info.value.is_resolve_error()
    with pytest.raises(ytw.YtResponseError) as info:
        client.create("scheduler_pool", attributes={"name": "ml", "pool_tree": "physical"})
    assert info.value.contains_code(501)

    client.set("//tmp/ключ", {"текст": "значение", "n": 1})
    assert client.get("//tmp/ключ") == {"текст": "значение", "n": 1}
    assert client.get("//tmp/ключ/@type") == "map_node"
    client.remove(f"{TREES}/physical/research", recursive=True)
    assert client.get(f"{TREES}/physical") == {}


def test_token_auth_with_cli_and_client(tmp_path: Path, serve: Callable[[object], str]) -> None:
    proxy = serve(create_app(open_store(f"sqlite:///{tmp_path / 'a.db'}"), token="t0ken-0123456789abcdef"))
    env = cli_env(tmp_path, proxy)
    del env["YT_TOKEN"]
    denied = yt(env, "list", TREES, check=False)
    assert denied.returncode != 0 and "failed to authenticate" in denied.stderr
    assert yt(cli_env(tmp_path, proxy, YT_TOKEN="t0ken-0123456789abcdef"), "list", TREES).stdout == ""
    client = ytw.YtClient(proxy=proxy, token="t0ken-0123456789abcdef")
    client.create("scheduler_pool_tree", attributes={"name": "physical"})
    assert client.list(TREES) == ["physical"]
    with pytest.raises(ytw.YtTokenError):
        ytw.YtClient(proxy=proxy, token="wrong").list(TREES)
