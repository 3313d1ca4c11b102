"""``live.model.new_guid``: ids read from the system's generator many at a time are still each given once, in
YTsaurus's shape (four hex groups of at most 8 digits), across refills, threads and a fork (a forked child does not
give out the parent's next ids)."""

from __future__ import annotations

import os
import re
import threading

from pooltree.server.live import model
from pooltree.server.live.model import GUIDS_PER_READ, new_guid

SHAPE = re.compile(r"^[0-9a-f]{1,8}-[0-9a-f]{1,8}-[0-9a-f]{1,8}-[0-9a-f]{1,8}$")


def test_ids_are_distinct_and_shaped_across_refills_and_threads() -> None:
    made: list[list[str]] = [[] for _ in range(4)]

    def make(out: list[str]) -> None:
        out.extend(new_guid() for _ in range(GUIDS_PER_READ + 7))

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    ids = [guid for out in made for guid in out]
    assert len(ids) == 4 * (GUIDS_PER_READ + 7)
    assert len(set(ids)) == len(ids)
    assert all(SHAPE.match(guid) for guid in ids)


def test_a_forked_child_does_not_give_out_the_parents_next_ids() -> None:
    new_guid()  # the pool holds ids now
    assert model._GUIDS
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its first id, then out
        try:
            os.write(writing, new_guid().encode())
        finally:
            os._exit(0)
    os.close(writing)
    try:
        _, status = os.waitpid(child, 0)
        from_child = os.read(reading, 64).decode()
    finally:
        os.close(reading)
    assert os.waitstatus_to_exitcode(status) == 0
    assert SHAPE.match(from_child)
    assert from_child not in {new_guid() for _ in range(GUIDS_PER_READ)}


def test_an_id_is_its_bits_in_four_groups_as_read_from_the_generator(monkeypatch) -> None:
    """The ids written out a read at a time are the ids the bits made one at a time before (the same bytes give
    the same ids, in the same order): the groups big-endian, lower-case hex without leading zeros."""
    raw = bytes(range(7, 7 + 16)) + bytes(16) + bytes([255] * 16) + bytes([0, 0, 0, 1] * 4)
    raw += bytes(16 * (GUIDS_PER_READ - 4))
    monkeypatch.setattr(model.secrets, "token_bytes", lambda size: raw[:size])
    monkeypatch.setattr(model, "_GUIDS", [])
    ids = [new_guid() for _ in range(GUIDS_PER_READ)]

    def by_shifts(bits: int) -> str:  # the formula ids were made by before
        return f"{bits >> 96:x}-{(bits >> 64) & 0xFFFFFFFF:x}-{(bits >> 32) & 0xFFFFFFFF:x}-{bits & 0xFFFFFFFF:x}"

    expected = [by_shifts(int.from_bytes(raw[i : i + 16])) for i in range(0, len(raw), 16)]
    assert ids == expected[::-1]  # given from the end of a read, as before
    assert ids[-4:] == [
        "1-1-1-1",
        "ffffffff-ffffffff-ffffffff-ffffffff",
        "0-0-0-0",
        "708090a-b0c0d0e-f101112-13141516",
    ]
