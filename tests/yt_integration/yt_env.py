"""The environment YTsaurus's scheduler integration tests assume (their ``YTEnvSetup``), restated for pooltree:
a real ``pooltree scheduler`` process on a data directory and ``NUM_NODES`` real ``pooltree node`` processes, as
``pooltree local`` runs them, driven through ``yt.wrapper`` with the root token.

One environment per test module (YTsaurus starts one per class); ``setup_method`` gives every test the state a
fresh YTsaurus environment has: no operations, one pool tree ``default`` that is ``@default_tree``, with its
effective config in the orchid. Restarts ("Restarter(SCHEDULERS_SERVICE)", or the master's, which holds Cypress
here) restart the scheduler on the same store and port; nodes reconnect by themselves.

Facts carry over from YTsaurus's tests, not code: every wait is bounded (``wait``), jobs never share the test's
file system (breakpoints are files in Cypress that jobs poll through the API, or job states polled here).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent.parent / "live"))
import contextlib

from live_procs import ROOT_TOKEN, Procs, free_port

TREES = "//sys/pool_trees"
ORCHID = "//sys/scheduler/orchid/scheduler"
PER_TREE = f"{ORCHID}/scheduling_info_per_pool_tree"
USER_TO_DEFAULT_POOL = "//sys/scheduler/user_to_default_pool"


def wait(predicate: Callable[[], Any], timeout: float = 30.0, period: float = 0.05) -> Any:
    """YTsaurus's ``wait``: poll until truthy (errors count as false), fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except ytw.YtError as error:
            last = error
        else:
            if last:
                return last
        time.sleep(period)
    raise AssertionError(f"condition not met within {timeout} s (last value {last!r})")


def holds_for(predicate: Callable[[], Any], seconds: float, period: float = 0.1) -> None:
    """YTsaurus's ``time.sleep(seconds); assert predicate()`` where the point is that nothing changes: the
    condition is asserted throughout the window (a bounded observation, not a wait for something)."""
    deadline = time.monotonic() + seconds
    while True:
        assert predicate(), f"condition stopped holding within {seconds} s"
        if time.monotonic() >= deadline:
            return
        time.sleep(period)


NO_QUEUED_THROTTLE = {"POOLTREE_HEARTBEAT_QUEUED_LIMIT": "60"}
"""YTsaurus throttles heartbeats by its concurrent limits only; pooltree also throttles a heartbeat that waited
past 0.25 s in its event loop (``server/live/throttle.py``), which a loaded CI machine can reach with heartbeats
every 0.1 s and then raise ``heartbeats_throttled``, an alert YTsaurus's tests do not expect. Its limit is put out
of the way here, as in the browser test (CI, stop 44)."""


class YtEnv:
    """``pooltree scheduler`` + ``num_nodes`` ``pooltree node`` processes; ``yt`` is a root client."""

    def __init__(
        self,
        root: Path,
        *,
        num_nodes: int = 0,
        node_resources: str = "user_slots=1,cpu=1,memory=4Gi",
        fair_share_update_period: float = 0.1,
        heartbeat_period: float = 0.1,
        node_tags: dict[int, str] | None = None,
    ) -> None:
        self.root = root
        self.procs = Procs(root)
        self.data = root / "data"
        self.port = free_port()
        self.extra = (
            "--fair-share-update-period", str(fair_share_update_period),
            "--heartbeat-period", str(heartbeat_period),
        )  # fmt: skip
        self.scheduler, self.url = self.procs.scheduler(
            self.data, self.port, *self.extra, env=NO_QUEUED_THROTTLE
        )
        self.yt = self.client()
        self.node_resources = node_resources
        self.node_tags = dict(node_tags or {})
        """Tags a node runs with (pooltree has no ``//sys/cluster_nodes/<node>/@user_tags`` to set later)."""
        self.base_tags = dict(self.node_tags)
        """The environment's tags (its class's setup sets them): ``reset`` brings the nodes back to them."""
        self.node_overrides: dict[int, str] = {}
        """Per-node resources replacing ``node_resources`` (``set_node_resources``)."""
        self.nodes = [self._node(i, node_resources) for i in range(num_nodes)]
        self.num_nodes = num_nodes
        if num_nodes:
            wait(lambda: self.yt.get(f"{ORCHID}/cluster/node_count") == num_nodes)

    def _node(self, index: int, resources: str) -> Any:
        address = f"node{index}"
        args = [
            "node",
            "--scheduler",
            self.url,
            "--address",
            address,
            "--root",
            str(self.root / "nodes" / address),
        ]
        args += [
            "--resources",
            self.node_overrides.get(index, resources),
            "--memory-meter",
            "psutil",
            "--node-secret-file",
            str(self.procs.node_secret_file),
        ]
        if index in self.node_tags:
            args += ["--tags", self.node_tags[index]]
        return self.procs.spawn(*args)

    _KEEP: Any = object()

    def configure_node(self, index: int, tags: Any = _KEEP, resources: Any = _KEEP) -> None:
        """``set("//sys/cluster_nodes/<node>/@user_tags" / "@resource_limits_overrides", ...)``: pooltree's node tags
        and resources come from its command line, so the node process restarts once with them (the tests set them
        when it runs no job) and re-registers; None clears them (tags) or restores ``node_resources``."""
        tags = self.node_tags.get(index) if tags is self._KEEP else tags
        resources = self.node_overrides.get(index) if resources is self._KEEP else resources
        if self.node_tags.get(index) == tags and self.node_overrides.get(index) == resources:
            return
        self.procs.stop(self.nodes[index])
        for table, value in ((self.node_tags, tags), (self.node_overrides, resources)):
            if value:
                table[index] = value
            else:
                table.pop(index, None)
        self.nodes[index] = self._node(index, self.node_resources)
        expected = sorted(tags.split(",")) if tags else []
        slots = float(
            dict(part.split("=", 1) for part in (resources or self.node_resources).split(","))["user_slots"]
        )

        def registered() -> bool:
            node = self.yt.get(f"{ORCHID}/nodes/node{index}")
            return list(node["tags"]) == expected and float(node["resource_limits"]["user_slots"]) == slots

        wait(registered)

    def set_node_tags(self, index: int, tags: str | None) -> None:
        """``set("//sys/cluster_nodes/<node>/@user_tags", ...)`` (``configure_node``)."""
        self.configure_node(index, tags=tags)

    def set_node_resources(self, index: int, resources: str | None) -> None:
        """``set("//sys/cluster_nodes/<node>/@resource_limits_overrides", ...)`` (``configure_node``)."""
        self.configure_node(index, resources=resources)

    def client(self, token: str | None = ROOT_TOKEN, **config: Any) -> ytw.YtClient:
        """A client of ``token``'s user; ``config`` adds ``yt.wrapper`` options (e.g. no start retries: the
        wrapper retries ``TooManyOperations`` for hours, YTsaurus's test driver does not)."""
        return ytw.YtClient(
            proxy=self.url,
            token=token,
            config={"proxy": {"enable_proxy_discovery": False, "retries": {"count": 30}}, **config},
        )

    def restart_scheduler(self) -> None:
        """Stop the scheduler and start it again on the same data and port (nodes keep heartbeating)."""
        self.procs.stop(self.scheduler)
        self.scheduler, self.url = self.procs.scheduler(
            self.data, self.port, *self.extra, env=NO_QUEUED_THROTTLE
        )
        if self.num_nodes:
            wait(lambda: self.yt.get(f"{ORCHID}/cluster/node_count") == self.num_nodes)

    def reset(self) -> None:
        """What a fresh YTsaurus environment holds: no running operations, only tree ``default`` as the default."""
        yt = self.yt
        for op in (
            yt.list_operations(state="running")["operations"]
            + yt.list_operations(state="pending")["operations"]
        ):
            with contextlib.suppress(ytw.YtError):
                yt.abort_operation(op["id"])
        wait(lambda: not yt.list_operations(state="running")["operations"])
        if yt.exists(USER_TO_DEFAULT_POOL):  # the teardown's update_user_to_default_pool_map({})
            update_user_to_default_pool_map(yt, {})
        if yt.exists(f"{TREES}/@default_tree"):
            yt.remove(f"{TREES}/@default_tree")
        for tree in yt.list(TREES):
            yt.remove(f"{TREES}/{tree}", recursive=True)
        for index in sorted(set(self.node_tags) | set(self.base_tags) | set(self.node_overrides)):
            self.configure_node(index, tags=self.base_tags.get(index), resources=None)
        yt.create("scheduler_pool_tree", attributes={"name": "default"})
        yt.set(f"{TREES}/@default_tree", "default")
        wait(lambda: yt.exists(f"{ORCHID}/pool_trees/default"))
        if self.num_nodes:
            wait(lambda: yt.get(f"{ORCHID}/pool_trees/default/resource_limits/user_slots") > 0)

    def close(self) -> None:
        self.procs.close()


def create_pool(
    yt: ytw.YtClient, name: str, pool_tree: str = "default", parent_name: str | None = None, **kwargs: Any
) -> None:
    """YTsaurus's ``create_pool`` (``attributes``, ``ignore_existing``)."""
    attributes = {"name": name, "pool_tree": pool_tree, **kwargs.pop("attributes", {})}
    if parent_name is not None:
        attributes["parent_name"] = parent_name
    yt.create("scheduler_pool", attributes=attributes, **kwargs)


def create_pool_tree(
    yt: ytw.YtClient, name: str, config: dict[str, Any] | None = None, **kwargs: Any
) -> None:
    """YTsaurus's ``create_pool_tree`` (``config``, ``ignore_existing``, ``force``)."""
    attributes = {"name": name, **({"config": config} if config is not None else {})}
    yt.create("scheduler_pool_tree", attributes=attributes, **kwargs)


def remove_pool_tree(yt: ytw.YtClient, name: str, **kwargs: Any) -> None:
    yt.remove(f"{TREES}/{name}", recursive=True, **kwargs)


def module_env(tmp_path_factory: Any, name: str, **kwargs: Any) -> Iterator[YtEnv]:
    """The body of a module's ``env`` fixture: one environment for the module, closed after it."""
    made = YtEnv(Path(tmp_path_factory.mktemp(name)), **kwargs)
    try:
        yield made
    finally:
        made.close()


def vanilla(command: str, job_count: int = 1, **spec: Any) -> ytw.VanillaSpecBuilder:
    """YTsaurus's ``run_test_vanilla``: one task of ``job_count`` jobs of 1 cpu."""
    task = ytw.VanillaSpecBuilder().begin_task("task").command(command).job_count(job_count).cpu_limit(1)
    builder = task.end_task()
    return builder.spec(spec) if spec else builder


def state(yt: ytw.YtClient, op_id: str) -> str:
    return yt.get_operation(op_id, attributes=["state"])["state"]


def job_count(yt: ytw.YtClient, op_id: str, state: str) -> int:
    """``op.get_job_count(state)``."""
    return sum(1 for job in yt.list_jobs(op_id)["jobs"] if job["state"] == state)


def running_jobs(yt: ytw.YtClient, op_id: str) -> list[dict[str, Any]]:
    return [job for job in yt.list_jobs(op_id)["jobs"] if job["state"] == "running"]


def sleeping(
    yt: ytw.YtClient, job_count: int = 1, cpu_limit: float = 1.0, command: str = "sleep 1000", **spec: Any
) -> Any:
    """YTsaurus's ``run_sleeping_vanilla(job_count, task_patch={"cpu_limit": ...}, spec=...)``, not tracked."""
    task = ytw.VanillaSpecBuilder().begin_task("task").command(command).job_count(job_count)
    builder = task.cpu_limit(cpu_limit).end_task()
    return yt.run_operation(builder.spec(spec) if spec else builder, sync=False)


def get_or(yt: ytw.YtClient, path: str, default: Any = None) -> Any:
    """``get(path, default=...)``: ``default`` where the path does not resolve."""
    try:
        return yt.get(path)
    except ytw.YtResponseError as error:
        if error.is_resolve_error():
            return default
        raise


def pool_path(pool: str, tree: str = "default") -> str:
    """YTsaurus's ``scheduler_orchid_pool_path``."""
    return f"{PER_TREE}/{tree}/fair_share_info/pools/{pool}"


def operation_path(op_id: str, tree: str = "default") -> str:
    """YTsaurus's ``scheduler_orchid_operation_path``."""
    return f"{PER_TREE}/{tree}/fair_share_info/operations/{op_id}"


def set_tree_options(yt: ytw.YtClient, options: dict[str, Any], tree: str = "default") -> None:
    """The writes of YTsaurus's ``update_pool_tree_config(tree, options)`` (each option set in ``@config``); the
    caller waits for what it needs in the orchid (option names there are the current ones)."""
    for key, value in options.items():
        yt.set(f"{TREES}/{tree}/@config/{key}", value)


def update_tree_config(yt: ytw.YtClient, tree: str = "default", **options: Any) -> None:
    """YTsaurus's ``update_pool_tree_config(tree, options)``: set each option, wait until the orchid's effective
    config shows it."""
    for key, value in options.items():
        yt.set(f"{TREES}/{tree}/@config/{key}", value)
    for key, value in options.items():
        wait(lambda key=key, value=value: yt.get(f"{PER_TREE}/{tree}/config").get(key) == value)


def update_user_to_default_pool_map(yt: ytw.YtClient, mapping: dict[str, str]) -> None:
    """YTsaurus's ``update_user_to_default_pool_map``: the scheduler's per-user default parent pools, a document
    at ``//sys/scheduler/user_to_default_pool``, which YTsaurus's test environment creates (applied by the time the
    write returns)."""
    if not yt.exists(USER_TO_DEFAULT_POOL):
        yt.create("document", USER_TO_DEFAULT_POOL, attributes={"value": {}}, force=True)
    yt.set(USER_TO_DEFAULT_POOL, mapping)
