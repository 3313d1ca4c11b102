"""The strategy's change log (`pooltree.strategy.change_log`): each reader reads every operation written since its
own last committed read, once, whatever the other readers read meanwhile; a read it does not commit is read
again; the log keeps no more than the readers still need."""

from __future__ import annotations

import random

from pooltree.strategy.change_log import (
    FAIR_SHARE_INPUT,
    PENDING,
    PENDING_WORK,
    PUBLISH,
    USAGE,
    ChangeLog,
)


def test_readers_read_what_is_new_to_them():
    log = ChangeLog()
    log.follow(FAIR_SHARE_INPUT, (USAGE, PENDING_WORK))
    log.usage.add("a")
    log.pending.add("b")
    assert log.take(PUBLISH) == {"a"}
    log.usage.add("c")
    assert log.take(FAIR_SHARE_INPUT) == {"a", "b", "c"}
    assert log.take(PUBLISH) == {"c"}
    assert log.take(PENDING) == {"b"}
    assert log.take(FAIR_SHARE_INPUT) == set()
    log.polled.add("p")
    assert log.take(PUBLISH) == set() and log.take(PENDING) == {"p"} and log.take(FAIR_SHARE_INPUT) == {"p"}


def test_an_uncommitted_read_is_read_again():
    log = ChangeLog()
    log.follow(FAIR_SHARE_INPUT, (USAGE, PENDING_WORK))
    log.usage.add("a")
    changed, _ = log.read(FAIR_SHARE_INPUT)  # the input failed: no commit
    assert changed == {"a"}
    log.take(PUBLISH)
    log.pending.add("b")
    changed, generation = log.read(FAIR_SHARE_INPUT)
    assert changed == {"a", "b"}
    log.commit(FAIR_SHARE_INPUT, generation)
    assert log.take(FAIR_SHARE_INPUT) == set()


def test_dropped_pending_work_is_nobodys():
    log = ChangeLog()
    log.follow(FAIR_SHARE_INPUT, (USAGE, PENDING_WORK))
    log.pending.add("x")
    log.take(PUBLISH)  # sealed
    log.pending.add("x")
    log.polled.add("x")
    log.drop_pending("x")
    assert log.take(PENDING) == set() and log.take(FAIR_SHARE_INPUT) == set()


def test_random_reads_equal_a_set_per_reader():
    """Against one plain set per reader (the trackers the log replaced): the same answers, and at most one sealed
    set per reader and kind whatever the pattern of reads."""
    rng = random.Random(7)
    log = ChangeLog()
    log.follow(FAIR_SHARE_INPUT, (USAGE, PENDING_WORK))
    kinds = {PUBLISH: (USAGE,), PENDING: (PENDING_WORK,), FAIR_SHARE_INPUT: (USAGE, PENDING_WORK)}
    plain: dict[str, set[str]] = {reader: set() for reader in kinds}
    for _ in range(3000):
        roll = rng.random()
        if roll < 0.6:
            kind = rng.choice([USAGE, PENDING_WORK])
            operation = f"op{rng.randrange(40)}"
            (log.usage if kind == USAGE else log.pending).add(operation)
            for reader, followed in kinds.items():
                if kind in followed:
                    plain[reader].add(operation)
        else:
            reader = rng.choice(sorted(kinds))
            changed, generation = log.read(reader)
            assert changed == plain[reader]
            if rng.random() < 0.8:
                log.commit(reader, generation)
                plain[reader] = set()
        assert all(len(sealed) <= len(kinds) for sealed in log._sealed)
