"""A preemptive stage with no operation to start is skipped on a node that fits and runs no limited operation
(`PreemptiveStages._nothing_to_stop`): the same decisions as analysing the node every time."""

from __future__ import annotations

import json

import pytest
from golden_trace import golden_trace

from pooltree.strategy.preemption import PreemptiveStages


@pytest.mark.parametrize("seed", [11, 12, 13, 14])
def test_skipped_stages_decide_as_analysed_ones(seed, monkeypatch):
    skipped = []
    shortcut = PreemptiveStages._nothing_to_stop

    def counted(self, node):
        answer = shortcut(self, node)
        skipped.append(answer)
        return answer

    monkeypatch.setattr(PreemptiveStages, "_nothing_to_stop", counted)
    fast = json.dumps(golden_trace(seed, steps=60), sort_keys=True)
    monkeypatch.setattr(PreemptiveStages, "_nothing_to_stop", lambda self, node: False)
    plain = json.dumps(golden_trace(seed, steps=60), sort_keys=True)
    assert fast == plain
    # both answers occur, so both paths are compared (a node over its limits or with limited operations)
    assert any(skipped) and not all(skipped)
    reasons = {p["reason"] for entry in json.loads(plain) for p in entry.get("preempt", ())}
    assert "resource_overcommit" in reasons or "resource_limits_violated" in reasons, reasons
