"""``POOLTREE_CHECKPOINT_FRAMES`` sets the frames past which the SQLite store copies its log into the database file
(``SqliteStore.checkpoint_frames``), SQLite's own checkpoint twice as far when that is past its default, and
an override that is not a whole number in range is refused with a warning naming it."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import pytest

from pooltree.server.knobs import count_override
from pooltree.server.store import JobRecord, open_store
from pooltree.server.store.sqlite import AUTOCHECKPOINT_FRAMES, CHECKPOINT_FRAMES, SqliteStore

BODY = {"pad": "x" * 300}


def _open(database: Path) -> SqliteStore:
    store = open_store(f"sqlite:///{database}")
    assert isinstance(store, SqliteStore)
    return store


def _frames(store: SqliteStore) -> tuple[int, int]:
    """(the log's frames, those copied), read from the ``-shm`` index's header, not by the store's reading."""
    with store.path.with_name(store.path.name + "-shm").open("rb") as handle:
        head = handle.read(100)
    return struct.unpack_from("=I", head, 16)[0], struct.unpack_from("=I", head, 96)[0]


def _rows(first: int, count: int) -> list[JobRecord]:
    return [
        JobRecord("op-1", f"job-{first + k}", "running", "node-1", 1.0, None, None, BODY)
        for k in range(count)
    ]


def test_the_override_and_its_refusals(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("POOLTREE_TEST_COUNT", raising=False)
    assert count_override("POOLTREE_TEST_COUNT", 7, 1, 10) == 7
    monkeypatch.setenv("POOLTREE_TEST_COUNT", "10")
    assert count_override("POOLTREE_TEST_COUNT", 7, 1, 10) == 10
    for bad in ("0", "11", "2.5", "many", "", "-3"):
        monkeypatch.setenv("POOLTREE_TEST_COUNT", bad)
        with caplog.at_level(logging.WARNING, logger="pooltree.server.knobs"):
            caplog.clear()
            assert count_override("POOLTREE_TEST_COUNT", 7, 1, 10) == 7
        assert f"POOLTREE_TEST_COUNT={bad!r} is not a whole number in [1, 10]" in caplog.text


def test_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POOLTREE_CHECKPOINT_FRAMES", raising=False)
    store = _open(tmp_path / "scheduler.db")
    try:
        assert store.checkpoint_frames == CHECKPOINT_FRAMES
        expected = max(AUTOCHECKPOINT_FRAMES, 2 * CHECKPOINT_FRAMES)
        assert store.autocheckpoint_frames == expected
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == expected
    finally:
        store.close()


@pytest.mark.parametrize("frames", [64, 2048])
def test_the_store_checkpoints_at_the_frames_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, frames: int
) -> None:
    """Writes of 10 rows each, the store's checkpoint after each (as the group commit's thread runs it): no
    checkpoint copies before ``frames`` frames wait, and one does once they do; SQLite's own bound is twice as far
    (or its default), so it never copies first."""
    monkeypatch.setenv("POOLTREE_CHECKPOINT_FRAMES", str(frames))
    store = _open(tmp_path / "scheduler.db")
    try:
        assert store.checkpoint_frames == frames
        autocheckpoint = max(AUTOCHECKPOINT_FRAMES, 2 * frames)
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == autocheckpoint
        first, copied_at = 0, []
        while store.checkpoints < 3 and first < 200_000:
            store.put_jobs(_rows(first, 10))
            first += 10
            waiting = _frames(store)
            assert waiting[1] == 0 or waiting[1] == waiting[0]  # only the store's checkpoints copy, wholly
            if store.checkpoint_journal() is not None:
                copied_at.append(waiting[0] - waiting[1])
            else:
                assert waiting[0] - waiting[1] < frames
        assert store.checkpoints == 3 and store.checkpoint_failures == 0
        assert all(frames <= waited < frames + 40 for waited in copied_at), copied_at
    finally:
        store.close()
