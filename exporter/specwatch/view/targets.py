"""The targets section of a View: what the sidecar's pipeline shows of its targets and their routes,
immutable, one per evaluation. Built by `Pipeline.state()`; rendered by export/."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from specwatch.costmodel import CostModel, learned
from specwatch.engines.series import DEFAULT_ENGINE
from specwatch.verdict.controller import Controller
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.verdict.grading import Grading, WindowSummary
from specwatch.view.routes import RouteRow


@dataclass(frozen=True)
class RouteState:
    route: str
    target: str
    model_name: str
    method: str
    schema: str
    spec_present: bool
    configured_k: int | None
    expects_speculation: bool
    baseline_itl_p99_seconds: float | None
    mirrored: Mapping[str, float]
    positions: tuple[tuple[int, float], ...]
    itl_buckets: tuple[tuple[float, float], ...]
    itl_sum: float
    itl_count: float
    evaluations: tuple[RouteEvaluation, ...]
    engine: str = DEFAULT_ENGINE  # the serving engine spoken (engines.registry name)
    # False when the route was missing from its target's latest good poll (e.g. vLLM restarted
    # with another --served-model-name): its values are then not served, but kept for its return.
    current: bool = True
    # The latest change of K or method and how the server did after it (grading.py).
    grading: Grading | None = None
    # The window a change now would be graded against (exported: a restarted sidecar reads it back).
    before_window: WindowSummary | None = None
    # The learned step-time fit of the route (None: learning off, a profile set, or no window yet).
    fit: learned.FitSummary | None = None
    # The learned curve's knots (tokens, plain step seconds): exported, so a new pod can read it back.
    curve_knots: tuple[tuple[float, float], ...] = ()
    # The cost model its verdicts use now (the learned curve's, else the configured one).
    cost_model: CostModel | None = None
    # The controller of K the engine runs, with the evidence (None while not served).
    controller: Controller | None = None


@dataclass(frozen=True)
class TargetState:
    name: str
    url: str
    up: bool | None
    last_success: float | None
    scrape_duration: float | None
    errors: Mapping[str, int]
    resets: int
    schema: str | None
    polls: int
    # Routes and engines its payloads carried past specwatch's bounds, dropped (vllm.DROPPED_KINDS).
    dropped: Mapping[str, int] = field(default_factory=dict)
    # Polls in which a counter read below its base without restarting (clamped, docs/architecture.md §3).
    dips: int = 0
    # The engine the last payload looks like when the target is pinned to another (engine_mismatch).
    payload_engine: str | None = None


@dataclass(frozen=True)
class State:
    t: float | None
    targets: tuple[TargetState, ...]
    routes: tuple[RouteState, ...]
    evaluated: bool
    # Configured routes that matched nothing yet: (route, target, expects_speculation). A route
    # whose match is wrong must still be visible, or SpecDecodeMetricsMissing could never fire.
    unmatched_routes: tuple[tuple[str, str, bool], ...] = ()
    # What the verdicts rest on (specwatch_cost_model_info).
    cost_model: CostModelInfo | None = None
    # Read-back evidence dropped for disagreeing with the first live windows (readback: set).
    restore_disagreed: int = 0

    def rows(self) -> tuple[RouteRow, ...]:
        """Every route of every target, its windows served unless the target is down or the
        route missing from its latest good poll."""
        down = {t.name for t in self.targets if t.up is False}
        return tuple(
            RouteRow(
                r.route,
                r.target,
                (),
                r.model_name,
                r.method,
                r.schema,
                r.engine,
                r.baseline_itl_p99_seconds,
                r.evaluations,
                served=r.target not in down and r.current,
                controller=r.controller,
                current=r.current,
                spec_present=r.spec_present,
                configured_k=r.configured_k,
                expects_speculation=r.expects_speculation,
                grading=r.grading,
            )
            for r in self.routes
        )


@dataclass(frozen=True)
class CostModelInfo:
    source: str  # default | preset | profile | learned
    hardware: str
    model: str
    dtype: str
    tensor_parallel: int
    method: str
    # history | none (fleet mode: also canary): whether a learned curve rests on measured spec-off
    # step times; none: its split between target and speculation is the prior's.
    baseline: str = "none"


#: The targets section of a View whose source scrapes no target (fleet mode).
NO_TARGETS = State(None, (), (), False)
