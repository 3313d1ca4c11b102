"""Per-node indexes of the live scheduler: running jobs by node, and the nodes holding revived reservations.

A heartbeat touches only what its node reports: ``RunningJobs.on_node(address)`` gives that node's running jobs
without a walk over every job, and ``Reservations.operations_on(address)`` the operations holding revived jobs
for it without a walk over every operation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from pooltree.server.live.model import LiveJob

_MISSING: Any = object()
_EMPTY: dict[str, LiveJob] = {}
"""``node_index`` of a node without running jobs (never changed)."""


class RunningJobs(MutableMapping[str, LiveJob]):
    """Running jobs by id (a mapping), also indexed by their node's address.

    A job's address never changes while it runs, so the node index follows every insert and removal.
    """

    def __init__(self) -> None:
        self._by_id: dict[str, LiveJob] = {}
        self._by_node: dict[str, dict[str, LiveJob]] = {}

    def __getitem__(self, job_id: str) -> LiveJob:
        return self._by_id[job_id]

    def get(self, job_id: str, default: LiveJob | None = None) -> LiveJob | None:  # type: ignore[override]
        return self._by_id.get(job_id, default)

    def finder(self) -> Callable[[str], LiveJob | None]:
        """``get`` as the index dict's own method, for a loop that looks up many ids (a heartbeat's running
        reports): no Python call per id. Valid while the loop runs (the index dict is never replaced)."""
        return self._by_id.get

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._by_id

    def __setitem__(self, job_id: str, job: LiveJob) -> None:
        old = self._by_id.get(job_id)
        if old is not None:
            self._unindex(old)
        self._by_id[job_id] = job
        on_node = self._by_node.get(job.address)
        if on_node is None:  # (``setdefault`` would make an empty map a call, a start, to drop it)
            on_node = self._by_node[job.address] = {}
        on_node[job_id] = job

    def __delitem__(self, job_id: str) -> None:
        self._unindex(self._by_id.pop(job_id))

    def pop(self, job_id: str, default: Any = _MISSING) -> Any:
        """``MutableMapping.pop`` in one call (a finished job's, once per finish): its generic version looks the
        id up twice and deletes through ``__delitem__``; the node's index is left as ``__delitem__`` leaves it."""
        job = self._by_id.pop(job_id, None)
        if job is None:
            if default is _MISSING:
                raise KeyError(job_id)
            return default
        self._unindex(job)
        return job

    def _unindex(self, job: LiveJob) -> None:
        on_node = self._by_node.get(job.address)
        if on_node is not None:
            on_node.pop(job.id, None)
            if not on_node:
                del self._by_node[job.address]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def count_on_node(self, address: str) -> int:
        """How many jobs run on ``address``."""
        on_node = self._by_node.get(address)
        return 0 if on_node is None else len(on_node)

    def counts_by_node(self) -> dict[str, int]:
        """How many jobs run on each node running some (``count_on_node`` of them all, in C-level passes)."""
        by_node = self._by_node
        return dict(zip(by_node, map(len, by_node.values()), strict=True))

    def node_index(self, address: str) -> dict[str, LiveJob]:
        """The jobs running on ``address`` by id: the index's own dict, to read (not to keep or change) while
        nothing is added to or removed from the index. A heartbeat's running reports look their jobs up here: the
        node's few jobs, whose entries its finished reports have just touched, cost a fraction of a lookup among
        every running job (``LiveJobs._take_running_reports``)."""
        return self._by_node.get(address) or _EMPTY

    def on_node(self, address: str) -> list[LiveJob]:
        """The jobs running on ``address`` (a list: callers may change the index while they walk it)."""
        return list(self._by_node.get(address, {}).values())


class Reservations:
    """Which operations hold revived jobs reserved for which node (``LiveVanillaController.reserve``).

    An entry may outlive its reservations (a node's schedule took them); readers check the controller."""

    def __init__(self) -> None:
        self._operations: dict[str, set[str]] = {}

    def add(self, address: str, operation_id: str) -> None:
        self._operations.setdefault(address, set()).add(operation_id)

    def operations_on(self, address: str) -> list[str]:
        return sorted(self._operations.get(address, ()))

    def held_for(self, address: str) -> bool:
        """Whether some operation may hold revived jobs for ``address`` (``operations_on`` is not empty)."""
        return address in self._operations

    def discard(self, address: str, operation_id: str) -> None:
        operations = self._operations.get(address)
        if operations is not None:
            operations.discard(operation_id)
            if not operations:
                del self._operations[address]
