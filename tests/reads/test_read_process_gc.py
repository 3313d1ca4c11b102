"""The read process holds the collector as the batch shells do (``process.hold_collector``): start-up's heap frozen,
every full collection's survivors frozen at its end, unless ``POOLTREE_GC_TUNING=0``. Untuned, a loaded read process's
full collections took 72-93 ms, every request in it waiting (``bench/RESULTS.md``, session 36). Run in a fresh
interpreter: the collector is the process's, and other tests' services hold it in theirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from pooltree.gc_policy import ENVIRONMENT

PROBE = """
import gc, json
from pooltree.gc_policy import POLICY
from pooltree.reads import process
held = process.hold_collector()
frozen = gc.get_freeze_count()
kept = [[index] for index in range(5_000)]
gc.collect()
print(json.dumps([held, POLICY.held, frozen, gc.get_freeze_count() - frozen, len(kept)]))
"""


def _probe(tuning: str | None) -> list[object]:
    environ = {key: value for key, value in os.environ.items() if key != ENVIRONMENT}
    if tuning is not None:
        environ[ENVIRONMENT] = tuning
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_read_process_freezes_what_outlives_a_full_collection() -> None:
    held, policy_held, frozen, frozen_since, kept = _probe(None)
    assert held and policy_held
    assert isinstance(frozen, int) and frozen > 10_000  # start-up's heap: the modules it imported
    assert (
        isinstance(frozen_since, int) and isinstance(kept, int) and frozen_since >= kept
    )  # at the collection


def test_the_read_process_leaves_the_collector_alone_when_tuning_is_off() -> None:
    held, policy_held, frozen, frozen_since, _ = _probe("0")
    assert not held and not policy_held and frozen == 0 and frozen_since == 0
