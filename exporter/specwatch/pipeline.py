"""The one evaluation path shared by the live sidecar and `specwatch replay`.

ingest(target, t, text | error) -> per-route windows; evaluate(t) -> derived values, break-even
assessment and verdicts; state() -> an immutable State that the collector and the status API
render. No I/O here: the service feeds it from HTTP polls, replay from a recording.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from . import costmodel, decide
from .config import Config, DecisionConfig, RouteConfig
from .costmodel import learned
from .decide_cache import AssessmentCache
from .derive import WindowStats, window_stats, with_drafter
from .exposition import ExpositionError
from .grading import AdviceGrader, Grading
from .schedule_check import (
    ConfigCheck,
    SpeculativeSchedule,
    check_draft_length,
    schedule_from_config,
)
from .vllm import (
    K_ACCEPTED,
    K_DRAFT_TOKENS,
    K_DRAFTS,
    K_GEN,
    K_ITL_BUCKET,
    K_ITL_COUNT,
    K_ITL_SUM,
    K_POS,
    K_PROMPT,
    K_STEPS,
    SCHEMA_V0,
    RouteMatcher,
    RouteSnapshot,
    Grouping,
)
from .window import RouteWindow, WindowView

ERROR_REASONS = ("timeout", "connect", "http_status", "too_large", "parse", "invalid")


@dataclass(frozen=True)
class RouteEvaluation:
    stats: WindowStats
    assessment: decide.Assessment | None
    verdict: str | None
    guard_passed: bool
    # The observed draft length against the stated draft.config (None: no config, or no answer).
    config_check: ConfigCheck | None = None
    # The assessment behind the verdict in effect (the current one, or the one that set the verdict
    # while a new candidate waits out the hold): the recommendation always belongs to the verdict.
    advice: decide.Assessment | None = None

    def value(self, name: str) -> float | None:
        """A derived value as exported: target-derived ratios are absent below the sample guard."""
        if name in GUARDED_STATS and not self.guard_passed:
            return None
        if name in ASSESSMENT_FIELDS:
            source = self.advice if name in ADVICE_FIELDS else self.assessment
            if not self.guard_passed or source is None:
                return None
            derived: float | None = getattr(source, name)
            return derived
        measured: float | None = getattr(self.stats, name)
        return measured


GUARDED_STATS = {"acceptance_rate", "mean_acceptance_length", "draft_length", "position_rates"}
ASSESSMENT_FIELDS = {
    "breakeven_acceptance_rate",
    "acceptance_margin",
    "expected_speedup",
    "recommended_draft_length",
    "max_speculative_batch_size",
    "recommended_config",
}
ADVICE_FIELDS = {"recommended_draft_length", "recommended_config"}


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
    # False when the route was missing from its target's latest good poll (e.g. vLLM restarted
    # with another --served-model-name): its values are then not served, but kept for its return.
    current: bool = True
    # The latest change of K or method and how the server did after it (grading.py).
    grading: Grading | None = None
    # The learned step-time fit of the route (None: learning off, a profile set, or no window yet).
    fit: learned.FitSummary | None = None


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


@dataclass(frozen=True)
class CostModelInfo:
    source: str  # default | preset | profile | learned
    hardware: str
    model: str
    dtype: str
    tensor_parallel: int
    method: str


@dataclass
class _TargetRecord:
    name: str
    url: str
    matchers: list[RouteMatcher]
    route_prefix: str
    grouping: Grouping = field(init=False)
    up: bool | None = None
    last_success: float | None = None
    scrape_duration: float | None = None
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ERROR_REASONS, 0))
    resets: int = 0
    schema: str | None = None
    polls: int = 0

    def __post_init__(self) -> None:
        self.grouping = Grouping(self.matchers, self.route_prefix)


@dataclass
class _RouteRecord:
    window: RouteWindow
    target: str
    last_seen_poll: int
    fresh: bool = True  # a snapshot arrived since the last evaluation
    verdicts: dict[str, decide.VerdictState] = field(default_factory=dict)
    advice: dict[str, decide.Assessment] = field(default_factory=dict)  # per window: behind the verdict
    evaluations: tuple[RouteEvaluation, ...] = ()
    method: str = "auto:unknown"
    grader: AdviceGrader = field(default_factory=AdviceGrader)
    # The step-time curve learned from this route's windows (None: learning off or a profile set).
    learner: learned.StepTimeLearner | None = None
    learner_method: str = ""
    learned_until: float | None = None  # end of the last window given to the learner
    # The cost model over the learner's current curve: one object while the curve is unchanged, so
    # the assessment memo (keyed on the model) and the model's own memos serve every poll.
    learned_model: costmodel.CostModel | None = None


@dataclass(frozen=True)
class IngestResult:
    ok: bool
    reason: str | None = None
    message: str | None = None
    resets: int = 0
    schema: str | None = None
    routes: tuple[str, ...] = ()


#: Share of request-steps carrying a draft above which the drafter is taken to draft every step:
#: model-based drafters propose at every decode step; n-gram lookup misses leave ~30 % of them
#: undrafted on real traffic (0.70-0.72 on the real vLLM run).
FULL_COVERAGE = 0.98
#: Methods whose drafts are short by themselves (lookup runs out of context), not only by a schedule.
VARIABLE_LENGTH_METHODS = ("ngram", "ngram_gpu", "suffix")


_LEARN_KINDS = {
    K_ITL_SUM: "itl_sum",
    K_ITL_COUNT: "itl_count",
    K_STEPS: "steps",
    K_DRAFT_TOKENS: "draft_tokens",
    K_DRAFTS: "drafts",
    K_PROMPT: "prompt",
}


def config_is_default(config: Config) -> bool:
    """True when neither hardware nor model was configured: the verdict rests on assumed defaults."""
    hw, m = config.hardware, config.model
    hardware_default = hw.preset == type(hw)().preset and hw.bandwidth_bytes_per_second is None and hw.flops is None
    model_default = m.preset is None and m.hf_config is None and m.params is None
    return hardware_default and model_default


def resolve_method(
    configured: str, stats: WindowStats, *, min_drafts: float = 0.0, schedule_ks: Sequence[int] | None = None
) -> str | None:
    """vLLM exports no speculative method. With `auto`, infer the cost class from the drafts:
    n-gram/suffix lookup often proposes fewer than K tokens (3.4 of 4 on a real run) and leaves
    request-steps undrafted; model-based drafters propose the K they are given at every step. The
    result names its origin: "auto:ngram" or "auto:eagle3". None = this window is no evidence
    (fewer than ``min_drafts`` drafts, K=1, no drafts): the caller keeps what it had (sticky).

    A schedule shortens a model-based drafter's mean draft length too. With a known schedule
    (``schedule_ks``, its K values) a mean below every K it gives is n-gram; a mean inside its range
    is n-gram only if request-steps went undrafted. Without one, a mean below K with every
    request-step drafted is a model-based drafter under a schedule nobody told us about."""
    if configured != "auto":
        return configured
    if stats.draft_length is None or not stats.configured_k or stats.configured_k < 2:
        return None  # with K=1 every drafter proposes exactly one token: no evidence
    if stats.drafts is not None and stats.drafts < max(min_drafts, 1.0):
        return None  # a handful of drafts (2-4 when traffic stops) says nothing about the drafter
    k, mean = stats.configured_k, stats.draft_length
    fully_drafted = stats.draft_coverage is not None and stats.draft_coverage >= FULL_COVERAGE
    if schedule_ks:
        positive = [min(int(x), k) for x in schedule_ks if x > 0]
        if positive and mean < 0.98 * min(positive):
            return "auto:ngram"
        if mean < 0.98 * k and stats.draft_coverage is not None and not fully_drafted:
            return None  # a K=0 band or lookup misses: cannot tell, keep the last answer
        return "auto:eagle3"
    if mean < 0.98 * k and not fully_drafted:
        return "auto:ngram"
    return "auto:eagle3"


def schedule_ks_of(config: Mapping[str, object] | None) -> tuple[int, ...] | None:
    """K values of the num_speculative_tokens_per_batch_size schedule in a stated config."""
    schedule = (config or {}).get(costmodel.SCHEDULE_KEY)
    if not isinstance(schedule, list):
        return None
    return tuple(int(band[2]) for band in schedule if isinstance(band, (list, tuple)) and len(band) == 3)


WindowEntry = tuple[float, str, WindowView, WindowStats]  # (width s, label, view, its stats)


class AssessFunction(Protocol):
    """decide.assess, or a memo of it with the same answers (decide_cache.AssessmentCache.assess)."""

    def __call__(
        self,
        cm: costmodel.CostModel,
        stats: WindowStats,
        decision: DecisionConfig,
        method: str | None,
        previous_verdict: str | None,
        *,
        config_method: str | None = ...,
        base_config: Mapping[str, object] | None = ...,
    ) -> decide.Assessment: ...


class RouteMemory(Protocol):
    """What one route keeps between evaluations: the sidecar's per-route record, or fleet mode's
    per replica and route."""

    method: str
    verdicts: dict[str, decide.VerdictState]
    advice: dict[str, decide.Assessment]


def passes_guard(stats: WindowStats, latest: RouteSnapshot, min_drafts: float) -> bool:
    """The sample guard behind every target-derived ratio and assessment."""
    if latest.schema == SCHEMA_V0:
        return stats.acceptance_rate is not None  # V0 values are lifetime, over every draft so far
    return stats.drafts is not None and stats.drafts >= min_drafts


def update_route_method(config: Config, memory: RouteMemory, windows: Sequence[WindowEntry]) -> str:
    """One cost class per route, from the longest window with enough drafts (stable across
    windows); kept while no window is evidence (speculation idle or off). Idempotent for the same
    windows: the sidecar resolves it before learning, evaluate_route again for fleet mode."""
    configured = config.draft.method
    if configured != "auto":
        memory.method = configured
    stated = getattr(config.draft, "config", None)
    schedule_ks = schedule_ks_of(stated if isinstance(stated, Mapping) else None)
    for _, _, _, stats in sorted(windows, key=lambda w: -w[0]):
        resolved = resolve_method(configured, stats, min_drafts=config.decision.min_drafts, schedule_ks=schedule_ks)
        if resolved is not None:
            memory.method = resolved
            break
    return memory.method


def evaluate_route(
    config: Config,
    cost_model: costmodel.CostModel,
    schedule: SpeculativeSchedule | None,
    memory: RouteMemory,
    windows: Sequence[WindowEntry],
    now: float,
    *,
    fresh: bool,
    assess: AssessFunction = decide.assess,
) -> tuple[RouteEvaluation, ...]:
    """One route's windows -> its evaluations, the same in sidecar and fleet mode: one cost class
    from the longest window with enough drafts, the sample guard, the assessment, the hold, the
    stated config's check and the advice behind the verdict in effect. Verdicts move only when
    ``fresh`` (a new snapshot arrived): a failing target never moves one. ``assess`` may be a memo
    of decide.assess (decide_cache.AssessmentCache.assess): the same answer for the same inputs."""
    configured = config.draft.method
    # The --speculative-config the server runs with, when the user stated it (draft.config).
    stated = getattr(config.draft, "config", None)
    base_config: Mapping[str, object] | None = stated if isinstance(stated, Mapping) else None
    schedule_ks = schedule_ks_of(base_config)
    decision = config.decision
    # Half a poll of slack: evaluations are one poll interval apart, give or take scheduling.
    hold = max(decision.hold_seconds(config.poll_interval) - 0.5 * config.poll_interval, 0.0)
    cost_class = update_route_method(config, memory, windows).split(":")[-1]
    # The recommended config names a method only when it is known: configured, or inferred
    # n-gram (self-contained); an inferred model-based drafter's method and path are not.
    config_method = configured if configured != "auto" else ("ngram" if cost_class == "ngram" else None)
    variable_length = cost_class in VARIABLE_LENGTH_METHODS or cost_class == "unknown"
    evaluations: list[RouteEvaluation] = []
    for _, label, view, measured in windows:
        stats = with_drafter(measured, variable_length=variable_length, schedule_ks=schedule_ks)
        guard = passes_guard(stats, view.last.snapshot, decision.min_drafts)
        previous = memory.verdicts.get(label)
        assessment = assess(
            cost_model,
            stats,
            decision,
            cost_class,
            previous.current if previous else None,
            config_method=config_method,
            base_config=base_config,
        )
        if fresh or previous is None:
            state = decide.next_verdict(previous, assessment.candidate, hold, now)
            memory.verdicts[label] = state
        else:
            state = previous  # no new data: a failing target never moves a verdict
        check = None
        if schedule is not None and stats.spec_present:
            check = check_draft_length(
                schedule,
                batch_size=stats.batch_size,
                drafts=stats.drafts,
                observed_k=stats.draft_length,
                min_drafts=decision.min_drafts,
            )
        if assessment.candidate == state.current:
            memory.advice[label] = assessment
        advice = memory.advice.get(label)
        if advice is not None and advice.candidate != state.current:
            advice = None
        evaluations.append(RouteEvaluation(stats, assessment, state.current, guard, config_check=check, advice=advice))
    return tuple(evaluations)


class Pipeline:
    def __init__(self, config: Config, cost_model: costmodel.CostModel | None = None) -> None:
        self.config = config
        self.cost_model = cost_model if cost_model is not None else costmodel.cost_model_from_config(config)
        self._route_configs: dict[str, RouteConfig] = {r.name: r for r in config.routes}
        self._targets: dict[str, _TargetRecord] = {}
        multi = len(config.targets) > 1
        for target in config.targets:
            matchers = [RouteMatcher(r.name, dict(r.match)) for r in config.routes if r.target == target.name]
            self._targets[target.name] = _TargetRecord(
                target.name, target.url, matchers, f"{target.name}/" if multi else ""
            )
        self._routes: dict[str, _RouteRecord] = {}
        self._assessments = AssessmentCache()  # an unchanged window is not assessed twice
        self._t: float | None = None
        self._evaluated = False
        self._schedule = schedule_from_config(config.draft.config)  # validated when the config loaded

    def add_target(self, name: str, url: str = "") -> None:
        """A target learnt from a recording (replay without a config): routes named as live."""
        if name not in self._targets:
            prefix = f"{name}/" if any(r.polls for r in self._targets.values()) else ""
            self._targets[name] = _TargetRecord(name, url, [], prefix)

    # -- input -------------------------------------------------------------------------------
    def ingest_error(self, target: str, t: float, reason: str, duration: float | None = None) -> None:
        record = self._targets[target]
        record.up = False
        record.polls += 1
        record.errors[reason if reason in record.errors else "invalid"] += 1
        record.scrape_duration = duration
        self._t = t

    def ingest(self, target: str, t: float, text: str, duration: float | None = None) -> IngestResult:
        """Parse one payload; on any error the windows are left exactly as they were."""
        record = self._targets[target]
        try:
            snaps = record.grouping.parse(text, t=t, target=target)
        except ExpositionError as exc:
            self.ingest_error(target, t, exc.reason, duration)
            return IngestResult(False, exc.reason, str(exc))
        record.up = True
        record.polls += 1
        record.last_success = t
        record.scrape_duration = duration
        self._t = t
        resets = 0
        schema = snaps[0].schema if snaps else record.schema
        for snap in snaps:
            route = self._routes.get(snap.route)
            if route is None:
                route = self._routes[snap.route] = _RouteRecord(
                    RouteWindow(max(self.config.windows)), target, record.polls
                )
            if route.window.ingest(snap):
                resets += 1
            route.last_seen_poll = record.polls
            route.fresh = True
        if resets:
            record.resets += 1  # one restart of vLLM resets every route: count it once per poll
        record.schema = schema
        self._expire_routes(record)
        return IngestResult(True, resets=resets, schema=schema, routes=tuple(s.route for s in snaps))

    def _expire_routes(self, record: _TargetRecord) -> None:
        ttl = self.config.route_ttl_polls
        for name in [
            n for n, r in self._routes.items() if r.target == record.name and record.polls - r.last_seen_poll >= ttl
        ]:
            del self._routes[name]

    # -- evaluation -----------------------------------------------------------------------------
    def evaluate(self, now: float) -> list[RouteEvaluation]:
        out: list[RouteEvaluation] = []
        for name, route in self._routes.items():
            windows: list[WindowEntry] = []
            for width, label in zip(self.config.windows, self.config.window_labels, strict=True):
                view = route.window.view(now, width)
                if view is not None:
                    windows.append(
                        (
                            width,
                            label,
                            view,
                            window_stats(view, name, label, now, configured_k_hint=self.config.draft.k),
                        )
                    )
            update_route_method(self.config, route, windows)  # this poll's class, before learning
            cost_model = self._learn(route, now)
            evaluations = evaluate_route(
                self.config,
                cost_model,
                self._schedule,
                route,
                windows,
                now,
                fresh=route.fresh,
                assess=self._assessments.assess,
            )
            route.evaluations = evaluations
            if route.fresh:
                route.grader.observe(
                    now, [w[3] for w in windows], route.method, self.config.decision.min_drafts, cost_model
                )
            route.fresh = False
            out.extend(evaluations)
        self._t = now
        self._evaluated = True
        return out

    def _learn(self, route: _RouteRecord, now: float) -> costmodel.CostModel:
        """Give the learner the window since its last point and return the route's cost model:
        the learned curve once it has enough points, else the configured (prior) model."""
        settings = self.config.learning
        if not self.learning_enabled():
            return self.cost_model
        method = route.method.split(":")[-1]
        if route.learner is None or method not in (route.learner_method, "unknown"):
            # The method class sets the prior's drafting share. Once inferred, the points taken
            # before (the same drafter, class not yet known) are refitted under its prior; a
            # change of class (another drafter) starts a new fit.
            prior = self.cost_model.with_method(method if method != "unknown" else None)
            if route.learner is not None and route.learner_method == "unknown":
                route.learner = route.learner.with_prior(prior)
            else:
                route.learner = learned.StepTimeLearner(
                    prior, min_points=settings.min_points, half_life_seconds=settings.half_life
                )
                route.learned_until = None
            route.learner_method = method
        since = route.learned_until
        width = now - since if since is not None else min(self.config.windows)
        if width >= settings.point_seconds:
            view = route.window.view(now, width + 1e-6)
            if view is not None and since is not None and view.first.t > since + 1e-6:
                view = None
                route.learned_until = None  # the point lost its start (gap, restart): begin anew
            if view is not None:
                d = learned.deltas_by_kind(view.increases(), _LEARN_KINDS)
                obs = learned.observation_from_deltas(
                    view.last.t, d["itl_sum"], d["itl_count"], d["steps"], d["draft_tokens"], d["drafts"], d["prompt"]
                )
                if obs is not None:
                    route.learner.add(obs)
                route.learned_until = view.last.t
        return self._learned_model(route)

    def _learned_model(self, route: _RouteRecord) -> costmodel.CostModel:
        """The route's cost model now: over its learned curve, else the configured one."""
        curve = route.learner.curve() if route.learner is not None else None
        if curve is None:
            return self.cost_model
        if route.learned_model is None or route.learned_model.profile is not curve:
            route.learned_model = learned.learned_cost_model(self.cost_model, curve)
        return route.learned_model

    def learning_enabled(self) -> bool:
        """learning.enabled, auto (None) meaning: when the verdict would rest on defaults. A
        measured profile always wins."""
        if self.config.profile is not None:
            return False
        enabled = self.config.learning.enabled
        return config_is_default(self.config) if enabled is None else enabled

    def learners(self) -> dict[str, tuple[learned.StepTimeLearner, costmodel.CostModel]]:
        """Each route's learner and the cost model its verdicts use now."""
        out = {}
        for name, route in self._routes.items():
            if route.learner is not None:
                out[name] = (route.learner, self._learned_model(route))
        return out

    def cost_model_source(self) -> str:
        """default | preset | profile | learned: what the verdicts rest on now."""
        if self.config.profile is not None:
            return "profile"
        if any(r.learner is not None and r.learner.curve() is not None for r in self._routes.values()):
            return "learned"
        return "default" if config_is_default(self.config) else "preset"

    # -- output ---------------------------------------------------------------------------------
    def state(self) -> State:
        targets = tuple(
            TargetState(
                r.name, r.url, r.up, r.last_success, r.scrape_duration, dict(r.errors), r.resets, r.schema, r.polls
            )
            for r in self._targets.values()
        )
        routes = []
        for name, route in sorted(self._routes.items()):
            latest = route.window.latest
            if latest is None:
                continue
            totals = route.window.totals
            mirrored = {K_DRAFTS: 0.0, K_DRAFT_TOKENS: 0.0, K_ACCEPTED: 0.0, K_GEN: 0.0}
            positions: dict[int, float] = {}
            buckets: dict[float, float] = {}
            current_les = {(k[1], k[2]) for k in latest.counters if k[0] == K_ITL_BUCKET}
            itl_sum = itl_count = 0.0
            for key, value in totals.items():
                kind = key[0]
                if kind in mirrored:
                    mirrored[kind] += value
                elif kind == K_POS:
                    positions[key.position] = positions.get(key.position, 0.0) + value
                elif kind == K_ITL_BUCKET and (key[1], key[2]) in current_les:
                    buckets[key.le] = buckets.get(key.le, 0.0) + value
                elif kind == K_ITL_SUM:
                    itl_sum += value
                elif kind == K_ITL_COUNT:
                    itl_count += value
            config = self._route_configs.get(name)
            current = route.last_seen_poll == self._targets[route.target].polls
            serving = current and self._targets[route.target].up is not False
            routes.append(
                RouteState(
                    route=name,
                    target=route.target,
                    model_name=latest.model_name,
                    method=route.method,
                    schema=latest.schema,
                    spec_present=latest.spec_present,
                    configured_k=latest.configured_k or self.config.draft.k,
                    expects_speculation=config.expect_speculation if config else True,
                    baseline_itl_p99_seconds=config.baseline_itl_p99_seconds if config else None,
                    mirrored=mirrored,
                    positions=tuple(sorted(positions.items())),
                    itl_buckets=tuple(sorted(buckets.items())),
                    itl_sum=itl_sum,
                    itl_count=itl_count,
                    # The same freshness rule as /metrics: while the target is down (or the route was
                    # missing from its last good poll) no alpha, batch or verdict is served from old
                    # polls. They are kept here and come back unchanged with the next good poll.
                    evaluations=route.evaluations if serving else (),
                    current=current,
                    grading=route.grader.grading,
                    fit=self._fit_summary(route),
                )
            )
        unmatched = tuple(
            (r.name, r.target, r.expect_speculation) for r in self.config.routes if r.name not in self._routes
        )
        return State(self._t, targets, tuple(routes), self._evaluated, unmatched, self.cost_model_info())

    def _fit_summary(self, route: _RouteRecord) -> learned.FitSummary | None:
        learner = route.learner
        if learner is None:
            return None
        return learned.fit_summary(learner, self._learned_model(route).with_method(route.learner_method))

    def cost_model_info(self) -> CostModelInfo:
        cm = self.cost_model
        return CostModelInfo(
            source=self.cost_model_source(),
            hardware=cm.hardware.name,
            model=cm.model.name,
            dtype=cm.dtype,
            tensor_parallel=cm.tensor_parallel,
            method=self.config.draft.method,
        )

    def rests_on_defaults(self) -> bool:
        """Neither hardware nor model configured and no profile: warn once at start-up."""
        return self.config.profile is None and config_is_default(self.config)


def evaluation_record(evaluation: RouteEvaluation) -> dict[str, object]:
    """One replay line / status entry (keys listed in docs/architecture.md, null where there is no value)."""
    stats = evaluation.stats
    assessment = evaluation.advice if evaluation.guard_passed else None
    breakeven = evaluation.value("breakeven_acceptance_rate")
    return {
        "t": stats.t,
        "route": stats.route,
        "window": stats.window,
        "acceptance_rate": evaluation.value("acceptance_rate"),
        "mean_acceptance_length": evaluation.value("mean_acceptance_length"),
        "draft_length": evaluation.value("draft_length"),
        "batch_size": stats.batch_size,
        "itl_p50_seconds": stats.itl_p50_seconds,
        "itl_p99_seconds": stats.itl_p99_seconds,
        "breakeven_acceptance_rate": breakeven,
        "speculation_cannot_pay": None if breakeven is None else breakeven >= 1.0,
        "expected_speedup": evaluation.value("expected_speedup"),
        "recommended_draft_length": evaluation.value("recommended_draft_length"),
        "verdict": evaluation.verdict,
        "drafts": stats.drafts,
        # A complete --speculative-config vLLM accepts as pasted (null: nothing to apply, or the
        # drafter's model path is unknown, then merge `merge_into_your_speculative_config`).
        "recommended_config": None if assessment is None else assessment.recommended_config,
        "merge_into_your_speculative_config": (
            assessment.config_changes if assessment is not None and assessment.action == "merge" else None
        ),
        "recommended_action": None if assessment is None else assessment.action,
        "notes": [] if assessment is None else list(assessment.notes),
    }
