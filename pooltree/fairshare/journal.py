"""Which operations' inputs were written since an update read them (issue 16): the hint that lets the next update of
the same tree read only those operations (``inputs._Inputs._read_inputs``) instead of every operation's fields.

The hint is not a promise made by a caller: it is kept by the elements themselves. ``JournaledOperation`` (the
operations the tree runtime's ``FairShareInputCache`` builds) records every attribute write in its
``InputJournal`` (``__setattr__``), whoever writes; the root (a ``JournaledPool``) carries the journal. What an
attribute write cannot see is made impossible or visible instead:

- an array written in place: every array value is made read-only when it is set (a copy is taken of a view, whose
  base could still be written), so an in-place write raises ``ValueError`` instead of desynchronising;
- any other mutable value (a list, ...): the operation is *volatile* and is read by every update, as if written
  each time.

Pools are read by every update (about a tenth of the elements), so the hint covers operations only.

An update takes the hint only for a root whose ``journal`` is the one of the elements it read in full before, and
only when every operation of the tree belongs to that journal; everyone else (plain ``Operation``/``Pool`` objects,
deep copies, a journal that forgot) gets the full read. ``object.__setattr__`` bypasses the record: nothing in
pooltree does that to an element (``tests/fairshare/test_update_journal.py`` shows a missed record is caught).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pooltree.fairshare.model import Operation, Pool

_IMMUTABLE = frozenset({type(None), bool, int, float, str, frozenset})
_set = object.__setattr__

JOURNAL_LIMIT = 1 << 16
"""Records kept before the journal forgets them all (readers that had not caught up then read in full): a walk of
the whole tree writes every element, and nobody may be reading."""


class InputJournal:
    """Elements written, in order, since some position; ``volatile`` elements count as written at every position.

    Kept by the one builder of a tree's model (``FairShareInputCache.journal``), shared by its elements and root.
    """

    __slots__ = ("_start", "_written", "volatile")

    def __init__(self) -> None:
        self._start = 0  # the position of ``_written[0]``
        self._written: list[Any] = []
        self.volatile: set[Any] = set()  # elements holding a value that can change in place (never forgotten)

    @property
    def position(self) -> int:
        """The position after the last record (what a reader that has read everything keeps)."""
        return self._start + len(self._written)

    def record(self, element: Any) -> None:
        written = self._written
        written.append(element)
        if len(written) > JOURNAL_LIMIT:
            self._start += len(written)
            self._written = []

    def written_since(self, position: int) -> list[Any] | None:
        """Elements written after ``position`` and the volatile ones (repeats possible), or None when the journal
        no longer reaches back to ``position`` (or ``position`` is not one of its own): read everything."""
        offset = position - self._start
        if offset < 0 or offset > len(self._written):
            return None
        if self.volatile:
            return [*self._written[offset:], *self.volatile]
        return self._written[offset:]

    def __getstate__(self) -> tuple[int, set[Any]]:
        # A copy (pickle, deepcopy) keeps the position but not the records: readers of the original that were behind
        # it read everything.
        return self.position, self.volatile

    def __setstate__(self, state: tuple[int, set[Any]]) -> None:
        self._start, self.volatile = state
        self._written = []


def _volatile_value(value: Any) -> bool:
    """Whether an element's value can change in place without an attribute write (arrays are made read-only)."""
    kind = type(value)
    if kind in _IMMUTABLE or isinstance(value, np.generic):
        return False
    return not (kind is tuple and all(type(item) in _IMMUTABLE for item in value))


def _slot_names(cls: type) -> list[str]:
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        slots = klass.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    return [name for name in names if name not in ("__dict__", "__weakref__")]


def _recorded_setattr(self: Any, name: str, value: Any) -> None:
    """Set ``name``, recorded in the element's journal: an array value read-only (a view becomes a read-only copy,
    its base could still be written), a value of another mutable type making the element volatile."""
    journal = self.journal
    kind = type(value)
    if kind is np.ndarray:
        if value.base is not None:
            value = value.copy()
        value.flags.writeable = False
    elif kind not in _IMMUTABLE and journal is not None and _volatile_value(value):
        journal.volatile.add(self)
    _set(self, name, value)
    if journal is not None:
        journal.record(self)  # also when ``journal`` itself is set: the journal it leaves records it


class JournaledOperation(Operation):
    """An ``Operation`` whose attribute writes are recorded in ``journal`` and whose arrays are read-only."""

    __slots__ = ("journal",)

    def __init__(self, *args: Any, journal: InputJournal | None = None, **kwargs: Any) -> None:
        object.__setattr__(self, "journal", journal)
        Operation.__init__(self, *args, **kwargs)

    __setattr__ = _recorded_setattr

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in _OPERATION_SLOTS)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(_OPERATION_SLOTS, state, strict=True):
            object.__setattr__(self, name, value)


class JournaledPool(Pool):
    """A ``Pool`` carrying the journal of the operations below it (the root of a journaled model). Pools are read by
    every update, so their writes need no record."""

    __slots__ = ("journal",)

    def __init__(self, *args: Any, journal: InputJournal | None = None, **kwargs: Any) -> None:
        self.journal = journal
        Pool.__init__(self, *args, **kwargs)


_OPERATION_SLOTS = _slot_names(JournaledOperation)
