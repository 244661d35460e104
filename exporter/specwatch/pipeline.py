"""The one evaluation path shared by the live sidecar and `specwatch replay`.

ingest(target, t, text | error) -> per-route windows; evaluate(t) -> derived values, break-even
assessment and verdicts; state() -> an immutable State that the collector and the status API
render. No I/O here: the service feeds it from HTTP polls, replay from a recording.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from . import costmodel, decide
from .config import Config, RouteConfig
from .costmodel import learned
from .derive import WindowStats, window_stats
from .exposition import ExpositionError
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
    parse_payload,
)
from .window import RouteWindow, WindowView

ERROR_REASONS = ("timeout", "connect", "http_status", "too_large", "parse", "invalid")


@dataclass(frozen=True)
class RouteEvaluation:
    stats: WindowStats
    assessment: decide.Assessment | None
    verdict: str | None
    guard_passed: bool

    def value(self, name: str) -> float | None:
        """A derived value as exported: target-derived ratios are absent below the sample guard."""
        if name in GUARDED_STATS and not self.guard_passed:
            return None
        if name in ASSESSMENT_FIELDS:
            if not self.guard_passed or self.assessment is None:
                return None
            derived: float | None = getattr(self.assessment, name)
            return derived
        measured: float | None = getattr(self.stats, name)
        return measured


GUARDED_STATS = {"acceptance_rate", "mean_acceptance_length", "draft_length", "position_rates"}
ASSESSMENT_FIELDS = {"breakeven_acceptance_rate", "acceptance_margin", "expected_speedup",
                     "recommended_draft_length", "max_speculative_batch_size", "recommended_config"}


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
    source: str       # default | preset | profile | learned
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
    up: bool | None = None
    last_success: float | None = None
    scrape_duration: float | None = None
    errors: dict[str, int] = field(default_factory=lambda: {r: 0 for r in ERROR_REASONS})
    resets: int = 0
    schema: str | None = None
    polls: int = 0


@dataclass
class _RouteRecord:
    window: RouteWindow
    target: str
    last_seen_poll: int
    fresh: bool = True  # a snapshot arrived since the last evaluation
    verdicts: dict[str, decide.VerdictState] = field(default_factory=dict)
    evaluations: tuple[RouteEvaluation, ...] = ()
    method: str = "auto:unknown"
    # The step-time curve learned from this route's windows (None: learning off or a profile set).
    learner: learned.StepTimeLearner | None = None
    learner_method: str = ""
    learned_until: float | None = None  # end of the last window given to the learner


@dataclass(frozen=True)
class IngestResult:
    ok: bool
    reason: str | None = None
    message: str | None = None
    resets: int = 0
    schema: str | None = None
    routes: tuple[str, ...] = ()


_LEARN_KINDS = {K_ITL_SUM: "itl_sum", K_ITL_COUNT: "itl_count", K_STEPS: "steps",
                K_DRAFT_TOKENS: "draft_tokens", K_DRAFTS: "drafts", K_PROMPT: "prompt"}


def config_is_default(config: Config) -> bool:
    """True when neither hardware nor model was configured: the verdict rests on assumed defaults."""
    hw, m = config.hardware, config.model
    hardware_default = (hw.preset == type(hw)().preset and hw.bandwidth_bytes_per_second is None
                        and hw.flops is None)
    model_default = m.preset is None and m.hf_config is None and m.params is None
    return hardware_default and model_default


def resolve_method(configured: str, stats: WindowStats) -> str:
    """vLLM exports no speculative method. With `auto`, infer the cost class from the drafts:
    n-gram/suffix lookup often proposes fewer than K tokens (3.4 of 4 on a real run), model-based
    drafters always propose K. The result names its origin: "auto:ngram" or "auto:eagle3"."""
    if configured != "auto":
        return configured
    if stats.draft_length is None or not stats.configured_k or stats.configured_k < 2:
        return "auto:unknown"  # with K=1 every drafter proposes exactly one token: no evidence
    if stats.draft_length < 0.98 * stats.configured_k:
        return "auto:ngram"
    return "auto:eagle3"


class Pipeline:
    def __init__(self, config: Config, cost_model: costmodel.CostModel | None = None) -> None:
        self.config = config
        self.cost_model = cost_model if cost_model is not None else costmodel.cost_model_from_config(config)
        self._route_configs: dict[str, RouteConfig] = {r.name: r for r in config.routes}
        self._targets: dict[str, _TargetRecord] = {}
        multi = len(config.targets) > 1
        for target in config.targets:
            matchers = [RouteMatcher(r.name, dict(r.match)) for r in config.routes if r.target == target.name]
            self._targets[target.name] = _TargetRecord(target.name, target.url, matchers,
                                                        f"{target.name}/" if multi else "")
        self._routes: dict[str, _RouteRecord] = {}
        self._t: float | None = None
        self._evaluated = False

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
            snaps = parse_payload(text, t=t, target=target, matchers=record.matchers,
                                  route_prefix=record.route_prefix)
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
                route = self._routes[snap.route] = _RouteRecord(RouteWindow(max(self.config.windows)),
                                                                target, record.polls)
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
        for name in [n for n, r in self._routes.items()
                     if r.target == record.name and record.polls - r.last_seen_poll >= ttl]:
            del self._routes[name]

    # -- evaluation -----------------------------------------------------------------------------
    def evaluate(self, now: float) -> list[RouteEvaluation]:
        out: list[RouteEvaluation] = []
        configured = self.config.draft.method
        config_method = None if configured == "auto" else configured
        for name, route in self._routes.items():
            evaluations: list[RouteEvaluation] = []
            windows: list[tuple[float, str, WindowView, WindowStats]] = []
            for width, label in zip(self.config.windows, self.config.window_labels):
                view = route.window.view(now, width)
                if view is not None:
                    windows.append((width, label, view,
                                    window_stats(view, name, label, now, configured_k_hint=self.config.draft.k)))
            # One cost class per route, from the longest window that saw drafts (stable across windows).
            if configured != "auto":
                route.method = configured
            for _, _, _, stats in sorted(windows, key=lambda w: -w[0]):
                if stats.draft_length is not None:
                    route.method = resolve_method(configured, stats)
                    break
            cost_model = self._learn(route, now)
            for width, label, view, stats in windows:
                guard = self._guard(stats, view.last.snapshot)
                previous = route.verdicts.get(label)
                assessment = decide.assess(cost_model, stats, self.config.decision,
                                           route.method.split(":")[-1], previous.current if previous else None,
                                           config_method=config_method)
                if route.fresh or previous is None:
                    state = decide.next_verdict(previous, assessment.candidate, self.config.decision.hold)
                    route.verdicts[label] = state
                else:
                    state = previous  # no new data: a failing target never moves a verdict
                evaluations.append(RouteEvaluation(stats, assessment, state.current, guard))
            route.evaluations = tuple(evaluations)
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
        if route.learner is None or (method != route.learner_method and method != "unknown"):
            # The method class sets the prior's drafting share: a new class starts a new fit.
            prior = self.cost_model.with_method(method if method != "unknown" else None)
            route.learner = learned.StepTimeLearner(prior, min_points=settings.min_points,
                                                    half_life_seconds=settings.half_life)
            route.learner_method, route.learned_until = method, None
        since = route.learned_until
        width = now - since if since is not None else min(self.config.windows)
        if width >= settings.point_seconds:
            view = route.window.view(now, width + 1e-6)
            if view is not None and since is not None and view.first.t > since + 1e-6:
                view = None
                route.learned_until = None  # the point lost its start (gap, restart): begin anew
            if view is not None:
                d = learned.deltas_by_kind(view.increases(), _LEARN_KINDS)
                obs = learned.observation_from_deltas(view.last.t, d["itl_sum"], d["itl_count"], d["steps"],
                                                      d["draft_tokens"], d["drafts"], d["prompt"])
                if obs is not None:
                    route.learner.add(obs)
                route.learned_until = view.last.t
        curve = route.learner.curve()
        if curve is None:
            return self.cost_model
        return learned.learned_cost_model(self.cost_model, curve)

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
                curve = route.learner.curve()
                model = (learned.learned_cost_model(self.cost_model, curve) if curve is not None
                         else self.cost_model)
                out[name] = (route.learner, model)
        return out

    def cost_model_source(self) -> str:
        """default | preset | profile | learned: what the verdicts rest on now."""
        if self.config.profile is not None:
            return "profile"
        if any(r.learner is not None and r.learner.curve() is not None for r in self._routes.values()):
            return "learned"
        return "default" if config_is_default(self.config) else "preset"

    def _guard(self, stats: WindowStats, latest: RouteSnapshot) -> bool:
        if latest.schema == SCHEMA_V0:
            return stats.acceptance_rate is not None  # V0 values are lifetime, over every draft so far
        return stats.drafts is not None and stats.drafts >= self.config.decision.min_drafts

    # -- output ---------------------------------------------------------------------------------
    def state(self) -> State:
        targets = tuple(TargetState(r.name, r.url, r.up, r.last_success, r.scrape_duration, dict(r.errors),
                                    r.resets, r.schema, r.polls) for r in self._targets.values())
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
                    positions[key[2]] = positions.get(key[2], 0.0) + value
                elif kind == K_ITL_BUCKET and (key[1], key[2]) in current_les:
                    buckets[key[2]] = buckets.get(key[2], 0.0) + value
                elif kind == K_ITL_SUM:
                    itl_sum += value
                elif kind == K_ITL_COUNT:
                    itl_count += value
            config = self._route_configs.get(name)
            routes.append(RouteState(
                route=name, target=route.target, model_name=latest.model_name,
                method=route.method, schema=latest.schema, spec_present=latest.spec_present,
                configured_k=latest.configured_k or self.config.draft.k,
                expects_speculation=config.expect_speculation if config else True,
                baseline_itl_p99_seconds=config.baseline_itl_p99_seconds if config else None,
                mirrored=mirrored, positions=tuple(sorted(positions.items())),
                itl_buckets=tuple(sorted(buckets.items())), itl_sum=itl_sum, itl_count=itl_count,
                evaluations=route.evaluations,
                current=route.last_seen_poll == self._targets[route.target].polls,
                fit=self._fit_summary(route),
            ))
        unmatched = tuple((r.name, r.target, r.expect_speculation) for r in self.config.routes
                          if r.name not in self._routes)
        return State(self._t, targets, tuple(routes), self._evaluated, unmatched, self.cost_model_info())

    def _fit_summary(self, route: _RouteRecord) -> learned.FitSummary | None:
        learner = route.learner
        if learner is None:
            return None
        curve = learner.curve()
        model = learned.learned_cost_model(self.cost_model, curve) if curve is not None else self.cost_model
        return learned.fit_summary(learner, model.with_method(route.learner_method))

    def cost_model_info(self) -> CostModelInfo:
        cm = self.cost_model
        return CostModelInfo(source=self.cost_model_source(), hardware=cm.hardware.name, model=cm.model.name,
                             dtype=cm.dtype, tensor_parallel=cm.tensor_parallel, method=self.config.draft.method)

    def rests_on_defaults(self) -> bool:
        """Neither hardware nor model configured and no profile: warn once at start-up."""
        return self.config.profile is None and config_is_default(self.config)


def evaluation_record(evaluation: RouteEvaluation) -> dict[str, object]:
    """One replay line / status entry (keys listed in docs/architecture.md, null where there is no value)."""
    stats = evaluation.stats
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
        "breakeven_acceptance_rate": evaluation.value("breakeven_acceptance_rate"),
        "expected_speedup": evaluation.value("expected_speedup"),
        "recommended_draft_length": evaluation.value("recommended_draft_length"),
        "verdict": evaluation.verdict,
        "drafts": stats.drafts,
    }
