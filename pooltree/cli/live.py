"""``pooltree scheduler`` and ``pooltree local``: the live cluster's scheduler, and a whole cluster on one machine.

``scheduler`` serves the YTsaurus HTTP API and node heartbeats on one store (SQLite file or PostgreSQL URL) and
prints ``listening on URL`` on stdout once it accepts connections. ``local`` starts one scheduler (creating pool
tree ``default``) and N nodes (``pooltree node``, `pooltree.cli.node`) as child processes, prints the proxy
address, restarts a node that dies (the others and the scheduler keep running; a node in a crash loop is left down
with a log line naming it), and stops them all on SIGINT/SIGTERM (SIGTERM first, bounded wait, then SIGKILL). The
scheduler's death stops the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import os
import socket
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import typer

from pooltree.cli.app import app, fail
from pooltree.cli.node import ISOLATION_OPTION, check_isolation_option, parse_node_resources
from pooltree.cli.processes import DEFAULT_DATA, install_stop_handlers, setup_logging
from pooltree.cli.secrets_options import (
    STORE_KEY_FILE,
    node_secret,
    restrict_store_files,
    superuser_token,
)
from pooltree.config.documents import load_document
from pooltree.config.pool_trees import CHILDREN_KEY, parse_pool_trees
from pooltree.errors import ConfigError, PooltreeError
from pooltree.forecast.worker import WorkerSettings, forecast_worker_settings
from pooltree.local.cluster import READY_PREFIX, ROLE_PREFIX, LocalCluster
from pooltree.node.isolation import Resolution, resolve_isolation
from pooltree.node.service import check_period
from pooltree.security.guard import LOOPBACK_NETWORKS, is_loopback, parse_networks
from pooltree.server.heartbeat_listener import open_files_for_nodes
from pooltree.server.live.model import check_update_period
from pooltree.shards.host import MAX_NODE_SHARDS

SUPERVISE_PERIOD = 0.5
"""Seconds between ``pooltree local``'s checks of its children."""

log = logging.getLogger("pooltree.cli.live")


def check_port_free(host: str, port: int) -> None:
    """Fail early with a clear message when ``host:port`` cannot be bound (busy or not a local address)."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise PooltreeError(f"port {port} on {host} is already in use") from None
            raise PooltreeError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None


def parse_heartbeat_port(value: str) -> int | None:
    """``--heartbeat-port``: ``auto`` -> 0 (a free port), ``off`` -> None, else a port number (1-65535)."""
    text = value.strip().lower()
    if text == "auto":
        return 0
    if text == "off":
        return None
    if text.isdigit() and 1 <= int(text) <= 65535:
        return int(text)
    raise PooltreeError(f"--heartbeat-port must be auto, off or a port from 1 to 65535, got {value!r}")


def check_port_option(port: int) -> int:
    if not 0 <= port <= 65535:
        raise PooltreeError(f"--port must be between 0 and 65535, got {port}")
    return port


def store_url_for(store: str | None, data: Path) -> str:
    """``--store`` as given, else a SQLite file under ``--data``."""
    if store:
        return store
    try:
        data.mkdir(parents=True, exist_ok=True)
        data.chmod(0o700)  # the scheduler's files are the daemon's alone (jobs run under other uids)
        probe = data / f".pooltree-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        reason = error.strerror or str(error)
        raise PooltreeError(f"--data {data} is not a usable directory: {reason}") from None
    return f"sqlite:///{(data / 'scheduler.db').resolve()}"


# ----------------------------------------------------------------------------------------- pool trees from --config


def pool_trees_from_document(document: Any, source: str) -> tuple[dict[str, Any], str | None]:
    """``{pool_trees: {...}, default_pool_tree: ...}`` (the snapshot shape) or a bare ``{tree: {config, pools}}``."""
    if not isinstance(document, dict):
        raise ConfigError(source, f"expected a map of pool trees, got {type(document).__name__}")
    if "pool_trees" in document:
        trees = document["pool_trees"]
        default = document.get("default_pool_tree")
        if default is not None and not isinstance(default, str):
            raise ConfigError(f"{source}.default_pool_tree", f"expected a tree name, got {default!r}")
        return trees, default
    return document, None


def read_config(config: Path) -> tuple[dict[str, Any], str | None]:
    """The pool trees of ``config`` and its default tree, validated as a whole."""
    trees, default = pool_trees_from_document(load_document(config), str(config))
    parse_pool_trees(trees, "pool_trees")
    if default is not None and default not in trees:
        raise ConfigError("default_pool_tree", f"no pool tree named {default!r} in {config}")
    return trees, default


def load_trees_into(store: Any, trees: dict[str, Any], default: str | None, config: Path) -> list[str]:
    """Write ``trees`` into the store's Cypress when it holds no tree yet; returns the trees loaded.

    The scheduler does it once it holds the leader lock; a store that already has trees is left as it is (the
    persisted state wins over the file).
    """
    from pooltree.server.cypress import Cypress

    cypress = Cypress(store)
    if cypress.pool_trees_document():
        log.info("the store already has pool trees; %s is not loaded", config)
        return []
    for tree_name, tree in trees.items():
        tree = tree or {}
        cypress.create(
            "scheduler_pool_tree",
            f"//sys/pool_trees/{tree_name}",
            attributes={"config": dict(tree.get("config") or {})},
        )
        pending: list[tuple[str, str, dict[str, Any]]] = [
            (tree_name, name, pool or {}) for name, pool in (tree.get("pools") or {}).items()
        ]
        while pending:
            parent_path, name, pool = pending.pop(0)
            path = f"{parent_path}/{name}"
            options = {key: value for key, value in pool.items() if key != CHILDREN_KEY}
            cypress.create("scheduler_pool", f"//sys/pool_trees/{path}", attributes=options)
            pending.extend((path, child, sub or {}) for child, sub in (pool.get(CHILDREN_KEY) or {}).items())
    if default is not None:
        cypress.set("//sys/pool_trees/@default_tree", default)
    return list(trees)


# ------------------------------------------------------------------------------------------------- scheduler


NODE_HEARTBEAT_TIMEOUT_OPTION = typer.Option(
    60.0, "--node-heartbeat-timeout", help="Seconds without heartbeats before a node's jobs are aborted."
)
FAIR_SHARE_UPDATE_PERIOD_OPTION = typer.Option(
    1.0,
    "--fair-share-update-period",
    help="Seconds between fair-share updates of a tree with running operations or changes (10 ms to 60 s).",
)
HEARTBEAT_PERIOD_OPTION = typer.Option(
    1.0,
    "--heartbeat-period",
    help="Seconds between an idle node's heartbeats (nodes with finished jobs heartbeat at once).",
)


STORE_OPTION = typer.Option(
    None,
    "--store",
    help="Store URL: a SQLite path / sqlite:///file.db or postgresql://... (default: under --data).",
)
DATA_OPTION = typer.Option(DEFAULT_DATA, "--data", help="Directory for the default SQLite store.")
HOST_OPTION = typer.Option("127.0.0.1", "--host", help="Address to listen on.")
PORT_OPTION = typer.Option(0, "--port", help="Port to listen on; 0 picks a free one.")
HEARTBEAT_PORT_OPTION = typer.Option(
    "auto",
    "--heartbeat-port",
    help="Port (on --host) where node heartbeats are taken on an event loop of their own, so API requests do "
    "not wait behind them: 'auto' picks a free one, 'off' takes heartbeats only on --port. Nodes are given "
    "--port's URL only: the answer to their first heartbeat names this port, and they move to it.",
)
TOKEN_FILE_OPTION = typer.Option(
    None,
    "--token-file",
    help="File (mode 0600) with the superuser (root) token; else $POOLTREE_TOKEN, else DATA/token "
    "(created on first start).",
)
TOKEN_OPTION = typer.Option(
    None, "--token", help="The superuser token (visible in ps: prefer --token-file or $POOLTREE_TOKEN)."
)
NODE_SECRET_FILE_OPTION = typer.Option(
    None,
    "--node-secret-file",
    help="File (mode 0600) with the cluster node secret; else $POOLTREE_NODE_SECRET, else DATA/node_secret.",
)
STORE_KEY_FILE_OPTION = typer.Option(
    None,
    "--store-key-file",
    help="File (mode 0600) with the key that seals secrets kept in the store (operations' secure_vault, "
    "saved mutation answers); default DATA/store_key (created on first start). Schedulers sharing a "
    "PostgreSQL database must share it.",
)
NODE_NETWORKS_OPTION = typer.Option(
    None,
    "--node-networks",
    help="Networks nodes may heartbeat from, e.g. '10.0.0.0/8,127.0.0.1' (default: loopback when --host is "
    "loopback, else any).",
)
NO_AUTHENTICATION_OPTION = typer.Option(
    False,
    "--no-authentication",
    help="Every caller is root (refused unless --host is a loopback address).",
)
METRICS_PUBLIC_OPTION = typer.Option(False, "--metrics-public", help="Serve /metrics without a token.")
CONFIG_OPTION = typer.Option(
    None,
    "--config",
    help="Pool trees document (YAML/JSON/YSON) loaded at start if the store has no tree.",
)
CREATE_DEFAULT_TREE_OPTION = typer.Option(
    False, "--create-default-tree", help="Create pool tree 'default' if the store has no tree."
)
FORECAST_BUDGET_OPTION = typer.Option(
    5.0,
    "--forecast-budget",
    help="CPU seconds of one core a refresh of the scheduling forecast may take (in its worker process, at "
    "nice +10); 0 turns forecasts off.",
)
FORECAST_ARRIVALS_OPTION = typer.Option(
    False,
    "--forecast-arrivals",
    help="The scheduling forecast assumes the last hour's submissions go on (per pool, drawn anew in each "
    "run; docs/forecast.md). Off: the forecast is that of the cluster left alone.",
)
NODE_SHARDS_OPTION = typer.Option(
    1,
    "--node-shards",
    help="Processes taking node heartbeats (each on a port of its own, nodes assigned by address); "
    "1 takes them in the scheduler's process.",
)
SHARD_STARTS_OPTION = typer.Option(
    False,
    "--shard-starts",
    help="Each node shard process also runs its nodes' scheduling passes on its replica of the strategy, "
    "claiming starts from the scheduler (pooltree.shards: remote.py); with --node-shards 1, one shard process.",
)
READ_PROCESS_OPTION = typer.Option(
    True,
    "--read-process/--no-read-process",
    envvar="POOLTREE_READ_PROCESS",
    help="A read process of the scheduler's own owns --port and relays each request to the scheduler (which "
    "serves the port itself if it dies), so reads it can answer never wait for the scheduler's event loop "
    "(pooltree/reads; docs/live-cluster.md). On by default; --no-read-process (or POOLTREE_READ_PROCESS=0): the "
    "scheduler serves --port itself.",
)
DEFAULT_TENTATIVE_POOL_TREES_OPTION = typer.Option(
    "",
    "--default-tentative-pool-trees",
    help="Comma-separated pool trees an operation with use_default_tentative_pool_trees (and no "
    "tentative_pool_trees of its own) tries tentatively (YTsaurus's scheduler default_tentative_pool_trees).",
)


@app.command("scheduler")
def scheduler_command(
    store: str = STORE_OPTION,
    data: Path = DATA_OPTION,
    host: str = HOST_OPTION,
    port: int = PORT_OPTION,
    heartbeat_port: str = HEARTBEAT_PORT_OPTION,
    token_file: Path = TOKEN_FILE_OPTION,
    token: str = TOKEN_OPTION,
    node_secret_file: Path = NODE_SECRET_FILE_OPTION,
    store_key_file: Path = STORE_KEY_FILE_OPTION,
    node_networks: str = NODE_NETWORKS_OPTION,
    no_authentication: bool = NO_AUTHENTICATION_OPTION,
    metrics_public: bool = METRICS_PUBLIC_OPTION,
    config: Path = CONFIG_OPTION,
    create_default_tree: bool = CREATE_DEFAULT_TREE_OPTION,
    node_heartbeat_timeout: float = NODE_HEARTBEAT_TIMEOUT_OPTION,
    heartbeat_period: float = HEARTBEAT_PERIOD_OPTION,
    fair_share_update_period: float = FAIR_SHARE_UPDATE_PERIOD_OPTION,
    forecast_budget: float = FORECAST_BUDGET_OPTION,
    forecast_arrivals: bool = FORECAST_ARRIVALS_OPTION,
    node_shards: int = NODE_SHARDS_OPTION,
    shard_starts: bool = SHARD_STARTS_OPTION,
    default_tentative_pool_trees: str = DEFAULT_TENTATIVE_POOL_TREES_OPTION,
    read_process: bool = READ_PROCESS_OPTION,
) -> None:
    """Run the scheduler: YTsaurus HTTP API, node heartbeats, fair-share updates, revival from the store."""
    setup_logging()
    default_trees = tuple(name.strip() for name in default_tentative_pool_trees.split(",") if name.strip())
    try:
        _check_scheduler_options(
            host, port, node_heartbeat_timeout, node_shards, heartbeat_period, fair_share_update_period
        )
        heartbeats = parse_heartbeat_port(heartbeat_port)
        if heartbeats and heartbeats == port:
            raise PooltreeError(f"--heartbeat-port must differ from --port ({port})")
        forecasts = forecast_worker_settings(forecast_budget, arrivals=forecast_arrivals)
        if no_authentication and not is_loopback(host):
            raise PooltreeError(
                f"--no-authentication is refused on {host}: anyone who can reach it would be root; "
                "listen on 127.0.0.1 or keep authentication"
            )
        check_port_free(host, port)
        check_port_free(host, heartbeats or 0)
        os.umask(0o077)  # the store, its journal and the secret files are the scheduler's alone
        before, after = open_files_for_nodes()  # a descriptor per node's heartbeat connection
        if after != before:
            log.info("open files limit raised from %d to %d for the nodes' connections", before, after)
        url = store_url_for(store, data)
        secrets = _scheduler_secrets(token_file, token, node_secret_file, node_networks, host, data)
        secrets["store_key_file"] = store_key_file if store_key_file is not None else data / STORE_KEY_FILE
        restrict_store_files(url)
        document = read_config(config) if config is not None else None
    except PooltreeError as error:
        fail(error.message)

    def prepare(opened: Any) -> None:
        if config is not None and document is not None:
            loaded = load_trees_into(opened, document[0], document[1], config)
            if loaded:
                log.info("loaded pool trees %s from %s", ", ".join(loaded), config)

    try:
        _run_fast(
            _run_scheduler(
                url,
                host,
                port,
                create_default_tree,
                node_heartbeat_timeout,
                heartbeat_period,
                fair_share_update_period,
                authentication=not no_authentication,
                metrics_public=metrics_public,
                **secrets,
                prepare=prepare,
                forecasts=forecasts,
                node_shards=node_shards,
                shard_starts=shard_starts,
                default_tentative_pool_trees=default_trees,
                heartbeat_port=heartbeats,
                read_process=read_process,
            )
        )
    except PooltreeError as error:
        fail(error.message)
    except SystemExit as error:
        if error.code not in (0, None):
            fail(f"scheduler HTTP server failed to start on {host}:{port}")
        raise


def _check_scheduler_options(
    host: str,
    port: int,
    node_heartbeat_timeout: float,
    node_shards: int,
    heartbeat_period: float,
    fair_share_update_period: float,
) -> None:
    """The scheduler's numeric options, each checked with an error naming it."""
    check_port_option(port)
    if not (math.isfinite(node_heartbeat_timeout) and node_heartbeat_timeout > 0):
        raise PooltreeError(
            f"--node-heartbeat-timeout must be positive seconds, got {node_heartbeat_timeout}"
        )
    if not 1 <= node_shards <= MAX_NODE_SHARDS:
        raise PooltreeError(f"--node-shards must be from 1 to {MAX_NODE_SHARDS}, got {node_shards}")
    check_period(heartbeat_period, "--heartbeat-period")
    check_update_period(fair_share_update_period, "--fair-share-update-period")


def _run_fast(main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run`` on uvloop when it is installed (a cheaper event loop for the HTTP server)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def _scheduler_secrets(
    token_file: Path | None,
    token: str | None,
    node_secret_file: Path | None,
    node_networks: str | None,
    host: str,
    data: Path,
) -> dict[str, Any]:
    """The superuser token, node secret and node networks of ``pooltree scheduler`` (files made on first start)."""
    root_token, token_path, created = superuser_token(token_file, token, data)
    if created:
        log.info("created the superuser (root) token in %s (mode 0600)", token_path)
    secret, secret_path, created = node_secret(node_secret_file, data)
    if created:
        log.info("created the cluster node secret in %s (mode 0600); give it to nodes", secret_path)
    if node_networks is not None:
        networks = parse_networks(node_networks)
    elif is_loopback(host):
        networks = LOOPBACK_NETWORKS
    else:
        networks = None
        log.warning(
            "nodes may heartbeat from any address (with the node secret); restrict them with --node-networks"
        )
    return {"token": root_token, "node_secret": secret, "node_networks": networks}


async def _run_scheduler(
    store_url: str,
    host: str,
    port: int,
    create_default_tree: bool,
    timeout: float,
    heartbeat_period: float = 1.0,
    fair_share_update_period: float = 1.0,
    *,
    token: str | None,
    node_secret: str | None,
    node_networks: Any,
    authentication: bool,
    metrics_public: bool,
    store_key_file: Path | None = None,
    prepare: Callable[[Any], None] | None = None,
    forecasts: WorkerSettings | None = None,
    node_shards: int = 1,
    shard_starts: bool = False,
    default_tentative_pool_trees: tuple[str, ...] = (),
    heartbeat_port: int | None = None,
    read_process: bool = False,
) -> None:
    from pooltree.server.service import serve

    stop = asyncio.Event()
    install_stop_handlers(stop)

    def ready(url: str) -> None:
        print(f"{READY_PREFIX}{url}", flush=True)

    def role(text: str) -> None:
        print(f"{ROLE_PREFIX}{text}", flush=True)

    await serve(
        store_url,
        host=host,
        port=port,
        token=token,
        node_secret=node_secret,
        node_networks=node_networks,
        authentication=authentication,
        metrics_public=metrics_public,
        create_default_tree=create_default_tree,
        node_heartbeat_timeout=timeout,
        heartbeat_period=heartbeat_period,
        fair_share_update_period=fair_share_update_period,
        on_ready=ready,
        on_role=role,
        store_key_file=store_key_file,
        prepare_store=prepare,
        stop=stop,
        forecast_settings=forecasts,
        node_shards=node_shards,
        shard_starts=shard_starts,
        default_tentative_pool_trees=default_tentative_pool_trees,
        heartbeat_port=heartbeat_port,
        read_process=read_process,
    )
    log.info("scheduler stopped")


# ------------------------------------------------------------------------------------------------- local


@app.command("local")
def local_command(
    nodes: int = typer.Option(2, "--nodes", help="Number of exec nodes."),
    port: int = typer.Option(0, "--port", help="Scheduler port; 0 picks a free one."),
    data: Path = typer.Option(
        DEFAULT_DATA, "--data", help="State directory: SQLite store and node sandboxes."
    ),
    node_resources: str = typer.Option(
        None,
        "--node-resources",
        help="Each node's resource limits, e.g. 'cpu=4,memory=8Gi,user_slots=4' (default: this machine's cpu, "
        "memory and slots split evenly among the nodes).",
    ),
    node_heartbeat_timeout: float = NODE_HEARTBEAT_TIMEOUT_OPTION,
    memory_meter: str = typer.Option(
        "auto", "--memory-meter", help="Nodes' memory meter: auto, cgroup, psutil."
    ),
    heartbeat_period: float = HEARTBEAT_PERIOD_OPTION,
    fair_share_update_period: float = FAIR_SHARE_UPDATE_PERIOD_OPTION,
    isolation: str = ISOLATION_OPTION,
    read_process: bool = READ_PROCESS_OPTION,
) -> None:
    """Start a scheduler (pool tree 'default') and N nodes on this machine; run until interrupted."""
    setup_logging()
    try:
        if not 0 <= nodes <= 64:
            raise ConfigError("--nodes", f"must be between 0 and 64, got {nodes}")
        check_port_option(port)
        check_port_free("127.0.0.1", port)
        parse_node_resources(node_resources)
        if memory_meter not in ("auto", "cgroup", "psutil"):
            raise ConfigError("--memory-meter", f"expected auto, cgroup or psutil, got {memory_meter!r}")
        if not (math.isfinite(node_heartbeat_timeout) and node_heartbeat_timeout > 0):
            raise ConfigError(
                "--node-heartbeat-timeout", f"must be positive seconds, got {node_heartbeat_timeout}"
            )
        check_period(heartbeat_period, "--heartbeat-period")
        check_update_period(fair_share_update_period, "--fair-share-update-period")
        job_isolation = resolve_isolation(check_isolation_option(isolation))  # impossible: fails here
        cluster = LocalCluster(
            data,
            nodes=nodes,
            port=port,
            node_resources=node_resources,
            node_heartbeat_timeout=node_heartbeat_timeout,
            memory_meter=memory_meter,
            heartbeat_period=heartbeat_period,
            fair_share_update_period=fair_share_update_period,
            isolation=isolation,
            read_process=read_process,
        )
        code = asyncio.run(_run_local(cluster, job_isolation))
    except PooltreeError as error:
        fail(error.message)
    if code:
        raise typer.Exit(code)


async def _run_local(
    cluster: LocalCluster, job_isolation: Resolution, echo: Callable[[str], None] = print
) -> int:
    stop = asyncio.Event()
    install_stop_handlers(stop)
    try:
        url = await cluster.start()
        echo(f"pooltree local: scheduler at {url} with {cluster.nodes} nodes; state in {cluster.data}")
        if cluster.sizing.resources:
            echo(f"  each node: {cluster.sizing.resources}")
        for note in cluster.sizing.notes:
            echo(f"  note: {note}")
        echo(f"  job isolation: {job_isolation.summary()}")
        warning = job_isolation.warning()
        if warning:
            echo(f"  warning: {warning} (a node alert while it lasts)")
        made = "created" if cluster.token_created else "kept"
        echo(f"  superuser (root) token {made} in {cluster.token_file.resolve()} (mode 0600)")
        echo(f"  export YT_PROXY={url}")
        echo(f"  export YT_TOKEN=$(cat {cluster.token_file.resolve()})")
        yt = Path(sys.executable).parent / "yt"  # the yt client installed beside pooltree
        echo(f"  {yt if yt.exists() else 'yt'} --proxy {url} list //sys/pool_trees/default")
        sys.stdout.flush()
        while not stop.is_set():
            gone = cluster.exited()
            if gone is not None:
                log.error("%s; stopping the cluster", gone)
                return 1
            for event in await cluster.supervise():
                log.warning("%s", event)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SUPERVISE_PERIOD)
        return 0
    finally:
        await cluster.stop()
