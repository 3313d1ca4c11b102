"""§c: scheduling statuses, starvation timing (strict ">"), aggressive starvation, inheritance and priorities."""

import pytest
from strategykit import Kit

from pooltree.errors import ConfigError
from pooltree.strategy import PreemptionPriority, StarvationStatus, StrategyConfig


def starving_kit(**config) -> Kit:
    kit = Kit(node_count=2, node_cpu=10, config=StrategyConfig(**config))
    kit.pool("a")
    kit.pool("b")
    kit.operation("filler", "a", jobs=100)
    kit.set_fair_share({"a": 20, "filler": 20})
    kit.round(0)  # filler takes the whole cluster
    kit.operation("hungry", "b", jobs=50)
    kit.set_fair_share({"a": 10, "filler": 10, "b": 10, "hungry": 10})
    return kit


def test_starving_exactly_after_timeout_strict():
    kit = starving_kit()
    scheduler = kit.scheduler
    kit.publish(100)
    state = scheduler.starvation["hungry"]
    assert state.below_fair_share_since == 100
    assert state.status == StarvationStatus.NON_STARVING
    kit.publish(130)  # now == since + timeout: not yet
    assert scheduler.starvation_status("hungry") == StarvationStatus.NON_STARVING
    kit.publish(130.5)
    assert scheduler.starvation_status("hungry") == StarvationStatus.STARVING
    assert scheduler.starvation["hungry"].starving_since == 130.5
    # the pool is below its fair share too and starves with its own timeout
    assert scheduler.starvation_status("b") == StarvationStatus.STARVING
    view = scheduler.element_view("hungry")
    assert view["lowest_starving_ancestor"] == "hungry"
    assert view["preemption_priority"] == "normal"
    assert view["below_fair_share_since"] == 100


def test_aggressive_starvation_needs_enable_and_longer_timeout():
    kit = starving_kit(enable_aggressive_starvation=True)
    kit.publish(100)
    kit.publish(220)
    assert kit.scheduler.starvation_status("hungry") == StarvationStatus.STARVING
    kit.publish(220.001)
    assert kit.scheduler.starvation_status("hungry") == StarvationStatus.AGGRESSIVELY_STARVING
    assert kit.scheduler.operations["hungry"].preemption_priority == PreemptionPriority.AGGRESSIVE


def test_pool_timeout_is_inherited_by_children_and_operations():
    kit = starving_kit()
    kit.pools["b"]["fair_share_starvation_timeout"] = 5.0
    kit.publish(100)
    kit.publish(105.5)
    assert kit.scheduler.starvation_status("hungry") == StarvationStatus.STARVING
    assert kit.scheduler.element_view("hungry")["effective_fair_share_starvation_timeout"] == 5.0


def test_pending_allocation_count_shortens_timeout():
    kit = starving_kit(allocation_count_preemption_timeout_coefficient=100.0)
    kit.publish(100)  # 50 pending allocations / 100 -> timeout 15 s
    kit.publish(115)
    assert kit.scheduler.starvation_status("hungry") == StarvationStatus.NON_STARVING
    kit.publish(115.1)
    assert kit.scheduler.starvation_status("hungry") == StarvationStatus.STARVING


def test_status_recovers_and_resets_since():
    kit = starving_kit()
    kit.publish(100)
    kit.publish(200)
    assert kit.scheduler.starvation_status("hungry") == StarvationStatus.STARVING
    kit.set_fair_share({"a": 20, "filler": 20, "b": 0, "hungry": 0})
    kit.publish(201)
    state = kit.scheduler.starvation["hungry"]
    assert state.status == StarvationStatus.NON_STARVING and state.below_fair_share_since is None


def test_pool_starvation_disabled_and_priority_scope():
    kit = starving_kit(enable_pool_starvation=False, scheduling_preemption_priority_scope="operation_only")
    kit.publish(100)
    kit.publish(200)
    assert kit.scheduler.starvation_status("b") == StarvationStatus.NON_STARVING
    assert kit.scheduler.starvation_status("hungry") == StarvationStatus.STARVING
    assert kit.scheduler.operations["hungry"].preemption_priority == PreemptionPriority.NORMAL


def test_ancestor_starvation_gives_priority_to_operation_in_default_scope():
    kit = starving_kit()
    # the operation itself looks satisfied (its own fair share is 0) but its pool starves
    kit.set_fair_share({"a": 10, "filler": 10, "b": 10, "hungry": 0})
    kit.publish(100)
    kit.publish(200)
    assert kit.scheduler.starvation_status("hungry") == StarvationStatus.NON_STARVING
    assert kit.scheduler.starvation_status("b") == StarvationStatus.STARVING
    assert kit.scheduler.operations["hungry"].preemption_priority == PreemptionPriority.NORMAL
    assert kit.scheduler.element_view("hungry")["lowest_starving_ancestor"] == "b"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        (
            {"aggressive_preemption_satisfaction_threshold": 1.5},
            "aggressive_preemption_satisfaction_threshold",
        ),
        ({"fair_share_aggressive_starvation_timeout": 10.0}, "fair_share_aggressive_starvation_timeout"),
        ({"fair_share_starvation_tolerance": 1.2}, "fair_share_starvation_tolerance"),
        ({"preemption_satisfaction_threshold": 0}, "preemption_satisfaction_threshold"),
    ],
)
def test_bad_options_name_the_field(options, field):
    with pytest.raises(ConfigError) as error:
        StrategyConfig(**options)
    assert error.value.path.endswith(field)


def test_options_from_raw_mapping_use_milliseconds():
    config = StrategyConfig.from_options(
        {
            "fair_share_starvation_timeout": 15000,
            "preemptive_scheduling_backoff": "2s",
            "min_spare_allocation_resources_on_node": {"cpu": 2},
        },
        "pool_trees.physical.config",
    )
    assert config.fair_share_starvation_timeout == 15.0
    assert config.preemptive_scheduling_backoff == 2.0
    assert config.min_spare_allocation_resources_on_node[1] == 2
    with pytest.raises(ConfigError, match=r"pool_trees\.physical\.config\.preemptive_scheduling_backoff"):
        StrategyConfig.from_options({"preemptive_scheduling_backoff": "soon"}, "pool_trees.physical.config")
