"""Pool naming (§f) and the placement checks shared by a start and a pool change (a part of `PoolTree`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pooltree.errors import PooltreeError
from pooltree.tree.elements import EPHEMERAL_DELIMITER, ROOT_POOL_NAME, PoolElement
from pooltree.tree.values import PoolPlacement, TooManyOperationsError, _option

if TYPE_CHECKING:
    from pooltree.tree.pool_tree import PoolTree


class PoolNaming:
    """Where an operation goes: default parent pools, ephemeral pool names, and the checks before it is placed."""

    def __init__(self, tree: PoolTree) -> None:
        self.tree = tree
        """The tree whose state this part reads and changes (its one owner)."""

    # ------------------------------------------------------------------------------------------ pool naming

    def default_parent_pool(self, user: str) -> PoolElement:
        """The user's default parent pool (§f): user map entry, else tree ``default_parent_pool``, else root."""
        if _option(self.tree.config, "use_user_default_parent_pool_map", False):
            mapped = self.tree.user_default_parent_pools.get(user)
            if mapped is not None:
                pool = self.tree._pools.get(mapped)
                if pool is not None and pool.mode != "fifo":
                    return pool
                self.tree.alerts["invalid_default_parent_pool"] = (
                    f"Default parent pool {mapped!r} of user {user!r} "
                    + ("is a FIFO pool" if pool is not None else "does not exist")
                )
        name = _option(self.tree.config, "default_parent_pool", ROOT_POOL_NAME)
        pool = self.tree._pools.get(name)
        if pool is not None and pool.mode != "fifo":
            return pool
        self.tree.alerts["invalid_default_parent_pool"] = f"Default parent pool {name!r} " + (
            "is a FIFO pool" if pool is not None else "does not exist"
        )
        return self.tree.root

    def _validate_ephemeral_name(self, name: str) -> None:
        for part in name.split(EPHEMERAL_DELIMITER):
            if not self.tree._ephemeral_name_re.fullmatch(part):
                raise PooltreeError(
                    f"Pool name {name!r} must match regular expression {self.tree._ephemeral_name_re.pattern!r}",
                    attributes={"pool": name, "pool_tree": self.tree.name},
                )

    def resolve_pool(self, pool_name: str | None, user: str) -> PoolPlacement:
        """Where an operation of ``user`` asking for ``pool_name`` goes (§f pool naming); validates names only."""
        name = pool_name or user
        if not name:
            raise PooltreeError(
                "Operation has neither a pool nor a user name", attributes={"pool_tree": self.tree.name}
            )
        if name == ROOT_POOL_NAME:
            return PoolPlacement(name, self.tree.root, None, False)
        existing = self.tree._pools.get(name)
        if existing is not None:
            if existing.hosts_ephemeral_subpools:
                if existing.mode == "fifo":
                    raise PooltreeError(
                        f"Pool {name!r} is in FIFO mode and cannot host ephemeral subpools",
                        attributes={"pool": name, "pool_tree": self.tree.name},
                    )
                sub_name = f"{name}{EPHEMERAL_DELIMITER}{user}"
                self._validate_ephemeral_name(sub_name)
                sub = self.tree._pools.get(sub_name)
                return PoolPlacement(sub_name, sub, existing if sub is None else None, False)
            return PoolPlacement(name, existing, None, False)
        self._validate_ephemeral_name(name)
        if EPHEMERAL_DELIMITER in name:
            parent_name = name.rsplit(EPHEMERAL_DELIMITER, 1)[0]
            parent = self.tree._pools.get(parent_name)
            if parent is None:
                raise PooltreeError(
                    f"Parent pool {parent_name!r} of ephemeral pool {name!r} does not exist in tree {self.tree.name!r}",
                    attributes={"pool": name, "pool_tree": self.tree.name},
                )
            if parent.mode == "fifo":
                raise PooltreeError(
                    f"Pool {parent_name!r} is in FIFO mode and cannot host ephemeral subpools",
                    attributes={"pool": parent_name, "pool_tree": self.tree.name},
                )
            return PoolPlacement(name, None, parent, False)
        return PoolPlacement(name, None, self.default_parent_pool(user), True)

    # ----------------------------------------------------------------------------------------------- checks

    def _check_immediate(self, placement: PoolPlacement) -> None:
        pool = placement.pool
        if pool is None:
            return
        if pool.is_root:
            forbidden = bool(_option(self.tree.config, "forbid_immediate_operations_in_root", True))
        else:
            forbidden = pool.config is not None and bool(pool.config.forbid_immediate_operations)
        if forbidden:
            raise PooltreeError(
                f'Starting operations immediately in pool "{pool.name}" is forbidden',
                attributes={"pool": pool.name, "pool_tree": self.tree.name},
            )

    def _check_ephemeral_limit(self, placement: PoolPlacement, user: str) -> None:
        if placement.pool is not None or not placement.in_default_parent:
            return
        limit = int(_option(self.tree.config, "max_ephemeral_pools_per_user", 1))
        existing = self.tree._user_ephemeral_pools.get(user, [])
        if len(existing) + 1 > limit:
            raise PooltreeError(
                f'Cannot create new ephemeral pool "{placement.pool_name}" as limit for number of ephemeral pools '
                f'{limit} for user "{user}" in tree "{self.tree.name}" has been reached; previously created pools are '
                f"[{', '.join(existing)}]",
                attributes={
                    "pool": placement.pool_name,
                    "user": user,
                    "pool_tree": self.tree.name,
                    "limit": limit,
                },
            )

    def _check_placement(self, placement: PoolPlacement, user: str) -> PoolElement:
        """Checks shared by a start and a pool change: forbidden immediate operations and the ephemeral pool limit.

        Returns where the count checks start: the pool, or the parent of a pool still to be created.
        """
        self._check_immediate(placement)
        self._check_ephemeral_limit(placement, user)
        start = placement.pool if placement.pool is not None else placement.parent
        assert start is not None
        return start

    def _check_operation_count(self, start: PoolElement) -> None:
        for element in start.path:
            if element.operation_count >= element.max_operation_count:
                raise TooManyOperationsError(
                    f"Limit for the number of concurrent operations {element.max_operation_count} for pool "
                    f'"{element.name}" in tree "{self.tree.name}" has been reached',
                    attributes={
                        "pool": element.name,
                        "pool_tree": self.tree.name,
                        "limit": element.max_operation_count,
                    },
                )

    def _is_lightweight(self, operation_type: str, pool: PoolElement | None) -> bool:
        return (
            operation_type == "vanilla" and pool is not None and pool.effective_lightweight_operations_enabled
        )


def lowest_violating_pool(pool: PoolElement) -> PoolElement | None:
    """The lowest element on pool → root whose running count has reached its running limit."""
    for element in pool.path:
        if element.running_operation_count >= element.max_running_operation_count:
            return element
    return None
