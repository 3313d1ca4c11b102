"""Operation aliases, as YTsaurus has them: a spec's ``alias`` (``*name``) names the operation for
``get_operation``, ``abort_operation`` and the other operation commands (``operation_alias`` instead of
``operation_id``).

The rules, restated from YTsaurus (the operation spec's postprocessor, the scheduler's alias registration and
the clients that rely on them, e.g. CHYT's controller, which starts a clique again when its alias is free):

* an alias starts with ``*`` ("Operation alias should start with \"*\"");
* while an operation holding an alias has not finished, another start with that alias is refused ("... alias
  is already used by an operation", naming the holder's ``operation_id``);
* once it has finished, the alias passes to the next operation started with it; until then it still names the
  finished one (``get_operation`` of a finished clique by its alias works).

``OperationAliases`` keeps ``alias -> the latest operation that took it``. The leader fills it from the store on
first use (one scan; a new leader after a failover does the same), then each start updates it. A command naming
``operation_alias`` is resolved once, before it is authorized (``resolve``, called by the request pipeline for
every command and every command of a batch), so the authorization and the handler act on the same operation id.
"""

from __future__ import annotations

import threading
from collections.abc import MutableMapping
from typing import Any, Protocol

from pooltree.errors import YtError
from pooltree.server.live.scheduler import ALL_OPERATIONS
from pooltree.server.store import OperationFilter

ALIAS_PREFIX = "*"
NO_SUCH_OPERATION = 1915


class _Operations(Protocol):
    """What the index reads: the live operations (id -> an object with ``state``, ``is_final``, ``spec``) and
    the store's operation records (``id``, ``spec``, ``start_time``)."""

    operations: Any
    store: Any


def check_alias(value: Any, field: str) -> str:
    """A valid alias, else a YTsaurus-style error naming ``field``."""
    if not isinstance(value, str) or not value.startswith(ALIAS_PREFIX) or len(value) < 2:
        raise YtError(
            f'Operation alias should start with "{ALIAS_PREFIX}"',
            attributes={"operation_alias": value, "field": field},
        )
    return value


class OperationAliases:
    """``alias -> operation id`` of the latest operation started with it."""

    def __init__(self, scheduler: _Operations) -> None:
        self._scheduler = scheduler
        self.lock = threading.RLock()
        """Held by a start from ``free`` to ``taken``, and by every read of the index."""
        self._index: dict[str, tuple[float, str]] | None = None
        """alias -> (start time, operation id); None until first read from the store."""

    def _loaded(self) -> dict[str, tuple[float, str]]:
        if self._index is None:
            index: dict[str, tuple[float, str]] = {}
            for record in self._scheduler.store.list_operations(OperationFilter(limit=ALL_OPERATIONS)):
                alias = (record.spec or {}).get("alias")
                if isinstance(alias, str) and (alias not in index or index[alias][0] <= record.start_time):
                    index[alias] = (record.start_time, record.id)
            self._index = index
        return self._index

    def operation_id(self, alias: str) -> str | None:
        """The operation ``alias`` names now, or None."""
        with self.lock:
            found = self._loaded().get(alias)
        return None if found is None else found[1]

    def resolve(self, parameters: MutableMapping[str, Any]) -> None:
        """A command naming ``operation_alias`` (and no ``operation_id``) gets the ``operation_id`` it names."""
        if "operation_alias" not in parameters or parameters.get("operation_id") is not None:
            return
        alias = check_alias(parameters["operation_alias"], "operation_alias")
        operation_id = self.operation_id(alias)
        if operation_id is None:
            raise YtError(
                f"No such operation {alias}",
                code=NO_SUCH_OPERATION,
                attributes={"operation_alias": alias},
            )
        parameters["operation_id"] = operation_id

    def free(self, spec: dict[str, Any]) -> str | None:
        """A start's alias (None without one), checked and free: its holder, if any, has finished. Call with
        ``lock`` held until ``taken``, so two starts cannot both find an alias free."""
        alias = spec.get("alias")
        if alias is None:
            return None
        check_alias(alias, "spec.alias")
        holder = self._loaded().get(alias)
        if holder is not None:
            live = self._scheduler.operations.get(holder[1])
            if live is not None and not live.is_final:
                raise YtError(
                    f'Operation alias "{alias}" is already used by an operation {holder[1]}',
                    attributes={"operation_alias": alias, "operation_id": holder[1]},
                )
        return alias

    def taken(self, alias: str, operation_id: str, start_time: float) -> None:
        """``alias`` names ``operation_id`` from now on (its start succeeded)."""
        self._loaded()[alias] = (start_time, operation_id)
