"""The one evaluation path shared by the live sidecar and `specwatch replay`.

ingest(target, t, text | error) -> per-route windows; evaluate(t) -> derived values, break-even
assessment and verdicts (evaluation.evaluate_route); state() -> an immutable State (state.py) that
the collector and the status API render. No I/O here: the service feeds it from HTTP polls,
replay from a recording.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import costmodel
from .config import Config, HardwareConfig, RouteConfig
from .costmodel import learned
from .decide import Assessment, VerdictState
from .decide_cache import AssessmentCache
from .derive import window_stats
from .evaluation import (
    RouteEvaluation,
    WindowEntry,
    evaluate_route,
    update_route_method,
)
from .exposition import ExpositionError
from .grading import AdviceGrader
from .schedule_check import schedule_from_config
from .state import CostModelInfo, RouteState, State, TargetState
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
    Grouping,
    RouteMatcher,
)
from .window import RouteWindow

__all__ = ["Pipeline"]

ERROR_REASONS = ("timeout", "connect", "tls", "http_status", "too_large", "parse", "invalid")


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
    verdicts: dict[str, VerdictState] = field(default_factory=dict)
    advice: dict[str, Assessment] = field(default_factory=dict)  # per window: behind the verdict
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


_LEARN_KINDS = {
    K_ITL_SUM: "itl_sum",
    K_ITL_COUNT: "itl_count",
    K_STEPS: "steps",
    K_DRAFT_TOKENS: "draft_tokens",
    K_DRAFTS: "drafts",
    K_PROMPT: "prompt",
}


#: Asked every poll (learning auto): built once, not a HardwareConfig per question.
_DEFAULT_HARDWARE_PRESET = HardwareConfig().preset


def config_is_default(config: Config) -> bool:
    """True when neither hardware nor model was configured: the verdict rests on assumed defaults."""
    hw, m = config.hardware, config.model
    hardware_default = (
        hw.preset == _DEFAULT_HARDWARE_PRESET and hw.bandwidth_bytes_per_second is None and hw.flops is None
    )
    model_default = m.preset is None and m.hf_config is None and m.params is None
    return hardware_default and model_default


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
        self._labelled_for: Config | None = None
        self._labelled_windows: tuple[tuple[float, str], ...] = ()

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
        config = self.config
        if self._labelled_for is not config:  # the config can be replaced (reload): label its windows once
            self._labelled_windows = tuple(zip(config.windows, config.window_labels, strict=True))
            self._labelled_for = config
        k_hint = config.draft.k
        for name, route in self._routes.items():
            windows: list[WindowEntry] = []
            for width, label in self._labelled_windows:
                view = route.window.view(now, width)
                if view is not None:
                    windows.append((width, label, view, window_stats(view, name, label, now, configured_k_hint=k_hint)))
            method = update_route_method(self.config, route, windows)  # this poll's class, before learning
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
                method=method,
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
