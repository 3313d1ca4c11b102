"""The live scheduler service: YTsaurus HTTP API v4 subset, a virtual Cypress and the persistent store.

- :func:`create_app` builds the ASGI app; :class:`CommandRegistry` lets later layers add commands.
- :class:`Cypress` is the virtual tree over ``//sys/pool_trees`` with whole-tree validation.
- :func:`open_store` opens the SQLite (default) or PostgreSQL :class:`Store`.
"""

from pooltree.server.app import create_app
from pooltree.server.commands import CommandContext, CommandDescriptor, CommandProvider, CommandRegistry
from pooltree.server.cypress import Cypress, OrchidProvider, PoolTreesChange
from pooltree.server.protocol import YtError
from pooltree.server.store import JobRecord, OperationFilter, OperationRecord, Store, StoreError, open_store

__all__ = [
    "CommandContext",
    "CommandDescriptor",
    "CommandProvider",
    "CommandRegistry",
    "Cypress",
    "JobRecord",
    "OperationFilter",
    "OperationRecord",
    "OrchidProvider",
    "PoolTreesChange",
    "Store",
    "StoreError",
    "YtError",
    "create_app",
    "open_store",
]
