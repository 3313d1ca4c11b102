"""The pool history reads a tree's pools (assembled from the capture of the update's view) only when it takes a
sample: one in ``period`` seconds, not at every fair-share update, and never the whole view (its operations' entries
are most of it: the sample is taken under the lock, ``ViewCapture.pools_view``). The read snapshot published with
every update captures the view's inputs, never assembles it: readers do, off the lock (``live/snapshot.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pooltree.config import parse_pool_trees
from pooltree.server.live import LiveScheduler, views
from pooltree.server.store import open_store
from pooltree.web.history import PoolHistory


def test_a_view_is_built_only_for_the_samples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    pools_built: list[int] = []
    assemble_view = views.assemble_view
    assemble_pools = views.assemble_pools

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        built.append(1)
        return assemble_view(*args, **kwargs)

    def counting_pools(*args, **kwargs):  # type: ignore[no-untyped-def]
        pools_built.append(1)
        return assemble_pools(*args, **kwargs)

    monkeypatch.setattr(views, "assemble_view", counting)
    monkeypatch.setattr(views, "assemble_pools", counting_pools)
    scheduler = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'history.db'}"))
    scheduler.apply_pool_trees(parse_pool_trees({"default": {"pools": {"a": {}}}}), None, 0.0)
    history = PoolHistory(period=10.0)
    history.attach(scheduler)
    for second in range(1, 31):  # a fair-share update every second
        scheduler.update_fair_share("default", float(second))
    assert [sample.time for sample in history.trees["default"].samples] == [1.0, 11.0, 21.0]
    assert len(pools_built) == 3
    assert "default" in scheduler.views and "other" not in scheduler.views
    assert len(pools_built) == 3  # telling whether a tree has a view builds none
    assert scheduler.snapshots.published >= 30  # every update published a snapshot
    assert built == []  # and no view was assembled, for the samples either
