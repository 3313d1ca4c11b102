"""Which elements' inputs were written since an update read them (issue 16): the hint that lets the next update of
the same tree read only those elements (``inputs._read_inputs``) instead of every element's fields.

The hint is not a promise made by a caller: it is kept by the elements themselves. ``JournaledOperation`` and
``JournaledPool`` (the elements the tree runtime's ``FairShareInputCache`` builds) record every attribute write in
their ``InputJournal`` (``__setattr__``), whoever writes; the root carries the journal. What an attribute write
cannot see is made impossible or visible instead:

- an array written in place: every array value is made read-only when it is set (a copy is taken of a view, whose
  base could still be written), so an in-place write raises ``ValueError`` instead of desynchronising;
- integral guarantees changed in place: the builder's are ``SealedIntegralGuarantees`` (attribute writes raise);
- any other mutable value (a list, a plain ``IntegralGuarantees``, ...): the element is *volatile* and is read by
  every update, as if written each time. A pool's ``children`` list is the exception: the layout compares every
  pool's children with its tree's every update (``layout._flatten``).

An update takes the hint only for a root whose ``journal`` is the one of the elements it read in full before, and
only when every element of the tree belongs to that journal; everyone else (plain ``Operation``/``Pool`` objects,
deep copies, a journal that forgot) gets the full read. ``object.__setattr__`` bypasses the record: nothing in
pooltree does that to an element (``tests/fairshare/test_update_journal.py`` shows a missed record is caught).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pooltree.fairshare.model import IntegralGuarantees, Operation, Pool

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


class SealedIntegralGuarantees(IntegralGuarantees):
    """``IntegralGuarantees`` that refuse attribute writes once made: a journaled pool's (a change is a new object set
    on the pool, which records it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for name, value in vars(IntegralGuarantees(*args, **kwargs)).items():
            _set(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"integral_guarantees.{name}: a journaled pool's integral guarantees cannot be changed in place; "
            "set a new IntegralGuarantees on the pool"
        )


_SETTLED = _IMMUTABLE | {SealedIntegralGuarantees}


def _volatile_value(name: str, value: Any) -> bool:
    """Whether an element's value can change in place without an attribute write (arrays are made read-only). A
    pool's ``children`` list is not: every update compares the children with its tree's (``layout._flatten``)."""
    kind = type(value)
    if kind in _SETTLED or isinstance(value, np.generic) or name == "children":
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
    elif kind not in _SETTLED and journal is not None and _volatile_value(name, value):
        journal.volatile.add(self)
    _set(self, name, value)
    if journal is not None:
        journal.record(self)  # also when ``journal`` itself is set: the journal it leaves records it


class _SlotState:
    """Pickle and copy state of a journaled element: the values of its slots (``_state_slots``, set per class), set
    back without recording (``__setattr__`` would record them in a journal that is not the element's yet)."""

    __slots__ = ()
    _state_slots: tuple[str, ...] = ()

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._state_slots)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self._state_slots, state, strict=True):
            _set(self, name, value)


class JournaledOperation(_SlotState, Operation):
    """An ``Operation`` whose attribute writes are recorded in ``journal`` and whose arrays are read-only."""

    __slots__ = ("journal",)

    def __init__(self, *args: Any, journal: InputJournal | None = None, **kwargs: Any) -> None:
        _set(self, "journal", journal)
        Operation.__init__(self, *args, **kwargs)

    __setattr__ = _recorded_setattr


class JournaledPool(_SlotState, Pool):
    """A ``Pool`` whose attribute writes are recorded in ``journal`` and whose arrays are read-only; the root of a
    journaled model carries the journal the update looks for. Its integral guarantees must be sealed
    (``SealedIntegralGuarantees``), else the pool is volatile."""

    __slots__ = ("journal",)

    def __init__(self, *args: Any, journal: InputJournal | None = None, **kwargs: Any) -> None:
        _set(self, "journal", journal)
        Pool.__init__(self, *args, **kwargs)

    __setattr__ = _recorded_setattr


JournaledOperation._state_slots = tuple(_slot_names(JournaledOperation))
JournaledPool._state_slots = tuple(_slot_names(JournaledPool))
