"""Pickling helpers of `day_slice.py`'s checkpoints (a module of its own so that pickles name it, not ``__main__``).

Importing it registers a ``copyreg`` reducer for weak references (``SchedulingTree.respecced`` holds one): a live
reference is rebuilt to the same unpickled object, a dead one as a dead reference. `Pickler` writes pooltree objects
with `_tolerant_setstate`, which drops attributes the loading revision's classes no longer hold (see `DROPPED`).
"""

from __future__ import annotations

import copyreg
import pickle
import weakref
from collections.abc import Callable
from typing import Any


class _Gone:
    """A referent that dies at once: the target of an unpickled dead weak reference."""


def _dead_ref() -> weakref.ref[Any]:
    return weakref.ref(_Gone())


def _reduce_ref(ref: weakref.ref[Any]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    target = ref()
    return (_dead_ref, ()) if target is None else (weakref.ref, (target,))


copyreg.pickle(weakref.ReferenceType, _reduce_ref)


DROPPED: set[str] = set()
"""``Class.attribute`` of checkpointed state that the loading code's classes no longer have (dropped on load)."""


def _tolerant_setstate(obj: Any, state: Any) -> None:
    """Restore a pooltree object's attributes, dropping those its class (on the loading revision) cannot hold.

    A checkpoint made before a slot or attribute was removed still loads; one made before an attribute was added
    loads too, but code reading the new attribute fails (then make a new checkpoint)."""
    attributes, slots = state if isinstance(state, tuple) and len(state) == 2 else (state, None)
    for values in (attributes, slots):
        if not values:
            continue
        if values is attributes and hasattr(obj, "__dict__"):
            obj.__dict__.update(values)
            continue
        for name, value in values.items():
            try:
                object.__setattr__(obj, name, value)
            except AttributeError:
                DROPPED.add(f"{type(obj).__qualname__}.{name}")


class Pickler(pickle.Pickler):
    """Pickles pooltree objects with `_tolerant_setstate` as their state setter (everything else as usual)."""

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        if (
            not cls.__module__.startswith("pooltree.")
            or isinstance(obj, type)
            or hasattr(cls, "__setstate__")
        ):
            return NotImplemented
        reduced = obj.__reduce_ex__(5)
        if not isinstance(reduced, tuple) or len(reduced) < 3 or reduced[2] is None:
            return NotImplemented
        if len(reduced) == 6 and reduced[5] is not None:
            return NotImplemented
        rest = reduced[3:5] + (None,) * (5 - len(reduced))
        return (reduced[0], reduced[1], reduced[2], *rest, _tolerant_setstate)
