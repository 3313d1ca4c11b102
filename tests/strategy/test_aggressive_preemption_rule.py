"""`aggressive_preemption_rule` (the read snapshot's capture: one tree's rule for all its operations, under the
scheduling lock) answers what `operation_aggressive_preemption_allowed` answers for every spec, and reads no spec
while the tree allows gang operations' aggressive preemption (the default)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pooltree.strategy.build_static import aggressive_preemption_rule, operation_aggressive_preemption_allowed


class _Spec:
    """A spec that counts the reads of its options."""

    def __init__(self, is_gang: Any) -> None:
        self._is_gang = is_gang
        self.reads = 0

    @property
    def is_gang(self) -> Any:
        self.reads += 1
        return self._is_gang


def test_the_rule_answers_as_the_per_operation_function() -> None:
    for allowed in (True, False, None, 0, 1):
        tree = SimpleNamespace(
            config=SimpleNamespace(allow_aggressive_preemption_for_gang_operations=allowed)
        )
        rule = aggressive_preemption_rule(tree)  # type: ignore[arg-type]
        for spec in (
            None,
            {},
            {"is_gang": True},
            {"is_gang": False},
            {"is_gang": None},
            _Spec(True),
            _Spec(False),
        ):
            assert rule(spec) == operation_aggressive_preemption_allowed(tree, spec), (allowed, spec)  # type: ignore[arg-type]


def test_no_spec_is_read_while_gang_operations_may_be_preempted_aggressively() -> None:
    tree = SimpleNamespace(config=SimpleNamespace(allow_aggressive_preemption_for_gang_operations=True))
    spec = _Spec(True)
    assert aggressive_preemption_rule(tree)(spec) is None  # type: ignore[arg-type]
    assert spec.reads == 0
    tree.config.allow_aggressive_preemption_for_gang_operations = False
    assert aggressive_preemption_rule(tree)(spec) is False  # type: ignore[arg-type]
    assert spec.reads == 1
