"""The process's garbage-collector policy: freeze what survives each full (in the live service: each)
collection.

CPython's full (generation 2) collection walks every tracked object. A scheduler process holds hundreds of
thousands of them (a 1,110-pool / 10,000-operation tree: ~420k; with 10,000 queued operations ~670k), nearly all
long-lived, and each fair-share period leaves tens of thousands more alive (new element specs, heap entries), so
a full collection of ~0.2-1 s comes every second or third period and is over half of a period in which usage
moved. As CPython's ``gc.freeze`` documentation suggests for long-lived processes, the policy moves the survivors
of each full collection to the permanent generation, which no collection walks:

* a full collection has just removed the garbage, so what it leaves is alive: freezing it then is safe, and the
  next full collection walks only what was allocated since (CPython starts a full collection only when the
  objects that survived the middle generation since the last one exceed a quarter of those the last one kept,
  so the walks stay proportional to what a period leaves, not to the process);
* short-walk thresholds (``THRESHOLDS``): a middle-generation collection walks at most ~1000 x (5 + 1) objects;
* when the last holder releases the policy, everything is unfrozen and the thresholds are restored.

Two ways to freeze, one policy:

* *at the collection* (``survivors_frozen``, the batch shells: the simulator's run loop and ``pooltree
  fair-share``): the collector's own ``stop`` callback freezes, so a long period that triggers several full
  collections walks each survivor once (``gc.freeze`` only splices the collector's lists; nothing else runs);
* *at the next tick* (``tick``, the live service's loop, ``pooltree.server.gc_tuning``, which also settles after
  revival: one full collection nobody waits for, then a freeze);
* *at every middle collection* too (``middle``, the live service's in sessions 31-37): a middle collection has just removed the
  garbage among the young objects, and its survivors are frozen at its end, so the old generation stays empty and
  a full collection walks no more than a middle one. At 1,000 heartbeats/s beside ~1,000 API requests/s the
  freeze-after-full policy left a full collection about every second, walking the ~20-40k objects (~200k
  references) promoted since the last, 10-55 ms each (up to 160 ms on a loaded machine), a quarter to a third
  of the collector's time (``bench/RESULTS.md``, session 31);
* *at every collection* (``young``, the live service's since session 38, ``POOLTREE_GC_TUNING=1``): a young
  collection's survivors are frozen at its end too, so every object is walked once, in the young generation, and
  no middle collection runs (a freeze resets the generations' counts); then any cycle alive at a young collection
  is the valve's.

The price: a reference cycle among frozen objects that later becomes garbage is not collected (objects freed by
reference counting, i.e. nearly all, are freed as before) until the policy is released or vented. With ``young``
that is any cycle alive at a young collection (one runs every few tens of milliseconds under load, and a cycle
made and dropped within a request is caught when one lands inside it; with ``middle``, at a middle one), not only
at a full one. The live service's paths
make none: ``tests/server/test_gc_tuning.py`` runs heartbeats, starts, updates, publications and the API's and
pages' reads with everything frozen and the collector off, and one collection after them finds nothing (the
Scheduling page's rows made one until session 38). Third-party code still makes some: Plotly's figures (the
History page's chart, the forecast charts: ~1,400 objects a render) and the standard library's Python JSON
encoder (``indent``: a page's pretty-printed spec, 31 objects); the web UI makes them inside ``unfrozen`` blocks,
where no collection freezes, so that they are collected as usual (``tests/web/test_web_pages.py``).

*The valve* (``vent``) bounds what such cycles keep: it unfreezes, collects the whole heap, names what it found
(``Vent``) and freezes what lives again. Its pause is a full collection of every tracked object (``bench/gc_heap.py``
at 1,000 nodes: ~525 ms with 3,000 queued operations, 1.15M objects; ~1.0 s with 10,000, 3.0M objects), so its
holder calls it seldom: the live service when the frozen generation grew by half since the last vent
(``pooltree.server.gc_tuning``), with an alert when a vent found garbage. Collections never change a result:
nothing in the core depends on when an object is collected.

``POOLTREE_GC_TUNING`` in the environment (`MODES`): ``0`` turns the policy off everywhere (for comparisons),
``full`` keeps the live service to freezing full collections' survivors only, ``middle`` to middle and full ones';
any other value than ``0``, ``1``, ``full`` or ``middle`` is a ``ConfigError`` naming the variable.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

from pooltree.errors import ConfigError

ENVIRONMENT = "POOLTREE_GC_TUNING"
THRESHOLDS = (1_000, 5, 2)
VENT_KINDS = 10
"""Types named by a vent that found garbage (the most common among what it found)."""


class Vent(NamedTuple):
    """What one ``GcPolicy.vent`` found and cost."""

    found: int
    """Objects a full collection found unreachable once everything was unfrozen: reference cycles the policy had
    frozen (and objects only they held), which no collection would otherwise have reclaimed."""
    kinds: tuple[tuple[str, int], ...]
    """The most common types among them (``VENT_KINDS`` at most; empty when none were found)."""
    seconds: float
    """The vent's pause: its collections' wall time, every thread stopped (they hold the GIL)."""


MODES = ("0", "1", "full", "middle")
"""``POOLTREE_GC_TUNING``'s values: off; on (the live service freezes every collection's survivors, young ones too,
``GcPolicy.acquire``'s ``young``: the default since session 38, ``bench/RESULTS.md``); on with only full
collections' survivors frozen (the policy before session 31); on with middle and full collections' survivors
frozen (``middle``, sessions 31-37's default). The last two are kept for comparisons and for a workload whose
longer-lived garbage forms cycles."""


def tuning_mode(environ: Mapping[str, str] | None = None) -> str:
    """``POOLTREE_GC_TUNING``: one of `MODES` (``1`` by default); anything else is a ``ConfigError`` naming it."""
    value = (os.environ if environ is None else environ).get(ENVIRONMENT, "1").strip()
    if value not in MODES:
        raise ConfigError(ENVIRONMENT, f"must be 0, 1, full or middle, got {value!r}")
    return value


def tuning_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``POOLTREE_GC_TUNING`` (`tuning_mode`) turns the policy on (``1``, ``full`` or ``middle``)."""
    return tuning_mode(environ) != "0"


class GcPolicy:
    """The freezing policy of the process (the collector is per process, so is this: use ``POLICY``).

    Holders ``acquire`` and ``release`` it (counted, so a simulator run inside a tuned service neither tunes twice
    nor undoes the service's tuning); while one holder freezes at the collection, every full collection's
    survivors are frozen at once, else they are frozen at the next ``tick``; while one holder asks for ``middle``,
    every middle and full collection's survivors are frozen at once.
    """

    def __init__(self) -> None:
        self.freezes = 0
        self.full_collections = 0
        """Full collections seen while held (``settle``'s own not counted)."""
        self.middle_freezes = 0
        """Freezes at the end of a middle collection (holders with ``middle``)."""
        self.young_freezes = 0
        """Freezes at the end of a young collection (holders with ``young``)."""
        self.vents = 0
        """``vent`` calls while held."""
        self._holders = 0
        self._immediate = 0
        self._middle = 0
        self._young = 0
        self._due = False
        self._settling = False
        self._unfrozen = 0
        """Blocks in ``unfrozen`` running now (any thread); ``_unfrozen_lock`` guards the count."""
        self._unfrozen_reach = -1
        """The oldest generation the blocks' objects may be in: one older than the oldest collected meanwhile
        (-1: no collection ran in them)."""
        self._unfrozen_lock = threading.Lock()
        self._saved_thresholds: tuple[int, int, int] | None = None

    @property
    def held(self) -> bool:
        return self._holders > 0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or self._settling:
            return
        generation = info.get("generation")
        if self._unfrozen:
            self._unfrozen_reach = max(self._unfrozen_reach, min(int(generation or 0) + 1, 2))
            return
        if generation == 0 and self._young:
            gc.freeze()  # the survivors of a young collection (a freeze also resets the older generations' counts)
            self.freezes += 1
            self.young_freezes += 1
            return
        if generation == 1 and (self._middle or self._young):
            gc.freeze()  # the survivors of a middle collection (the young generation is empty at its end)
            self.freezes += 1
            self.middle_freezes += 1
            return
        if generation != 2:
            return
        self.full_collections += 1
        if self._immediate or self._middle or self._young:
            gc.freeze()  # the collector's lists are consistent at "stop"; freeze only splices them
            self.freezes += 1
        else:
            self._due = True

    def acquire(self, *, at_collection: bool, middle: bool = False, young: bool = False) -> None:
        """Hold the policy: the first holder installs the callback and the thresholds. ``at_collection``: freeze
        a full collection's survivors from the collector's callback (else at the next ``tick``). ``middle``: also
        freeze the survivors of every middle collection from the callback (and a full one's at once), so no
        full collection walks more than a middle one does (``POOLTREE_GC_TUNING=middle``).
        ``young``: freeze the survivors of every collection, young ones too, so each object is walked once
        (the live service's, ``POOLTREE_GC_TUNING=1``)."""
        if self._holders == 0:
            self._saved_thresholds = gc.get_threshold()
            gc.callbacks.append(self._callback)
            gc.set_threshold(*THRESHOLDS)
        self._holders += 1
        if at_collection:
            self._immediate += 1
        if middle:
            self._middle += 1
        if young:
            self._young += 1

    def release(self, *, at_collection: bool, middle: bool = False, young: bool = False) -> None:
        """Undo one ``acquire`` (with the same ``at_collection``, ``middle`` and ``young``); the last one unfreezes
        everything and restores the thresholds."""
        if self._holders == 0:
            return
        self._holders -= 1
        if at_collection and self._immediate:
            self._immediate -= 1
        if middle and self._middle:
            self._middle -= 1
        if young and self._young:
            self._young -= 1
        if self._holders:
            return
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
        gc.unfreeze()
        if self._saved_thresholds is not None:
            gc.set_threshold(*self._saved_thresholds)
            self._saved_thresholds = None
        self._due = False

    def settle(self) -> None:
        """One full collection now (at a moment nobody waits for), then freeze what survives."""
        self._settling = True
        try:
            gc.collect()
        finally:
            self._settling = False
        gc.freeze()
        self.freezes += 1
        self._due = False

    def vent(self) -> Vent:
        """The valve (while held): reclaim the reference cycles the policy froze. One full collection of what is
        not frozen (so that what the next one finds had been frozen), everything unfrozen, a full collection of the
        whole heap (with ``DEBUG_SAVEALL``, so that what it finds can be named; when it finds something, that is
        named, let go and collected once more), everything frozen again. No freeze happens from the callback in
        between. The pause is a full collection of every tracked object (``bench/gc_heap.py``'s ``vent``), and one
        more when garbage was found; who calls it decides how seldom (``pooltree.server.gc_tuning``)."""
        if not self._holders:
            return Vent(0, (), 0.0)
        began = time.perf_counter()
        debug = gc.get_debug()
        kept = len(gc.garbage)
        kinds: tuple[tuple[str, int], ...] = ()
        self._settling = True
        try:
            gc.collect()
            gc.unfreeze()
            gc.set_debug(debug | gc.DEBUG_SAVEALL)
            try:
                found = gc.collect()
            finally:
                gc.set_debug(debug)
            if found:
                saved = gc.garbage[kept:]
                kinds = tuple(
                    Counter(type(garbage).__qualname__ for garbage in saved).most_common(VENT_KINDS)
                )
                del gc.garbage[kept:]
                del saved
                gc.collect()  # saved only to be named: now unreachable again
        finally:
            self._settling = False
        gc.freeze()
        self.freezes += 1
        self.vents += 1
        self._due = False
        return Vent(found, kinds, time.perf_counter() - began)

    @contextmanager
    def unfrozen(self) -> Iterator[None]:
        """No collection freezes its survivors while the block runs (in any thread). For code that makes reference
        cycles and drops them at its end, third-party code among it (Plotly's figure objects, the standard
        library's Python JSON encoder): a collection inside the block would freeze them alive and only a vent
        would get them back. When the last block ends after collections ran in it, the generations its objects
        were promoted to are collected (what is not frozen: objects made since the last freeze, a middle
        collection's walk or a few times it), which frees the blocks' cycles and freezes what lives as usual."""
        with self._unfrozen_lock:
            self._unfrozen += 1
        try:
            yield
        finally:
            with self._unfrozen_lock:
                self._unfrozen -= 1
                reach = -1
                if not self._unfrozen:
                    reach, self._unfrozen_reach = self._unfrozen_reach, -1
            if reach >= 0 and self._holders:
                # the blocks' objects were promoted: collect the generations they may be in (only what is not
                # frozen, i.e. what was made since the last freeze), which then freezes the survivors as usual
                gc.collect(reach)

    def tick(self) -> bool:
        """Freeze the survivors of the full collection that ran since the last tick (cheap: a list splice);
        whether it froze."""
        if not (self._due and self._holders):
            return False
        self._due = False
        gc.freeze()
        self.freezes += 1
        return True


POLICY = GcPolicy()


@contextmanager
def survivors_frozen(environ: Mapping[str, str] | None = None) -> Iterator[bool]:
    """Hold ``POLICY`` (freezing at each full collection) for the block, unless ``POOLTREE_GC_TUNING=0``; yields
    whether it does. Also a decorator: ``@survivors_frozen()`` (the environment is read at each call)."""
    if not tuning_enabled(environ):
        yield False
        return
    POLICY.acquire(at_collection=True)
    try:
        yield True
    finally:
        POLICY.release(at_collection=True)
