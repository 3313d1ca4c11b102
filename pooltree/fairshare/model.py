"""Input and output model of the pure fair-share update.

The pool-tree runtime converts configs and operations into this model; the update reads it and returns a
``FairShareResult``. Plain dataclasses (no validation framework) keep construction cheap: the update runs
every fair-share period over thousands of elements. Elements use ``__slots__``: the update reads every
attribute of every element, and with 50,000 of them slot reads stay in far fewer cache lines than dicts.
Vectors are numpy arrays of 5 in the order ``user_slots, cpu, gpu, memory, network``; absolute vectors use
tree units, share vectors are fractions of the tree's total resources.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pooltree.errors import PooltreeError
from pooltree.resources import Vector, unlimited, zeros

ROOT_ID = "<Root>"
GUARANTEE_TYPES = ("none", "burst", "relaxed")
POOL_MODES = ("fair_share", "fifo")
FIFO_SORT_PARAMETERS = ("weight", "start_time", "pending_job_count", "pending_allocation_count")


@dataclass(eq=False)
class IntegralGuarantees:
    """Pool ``integral_guarantees``: burst or relaxed integral guarantee with a resource flow."""

    guarantee_type: str = "none"  # "none" | "burst" | "relaxed"
    burst_guarantee_resources: Vector = field(default_factory=zeros)  # absolute
    resource_flow: Vector = field(default_factory=zeros)  # absolute per second
    relaxed_share_multiplier_limit: float | None = None  # None -> tree setting
    can_accept_free_volume: bool = True
    should_distribute_free_volume_among_children: bool = False


@dataclass(eq=False, slots=True)
class Element:
    """What pools and operations share: identity, weight, limits and the effective starvation tolerance."""

    id: str  # pool name (unique per tree; root is "<Root>") or operation id
    weight: float | None = None  # None -> inferred (b.6) or 1.0
    specified_resource_limits: Vector = field(default_factory=unlimited)  # absolute; inf = unset
    max_share_ratio: float = 1.0
    tag_filter_resource_limits: Vector | None = None  # limits of nodes matching the tag filter; None = totals
    starvation_tolerance: float = 0.8  # effective fair_share_starvation_tolerance


@dataclass(eq=False, slots=True)
class Operation(Element):
    """A running (or pending/suspended) operation: a leaf of the pool tree."""

    usage: Vector = field(default_factory=zeros)  # absolute
    demand: Vector = field(default_factory=zeros)  # absolute, includes usage
    start_time: float = 0.0
    pending_allocation_count: int = 0
    schedulable: bool = True  # False: not running or suspended -> demand := usage (b.1)
    is_gang: bool = False
    apply_specified_resource_limits_to_demand: bool = False


@dataclass(eq=False, slots=True)
class Pool(Element):
    """A pool: a composite element whose children are pools and operations."""

    children: list[Element] = field(default_factory=list)
    mode: str = "fair_share"  # "fair_share" | "fifo"
    strong_guarantee_resources: Vector = field(default_factory=zeros)  # explicit values (0 where unset)
    specified_guarantee_resources: frozenset[str] = frozenset()  # names of resources set explicitly
    integral_guarantees: IntegralGuarantees = field(default_factory=IntegralGuarantees)
    fifo_sort_parameters: tuple[str, ...] = ("weight", "start_time")
    compute_promised_guarantee_fair_share: bool = False
    allow_gang_step_function: bool = True
    # YTsaurus enable_fair_share_truncation_in_fifo_pool (pool option, else the tree's): in a FIFO pool, a gang
    # operation whose fair share does not cover its demand gets no fair share at all (its allocations become
    # preemptible), and its ancestors lose what it had.
    enable_fair_share_truncation_in_fifo_pool: bool = False
    # Priority tier of guarantee shrinking (b.4): kept before regular siblings; needs a donor ancestor (29002).
    enable_priority_strong_guarantee_adjustment: bool = False
    enable_priority_strong_guarantee_adjustment_donorship: bool = False
    # YTsaurus infer_children_weights_from_historic_usage: the half-life (seconds) of the children's historic usage
    # that their weights are inferred from (``historic_usage.py``); None: weights as configured.
    historic_usage_halflife: float | None = None


@dataclass(eq=False)
class UpdateSettings:
    """Tree-level settings the update needs (from the pool tree config)."""

    main_resource: str = "cpu"
    infer_weight_from_guarantees_share_multiplier: float | None = None
    integral_smooth_period: float = 60.0  # seconds
    integral_pool_capacity_saturation_period: float = 86400.0  # seconds
    relaxed_share_multiplier_limit: float = 3.0
    enable_step_function_for_gang_operations: bool = False
    enable_improved_fair_share_by_fit_factor_computation: bool = False
    enable_improved_fair_share_by_fit_factor_computation_distribution_gap: bool = False
    fifo_pool_scheduling_order: str = (
        "satisfaction"  # "satisfaction" | "fifo" (post-update satisfaction, e.2)
    )
    best_allocation_memory: Mapping[str, float] = field(default_factory=dict)
    """Operation id -> the memory its best allocation share leaves it (absolute), a cap on its limits
    (``best_allocation.py``); the strategy fills it (``pooltree/strategy/best_allocation.py``)."""
    enable_discretized_fair_share: bool = False
    """YTsaurus tree option: operations' fair-share functions become staircases of whole jobs (``discretized.py``)."""
    max_discretized_steps: int = 100
    """YTsaurus tree option: above this many pending allocations only a window of steps is a staircase."""
    discretized_job_resources: Mapping[str, Vector] = field(default_factory=dict)
    """Operation id -> one job's resources (absolute; YTsaurus's aggregated initial min needed allocation
    resources), read only with ``enable_discretized_fair_share``; the strategy fills it from the controllers. An
    operation without an entry keeps its continuous function."""


@dataclass(eq=False)
class UpdateState:
    """What one update hands the next: the integral guarantees' volumes and ratios (a rule's state), and
    ``layout``, what the update derived from its tree (the flattened tree with its kept inputs, guarantees and
    functions, ``layout._Tree``) for the next update of the same root to take again where its inputs are the
    same (``fairshare/reuse.py``), plus ``written``, the caller's delta of inputs since. Passed in and returned:
    nothing is kept anywhere else between updates."""

    previous_update_time: float | None = None
    accumulated_resource_volume: dict[str, Vector] = field(default_factory=dict)  # per integral pool
    last_integral_share_ratio: dict[str, float] = field(default_factory=dict)
    historic_usage: dict[tuple[str, str], Any] = field(default_factory=dict)
    """(pool id, child id) -> the child's ``historic_usage.HistoricUsage`` under a pool that infers its children's
    weights from their historic usage."""
    discretized_fair_share: dict[str, Vector] | None = field(default=None, repr=False)
    """Operation id -> its fair share in the update that returned this state, kept only with
    ``enable_discretized_fair_share`` (the window hint of the next update, YTsaurus ``LastFairShare``)."""
    layout: Any = field(default=None, repr=False)
    """The update's flattened tree (``layout._Tree``), taken again only by an update of the very same root."""
    written: Any = field(default=None, repr=False)
    """Set by the caller before the next update: the operation elements whose usage, demand or pending count it
    wrote since the update that returned this state (repeats allowed; any other change of an element must be a new
    element object), so that update reads only their rows; None (an update's own state): not known, every row is
    read. The tree runtime's input reports them (``pooltree.tree.read_input``: ``FairShareInput.written``)."""
    relaid: frozenset[str] | None = field(default=None, repr=False)
    """Set by the caller with ``written``: the pools whose children lists it replaced since the update that
    returned this state (operations arrived, left or moved; every other pool keeps its very list and every element
    its id), so the layout re-lays only their blocks (``reuse.flatten``; empty: the previous tree is taken whole);
    None: not known, the tree is flattened anew. The tree runtime's input cache reports them from the period's delta
    (``FairShareInput.relaid``)."""
    renewed: frozenset[str] = field(default=frozenset(), repr=False)
    """Set by the caller with ``relaid``: the operations among the children of those pools whose element is a new
    object since the update that returned this state (arrived, re-made, moved); the layout gives them new rows, and
    every other child of those pools takes the row of the element with its id (``layout._relaid``). The tree
    runtime's input reports them (``FairShareInput.renewed``)."""


@dataclass(eq=False, slots=True)
class DetailedFairShare:
    """Fair share split into the strong-guarantee, integral-guarantee and weight-proportional parts."""

    strong_guarantee: Vector
    integral_guarantee: Vector
    weight_proportional: Vector
    total: Vector


@dataclass(eq=False, slots=True)
class ElementResult:
    """Everything the update computed for one pool or operation (shares are fractions of tree totals)."""

    id: str
    is_operation: bool
    parent: str | None
    resource_usage: Vector
    resource_demand: Vector
    usage_share: Vector
    demand_share: Vector
    limits_share: Vector
    resource_limits: Vector
    strong_guarantee_share: Vector
    inferred_strong_guarantee_resources: Vector
    estimated_guarantee_share: Vector
    proposed_integral_share: Vector
    fair_share: Vector
    detailed_fair_share: DetailedFairShare
    limited_demand_share: Vector
    promised_guarantee_fair_share: DetailedFairShare | None
    dominant_resource: str
    weight: float
    satisfaction_ratio: float
    local_satisfaction_ratio: float
    scheduling_status: str
    fifo_index: int | None
    burst_ratio: float
    resource_flow_ratio: float
    total_burst_ratio: float
    total_resource_flow_ratio: float
    accumulated_resource_volume: Vector | None
    integral_pool_capacity: Vector | None

    @property
    def effective_strong_guarantee_resources(self) -> Vector:
        """Orchid alias of ``inferred_strong_guarantee_resources``."""
        return self.inferred_strong_guarantee_resources


@dataclass(eq=False)
class FairShareResult:
    """Result of one update: per-element results, the state for the next update and alerts."""

    elements: Mapping[str, ElementResult]  # id -> result (a lazy ``ElementResults`` view from the update)
    state: UpdateState
    errors: list[PooltreeError] = field(default_factory=list)
    discretized_fair_share_active: frozenset[str] = frozenset()
    """Operations whose function was a staircase in this update (YTsaurus ``DiscretizedFairShareActive``)."""
