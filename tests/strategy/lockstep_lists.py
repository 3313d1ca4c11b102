"""Preemptible lists driven by the same steps together: the tests that compare a faster path of the lists with the
plain one (`test_preemptible_incremental`, `test_preemptible_open`, `test_preemptible_second_pass`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pooltree.strategy import Allocation, PreemptibleLists


class Lockstep:
    """Lists (one per implementation compared) that take every add, removal, usage change, replacement and new
    fair share together. ``running``
    holds each live allocation as its copies, one per list, in the order added."""

    def __init__(self, lists: Sequence[PreemptibleLists]) -> None:
        self.lists = tuple(lists)
        self.running: list[tuple[Allocation, ...]] = []

    def add(self, name: str, amounts: np.ndarray, start_time: float) -> None:
        """A new allocation in every list (each list its own copy)."""
        copies = tuple(Allocation(name, "op", amounts.copy(), start_time=start_time) for _ in self.lists)
        for lists, allocation in zip(self.lists, copies, strict=True):
            lists.add(allocation)
        self.running.append(copies)

    def remove(self, pick: int) -> None:
        """The running allocation ``pick`` (modulo their number) removed from every list."""
        copies = self.running.pop(pick % len(self.running))
        for lists, allocation in zip(self.lists, copies, strict=True):
            assert lists.remove(allocation)

    def resize(self, pick: int, amounts: np.ndarray) -> None:
        """The running allocation ``pick`` (modulo their number) using ``amounts`` in every list."""
        copies = self.running[pick % len(self.running)]
        for lists, allocation in zip(self.lists, copies, strict=True):
            lists.update_usage(allocation, amounts)

    def replace(self, pick: int, name: str, amounts: np.ndarray, start_time: float) -> None:
        """The running allocation ``pick`` (modulo their number) replaced in its place by a new one in every list
        (a gang's job restarted in its allocation; each list its own copy)."""
        place = pick % len(self.running)
        copies = tuple(Allocation(name, "op", amounts.copy(), start_time=start_time) for _ in self.lists)
        for lists, old, allocation in zip(self.lists, self.running[place], copies, strict=True):
            lists.replace(old, allocation)
        self.running[place] = copies

    def reconfigure(self, *configuration: Any) -> None:
        """A new fair share (``PreemptibleLists.configure``'s arguments) in every list, each rebalanced."""
        for lists in self.lists:
            lists.configure(*configuration)
            lists.rebalance()
