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
    assert model._GUID_BITS
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
