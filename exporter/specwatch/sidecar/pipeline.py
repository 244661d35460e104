"""The one evaluation path shared by the live sidecar and `specwatch replay`.

ingest(target, t, text | error) -> per-route windows; evaluate(t) -> derived values, break-even
assessment and verdicts (evaluation.evaluate_route); state() -> an immutable State (state.py) that
the collector and the status API render. No I/O here: the service feeds it from HTTP polls,
replay from a recording.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specwatch import costmodel
from specwatch.base.logsetup import get_logger
from specwatch.config import Config, RouteConfig
from specwatch.config.cost_model import config_is_default, prior_source
from specwatch.costmodel import learned
from specwatch.engines.grouping import (
    DROPPED_KINDS,
    MAX_ENGINES_PER_ROUTE,
    MAX_ROUTES_PER_TARGET,
    Grouping,
    position_limit,
)
from specwatch.engines.registry import AUTO, engine_named
from specwatch.engines.series import Counter, RouteMatcher, RouteSnapshot
from specwatch.exposition import ExpositionError
from specwatch.verdict import controller as ctl
from specwatch.verdict.bookkeeping import EvaluationContext, RouteLearning, window_point
from specwatch.verdict.evaluation import (
    RouteEvaluation,
    RouteRecord,
    WindowEntry,
    evaluate_route,
    route_controller,
    update_route_method,
)
from specwatch.verdict.grading import AdviceGrader, WindowSummary, predicted_gain, summarize
from specwatch.view import View
from specwatch.view.targets import CostModelInfo, RouteState, State, TargetState
from specwatch.windows.derive import window_stats
from specwatch.windows.window import RouteWindow, implausible

__all__ = ["Pipeline"]

log = get_logger("specwatch.readback")

#: A restored curve is used once it predicts this process's first live step within this factor.
RESTORED_CURVE_TOLERANCE = 1.5
#: A restored curve's knots may be this far from the engine prior's step at the same tokens.
RESTORED_CURVE_PRIOR_RATIO = 10.0
#: ... and their ratios to the prior this far from each other: a learned curve is the prior's shape
#: scaled by bin, never a plain step several times cheaper than the verify step it was read from.
RESTORED_CURVE_SHAPE = 3.0

#: The route-level counters State carries (RouteState.mirrored), each once the engine exports it.
_MIRRORED = frozenset((Counter.DRAFTS, Counter.DRAFT_TOKENS, Counter.ACCEPTED, Counter.GEN))
ERROR_REASONS = ("timeout", "connect", "tls", "http_status", "too_large", "parse", "invalid", "engine_mismatch")


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
    # Routes and engines its payloads carried past the bounds (grouping.DROPPED_KINDS), over all polls.
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROPPED_KINDS, 0))
    resets: int = 0
    dips: int = 0  # polls with a counter below its base that was no restart (window.py: clamped)
    schema: str | None = None
    polls: int = 0
    engine: str = AUTO  # the configured engine, or detected from each payload
    payload_engine: str | None = None  # what the last payload looks like, when it is not the pinned engine
    routes: tuple[str, ...] = ()  # the routes of its last good poll

    def __post_init__(self) -> None:
        fixed = None if self.engine == AUTO else engine_named(self.engine)
        self.grouping = Grouping(self.matchers, self.route_prefix, engine=fixed)


@dataclass(kw_only=True)
class _RouteRecord(RouteRecord, RouteLearning):
    window: RouteWindow
    target: str
    fresh: bool = True  # a snapshot arrived since the last evaluation
    grader: AdviceGrader = field(default_factory=AdviceGrader)
    learned_until: float | None = None  # end of the last window given to the learner
    # The previous pod's learned curve (read back at start): used until this process's own fits,
    # once it agrees with this process's first live step (restored_confirmed); dropped otherwise.
    restored_knots: tuple[tuple[float, float], ...] = ()
    restored_curve: learned.LearnedStepCurve | None = None
    restored_confirmed: bool = False
    # The previous pod's before-window, until this process's first measured window confirms it.
    restored_before: WindowSummary | None = None
    # The series (engines) the window remembers, least recently seen first, and those of the last
    # snapshot: past MAX_ENGINES_PER_ROUTE the oldest gone ones are forgotten (_track_series).
    series_order: dict[str, None] = field(default_factory=dict)
    series_now: frozenset[str] = frozenset()
    # The engine and schema its payload was last read as: which engine prior it is priced with.
    engine_schema: tuple[str, str | None] | None = None
    # What forgotten series had added to the exported mirrors, by (counter, position): kept so the
    # exported counters never go down when their series leave the window.
    # The (t, batch, K) of its shortest window at each fresh evaluation, and the controller of K
    # they and the stated config show (verdict/controller.py).
    k_history: deque[ctl.KObservation] = field(default_factory=deque)
    controller: ctl.Controller | None = None


@dataclass(frozen=True)
class IngestResult:
    ok: bool
    reason: str | None = None
    message: str | None = None
    resets: int = 0
    schema: str | None = None
    routes: tuple[str, ...] = ()
    dropped: Mapping[str, int] = field(default_factory=dict)  # this poll's, past the bounds (grouping.DROPPED_KINDS)
    engine: str | None = None  # the serving engine the poll was read as


class Pipeline(EvaluationContext):
    def __init__(self, config: Config, cost_model: costmodel.CostModel | None = None) -> None:
        super().__init__(config, cost_model)
        self._route_configs: dict[str, RouteConfig] = {r.name: r for r in config.routes}
        self._targets: dict[str, _TargetRecord] = {}
        multi = len(config.targets) > 1
        for target in config.targets:
            matchers = [RouteMatcher(r.name, dict(r.match)) for r in config.routes if r.target == target.name]
            self._targets[target.name] = _TargetRecord(
                target.name, target.url, matchers, f"{target.name}/" if multi else "", engine=target.engine
            )
        self._routes: dict[str, _RouteRecord] = {}
        self._t: float | None = None
        self._evaluated = False
        # When the last evaluation ran, and whether a poll since changed more than the windows'
        # values (a failure, a recovery, a reset, a route come or gone): evaluation_due.
        self._evaluated_at: float | None = None
        self._moved = True
        self._limit_for: Config | None = None
        self._position_limit = position_limit(None)

        # What the previous pod exported (read back at start), for routes not seen yet (bounded).
        self._restored: dict[str, tuple[WindowSummary | None, tuple[tuple[float, float], ...]]] = {}
        # Restored before-windows and curves dropped for disagreeing with the first live windows.
        self.restore_disagreed = 0
        # Windows of the pipeline this one replaced (reload), by route: their mirrors continue.
        self._adopted: dict[str, tuple[str, RouteWindow, bool]] = {}  # route: (target, window, same series)

    def reconfigure(self, config: Config) -> list[str]:
        """Take a reloaded config with the same targets, routes and windows (otherwise build a new
        Pipeline): windows, verdicts and learned points are kept, and everything derived from the
        old config is derived again (the stated schedule, the cost model, the learners' prior). The
        last evaluation is redone at once, so no scrape serves the new config's labels beside the
        old config's numbers. Returns what was rebuilt."""
        if config.pipeline_shape() != self.config.pipeline_shape():
            raise ValueError("targets, routes or windows changed: build a new Pipeline")
        rebuilt = super().reconfigure(config)
        self._route_configs = {r.name: r for r in config.routes}
        for route in self._routes.values():
            if not route.carry(rebuilt, self.cost_model):
                route.learned_until = None
        if self._evaluated and self._t is not None:
            self.evaluate(self._t)  # no route is fresh: verdicts and learning do not move
        return rebuilt

    def restore(
        self,
        before_windows: Mapping[str, WindowSummary],
        curves: Mapping[str, tuple[tuple[float, float], ...]] | None = None,
    ) -> None:
        """What the previous pod exported, per route (read back at start): its before-window (this
        process's first regime is graded against it when K or the method differ) and its learned
        curve's knots (the route's cost model until this process's own curve fits)."""
        curves = curves or {}
        self._moved = True
        for name in sorted(set(before_windows) | set(curves)):
            route = self._routes.get(name)
            if route is not None:
                _restore_route(route, before_windows.get(name), curves.get(name, ()))
            elif len(self._restored) < MAX_ROUTES_PER_TARGET * max(len(self._targets), 1):
                self._restored[name] = (before_windows.get(name), curves.get(name, ()))

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
        self._moved = True
        record.errors[reason if reason in record.errors else "invalid"] += 1
        record.scrape_duration = duration
        self._t = t
        mismatched = record.grouping.mismatched
        if reason == "engine_mismatch" and mismatched is not None:
            record.payload_engine = mismatched.name

    def ingest(self, target: str, t: float, text: str, duration: float | None = None) -> IngestResult:
        """Parse one payload; on any error the windows are left exactly as they were."""
        record = self._targets[target]
        grouping = record.grouping
        limit = self.position_limit()
        if grouping.max_position != limit:
            grouping.set_position_limit(limit)
        try:
            snaps = self._read(grouping, text, t, target)
        except ExpositionError as exc:
            self.ingest_error(target, t, exc.reason, duration)
            return IngestResult(False, exc.reason, str(exc))
        recovered = record.up is not True  # or its first good poll
        record.up = True
        record.polls += 1
        record.payload_engine = None
        record.last_success = t
        record.scrape_duration = duration
        self._t = t
        schema = snaps[0].schema if snaps else record.schema
        dropped = grouping.dropped
        if dropped["routes"] or dropped["engines"]:
            for kind, count in dropped.items():
                record.dropped[kind] += count
        replanned = grouping.replanned  # False: the same series per route as the last poll
        resets, dipped = self._take(record, snaps, replanned)
        if resets:
            record.resets += 1  # one restart of vLLM resets every route: count it once per poll
        if dipped:
            record.dips += 1  # counted like restarts: polls, not series
        routes = tuple(s.route for s in snaps)
        if recovered or resets or dipped or routes != record.routes or schema != record.schema:
            self._moved = True  # published at once, not at the next evaluation_interval
        record.schema, record.routes = schema, routes
        self._expire_routes(record)
        return IngestResult(
            True,
            resets=resets,
            schema=schema,
            routes=routes,
            dropped=dropped,
            engine=grouping.engine.name,
        )

    def _take(self, record: _TargetRecord, snaps: list[RouteSnapshot], replanned: bool) -> tuple[int, int]:
        """Each snapshot into its route's window (a new route made first): how many routes' counters
        reset, and how many dipped."""
        resets = dipped = 0
        target = record.name
        for snap in snaps:
            route = self._routes.get(snap.route)
            new = route is None
            if route is None:
                if not record.matchers:
                    self._make_room(record, snaps)
                route = self._routes[snap.route] = _RouteRecord(
                    window=self._new_window(snap.route, target), target=target, seen_poll=record.polls
                )
                if (restored := self._restored.pop(snap.route, None)) is not None:
                    _restore_route(route, *restored)
            if route.window.ingest(snap):
                resets += 1
            if replanned or new:
                self._track_series(route, snap)
            dipped += route.window.last_dips
            route.seen_poll = record.polls
            route.fresh = True
        return resets, dipped

    def _read(self, grouping: Grouping, text: str, t: float, target: str) -> list[RouteSnapshot]:
        """The poll's route snapshots; ExpositionError on bad input, and ("invalid") on values no
        engine can hold at one moment (window.implausible): the poll is rejected whole, before
        any window takes it (counted; the windows keep the last good poll)."""
        snaps = grouping.parse(text, t=t, target=target)
        stated_k = self.schedule.num_speculative_tokens if self.schedule is not None else self.config.draft.k
        for snap in snaps:
            if (why := implausible(snap, stated_k)) is not None:
                raise ExpositionError("invalid", f"route {snap.route}: {why}")
        return snaps

    def position_limit(self) -> int:
        """The first `position` a payload may not carry under the current config (the stated K:
        draft.config's num_speculative_tokens, else draft.k; grouping.position_limit)."""
        config = self.config
        if self._limit_for is not config:  # the config can be replaced (reload)
            stated = self.schedule.num_speculative_tokens if self.schedule is not None else config.draft.k
            self._position_limit, self._limit_for = position_limit(stated), config
        return self._position_limit

    def _make_room(self, record: _TargetRecord, snaps: list[RouteSnapshot]) -> None:
        """Before a new route of a target that already has MAX_ROUTES_PER_TARGET: forget its routes
        missing from this poll, least recently seen first (a payload holds at most that many)."""
        mine = [(r.seen_poll, n) for n, r in self._routes.items() if r.target == record.name]
        excess = len(mine) + 1 - MAX_ROUTES_PER_TARGET
        if excess <= 0:
            return
        current = {s.route for s in snaps}
        for _, name in sorted(x for x in mine if x[1] not in current)[:excess]:
            del self._routes[name]

    def _track_series(self, route: _RouteRecord, snap: RouteSnapshot) -> None:
        """Keep the series a route's window remembers to MAX_ENGINES_PER_ROUTE: past it, those gone
        longest from the payload are forgotten (the route's mirror keeps their part)."""
        now = frozenset(key.series for key in snap.counters)
        if now == route.series_now:
            return
        order = route.series_order
        for series in sorted(route.series_now - now) + sorted(now - route.series_now):
            order.pop(series, None)
            order[series] = None  # gone just now, or back: the most recently seen
        route.series_now = now
        excess = len(order) - MAX_ENGINES_PER_ROUTE
        if excess <= 0:
            return
        victims = [series for series in order if series not in now][:excess]
        route.window.forget(victims)
        for series in victims:
            del order[series]

    def _new_window(self, route: str, target: str) -> RouteWindow:
        window = RouteWindow(max(self.config.windows))
        adopted = self._adopted.pop(route, None)
        if adopted is not None and adopted[0] == target:
            window.adopt(adopted[1], baseline=adopted[2])
        return window

    def adopt_counters(self, old: Pipeline) -> Pipeline:
        """After a reload built this pipeline in place of `old`: the exported counters continue where
        old's left off (they never go down), for every route whose target name still exists. The
        windows and verdicts start afresh. A route that reads the same series (same target URL, same
        route config) also keeps its counter bases, so the first poll counts its real increase."""
        # Routes old had adopted itself and not seen since (two reloads between polls), then its own.
        windows = {name: (t, w, same) for name, (t, w, same) in old._adopted.items()}
        windows |= {name: (r.target, r.window, True) for name, r in old._routes.items()}
        self._restored |= old._restored
        self.restore_disagreed += old.restore_disagreed
        for name, (target_name, window, same) in windows.items():
            target = self._targets.get(target_name)
            previous = old._targets.get(target_name)
            if target is None or previous is None:
                continue
            same_series = (
                same and target.url == previous.url and self._route_configs.get(name) == old._route_configs.get(name)
            )
            self._adopted[name] = (target_name, window, same_series)
        for name, target in self._targets.items():
            if (previous := old._targets.get(name)) is not None:
                target.errors = {k: target.errors.get(k, 0) + v for k, v in previous.errors.items()}
                target.resets += previous.resets
                target.dips += previous.dips
                target.dropped = {k: target.dropped.get(k, 0) + v for k, v in previous.dropped.items()}
        return self

    def _expire_routes(self, record: _TargetRecord) -> None:
        mine = ((n, r.seen_poll) for n, r in self._routes.items() if r.target == record.name)
        for name in self.expired(mine, record.polls):
            del self._routes[name]
            self._moved = True

    # -- evaluation -----------------------------------------------------------------------------
    def evaluation_due(self, now: float) -> bool:
        """Whether a poll at `now` is evaluated: at the first poll, once per evaluation period
        (Config.evaluation_due: within half a poll interval, so polls that come a little early do
        not skip a beat; every poll when the period is one poll), and at once after a poll that
        changed more than the windows' values, so a failure, a recovery, a reset or a route come or
        gone is never published late."""
        last = self._evaluated_at
        return self._moved or last is None or self.config.evaluation_due(now - last)

    def evaluate(self, now: float) -> list[RouteEvaluation]:
        out: list[RouteEvaluation] = []
        config = self.config
        k_hint = config.draft.k
        for name, route in self._routes.items():
            windows: list[WindowEntry] = []
            for width, label in self.labelled_windows:
                view = route.window.view(now, width)
                if view is not None:
                    windows.append((width, label, view, window_stats(view, name, label, now, configured_k_hint=k_hint)))
            method = update_route_method(config, route, windows, self.schedule)  # this poll's class, before learning
            if windows:
                route.engine_schema = (windows[0][3].engine, windows[0][3].schema)
            cost_model = self._learn(route, now, name)
            evaluations = evaluate_route(
                config,
                cost_model,
                self.schedule,
                route,
                windows,
                now,
                fresh=route.fresh,
                assess=self.assessments.assess,
                method=method,
            )
            route.evaluations = evaluations
            route.controller = self._controller(name, route, evaluations, method)
            if route.fresh and route.restored_before is not None:
                self._check_restored_before(name, route, windows, cost_model)
            # Speculation that stopped by itself (a gate fired, a schedule dropped) is no change anyone
            # applied: SpecDecodeSpeculationStopped says so, the advice grading waits it out.
            stopped = route.controller is not None and route.controller.mode == "stopped"
            if route.fresh and not stopped:
                route.grader.observe(
                    now, [w[3] for w in windows], route.method, config.decision.min_drafts, cost_model, self.k_plan
                )
            route.fresh = False
            out.extend(evaluations)
        self._t = now
        self._evaluated = True
        self._evaluated_at, self._moved = now, False
        return out

    def _controller(
        self, name: str, route: _RouteRecord, evaluations: Sequence[RouteEvaluation], method: str
    ) -> ctl.Controller | None:
        """The route's controller of K (verdict/controller.py): its history of (batch, K) grows only
        with fresh data."""
        if not evaluations:
            return route.controller
        route_config = self._route_configs.get(name)
        return route_controller(
            self.config,
            self.schedule,
            route.k_history,
            evaluations,
            fresh=route.fresh,
            method=method,
            expects_speculation=route_config.expect_speculation if route_config is not None else True,
        )

    def _prior_model(self, route: _RouteRecord) -> costmodel.CostModel:
        """The route's model before learning: the configured one, with its engine's prior."""
        if route.engine_schema is None:
            return self.cost_model
        return self.route_model(*route.engine_schema)

    def _learn(self, route: _RouteRecord, now: float, name: str = "") -> costmodel.CostModel:
        """Give the learner the window since its last point and return the route's cost model:
        the learned curve once it has enough points, else the configured (prior) model."""
        settings = self.config.learning
        if not self.learning_enabled:
            return self._prior_model(route)
        if route.follow(route.method.split(":")[-1], self._prior_model(route), settings):
            route.learned_until = None
        assert route.learner is not None  # follow gave the route one
        since = route.learned_until
        width = now - since if since is not None else min(self.config.windows)
        if width >= settings.point_seconds:
            view = route.window.view(now, width + 1e-6)
            if view is not None and since is not None and view.first.t > since + 1e-6:
                view = None
                route.learned_until = None  # the point lost its start (gap, restart): begin anew
            if view is not None:
                if (obs := window_point(view, view.last.t)) is not None:
                    if route.restored_knots and not route.restored_confirmed:
                        self._check_restored_curve(name, route, obs)
                    route.learner.add(obs)
                route.learned_until = view.last.t
        return self._learned_model(route)

    def _check_restored_curve(self, name: str, route: _RouteRecord, obs: learned.StepObservation) -> None:
        """The restored curve against the engine prior's magnitudes and this process's first live
        step: used from now on when both agree, else dropped (counted, logged)."""
        assert route.learner is not None
        prior = route.learner.prior
        curve = learned.LearnedStepCurve(prior=prior, knots=route.restored_knots, points=0.0, residual_ratio=math.nan)
        ratios = [v / prior.base_step_time(n) for n, v in route.restored_knots]
        predicted = learned.model_step_seconds(learned.learned_cost_model(prior, curve), obs, prior)
        measured = obs.step_seconds
        in_range = all(1 / RESTORED_CURVE_PRIOR_RATIO <= r <= RESTORED_CURVE_PRIOR_RATIO for r in ratios) and (
            max(ratios) <= RESTORED_CURVE_SHAPE * min(ratios)
        )
        agrees = predicted > 0 and 1 / RESTORED_CURVE_TOLERANCE <= predicted / measured <= RESTORED_CURVE_TOLERANCE
        if in_range and agrees:
            route.restored_confirmed, route.restored_curve = True, curve
            return
        self.restore_disagreed += 1
        route.restored_knots, route.restored_curve, route.learned_model = (), None, None
        log.warning(
            "readback_curve_dropped",
            route=name,
            predicted_step_seconds=round(predicted, 6),
            measured_step_seconds=round(measured, 6),
            reason="knots out of the prior's range or shape"
            if not in_range
            else "disagrees with the first live window",
            action="the prior until this process's own curve fits",
        )

    def _check_restored_before(
        self, name: str, route: _RouteRecord, windows: Sequence[WindowEntry], cost_model: costmodel.CostModel
    ) -> None:
        """The restored before-window against this process's first measured window: a gain of
        more than K + 1 either way (predicted from it, or its ITL per token over the live one's,
        with a factor 2 for the load) is no change of K or method; the window is then dropped."""
        shortest = min(windows, key=lambda w: w[0])[3] if windows else None
        live = summarize(shortest, route.method, self.config.decision.min_drafts) if shortest is not None else None
        if live is None or route.restored_before is None:
            return  # nothing measured yet: it stays pending
        before, route.restored_before = route.restored_before, None
        bound = max(before.draft_length, live.draft_length, 1.0) + 1.0
        itl_ratio = before.itl_per_token_seconds / live.itl_per_token_seconds
        predicted = predicted_gain(cost_model, before, live.draft_length)
        if 1 / (2 * bound) <= itl_ratio <= 2 * bound and (predicted is None or 1 / bound <= predicted <= bound):
            route.grader.restore(before)
            return
        self.restore_disagreed += 1
        log.warning(
            "readback_before_window_dropped",
            route=name,
            itl_ratio=round(itl_ratio, 6),
            predicted_gain=round(predicted, 6) if predicted is not None else None,
            reason="disagrees with the first live window",
            action="this process's own before-windows only",
        )

    def _learned_model(self, route: _RouteRecord) -> costmodel.CostModel:
        """The route's cost model now: over its learned curve, else (or with learning off) the
        configured one."""
        if not self.learning_enabled:
            return self._prior_model(route)
        learner = route.learner
        curve = learner.curve() if learner is not None else None
        if curve is None and learner is not None and route.restored_knots and route.restored_confirmed:
            if route.restored_curve is None or route.restored_curve.prior is not learner.prior:
                route.restored_curve = learned.LearnedStepCurve(
                    prior=learner.prior, knots=route.restored_knots, points=0.0, residual_ratio=math.nan
                )
            curve = route.restored_curve
        return route.model_over(self._prior_model(route), curve)

    def learners(self) -> dict[str, tuple[learned.StepTimeLearner, costmodel.CostModel]]:
        """Each route's learner and the cost model its verdicts use now."""
        out = {}
        for name, route in self._routes.items():
            if route.learner is not None:
                out[name] = (route.learner, self._learned_model(route))
        return out

    def cost_model_source(self) -> str:
        """default | preset | profile | learned | restored: what the verdicts rest on now (restored:
        the previous pod's curve, read back and confirmed, until this process's own fits)."""
        if self.learning_enabled and any(
            r.learner is not None and r.learner.curve() is not None for r in self._routes.values()
        ):
            return "learned"
        if self.learning_enabled and any(
            r.learner is not None and r.restored_knots and r.restored_confirmed for r in self._routes.values()
        ):
            return "restored"
        return prior_source(self.config)

    def cost_model_baseline(self) -> str:
        """history | none: whether a learned curve rests on spec-off windows of its own route (the
        target's own step time, measured before speculation was switched on or after it was off);
        none: the split between target and speculation is the prior's."""
        for r in self._routes.values():
            if r.learner is not None and r.learner.curve() is not None and r.learner.baseline_points > 0:
                return "history"
        return "none"

    # -- output ---------------------------------------------------------------------------------
    def view(self) -> View:
        """What this evaluation publishes: its targets and routes, and the cost model they rest on."""
        return View(self.config, self.cost_model, self.state())

    def state(self) -> State:
        targets = tuple(
            TargetState(
                r.name,
                r.url,
                r.up,
                r.last_success,
                r.scrape_duration,
                dict(r.errors),
                r.resets,
                r.schema,
                r.polls,
                dict(r.dropped),
                r.dips,
                r.payload_engine,
            )
            for r in self._targets.values()
        )
        routes = []
        for name, route in sorted(self._routes.items()):
            latest = route.window.latest
            if latest is None:
                continue
            # The route's own mirrors (window.RouteWindow.mirror), already summed over its engines and
            # never taken back when one departs; the ITL buckets of the current layout only.
            # Only the counters the route's engine exports (an absent one is not exported as 0).
            mirrored: dict[str, float] = {}
            positions: dict[int, float] = {}
            buckets: dict[float, float] = {}
            current_les = {k[2] for k in latest.counters if k[0] == Counter.ITL_BUCKET}
            itl_sum = itl_count = 0.0
            for (kind, sub), value in route.window.mirror.items():
                if kind in _MIRRORED:
                    mirrored[kind] = mirrored.get(kind, 0.0) + value
                elif sub is None:
                    if kind == Counter.ITL_SUM:
                        itl_sum += value
                    elif kind == Counter.ITL_COUNT:
                        itl_count += value
                elif kind == Counter.POS:
                    positions[int(sub)] = positions.get(int(sub), 0.0) + value
                elif kind == Counter.ITL_BUCKET and sub in current_les:
                    buckets[float(sub)] = buckets.get(float(sub), 0.0) + value
            config = self._route_configs.get(name)
            current = route.seen_poll == self._targets[route.target].polls
            serving = current and self._targets[route.target].up is not False
            routes.append(
                RouteState(
                    route=name,
                    target=route.target,
                    model_name=latest.model_name,
                    method=route.method,
                    schema=latest.schema,
                    engine=latest.engine,
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
                    before_window=route.grader.before_candidate,
                    fit=self._fit_summary(route),
                    curve_knots=_knots(route.learner),
                    cost_model=self._learned_model(route),
                    controller=route.controller if serving else None,
                )
            )
        unmatched = tuple(
            (r.name, r.target, r.expect_speculation) for r in self.config.routes if r.name not in self._routes
        )
        info = self.cost_model_info()
        return State(self._t, targets, tuple(routes), self._evaluated, unmatched, info, self.restore_disagreed)

    def _fit_summary(self, route: _RouteRecord) -> learned.FitSummary | None:
        learner = route.learner
        if learner is None:
            return None
        return learned.fit_summary_kept(learner, self._learned_model(route).with_method(route.learner_method))

    def cost_model_info(self) -> CostModelInfo:
        cm = self.cost_model
        return CostModelInfo(
            source=self.cost_model_source(),
            baseline=self.cost_model_baseline(),
            hardware=cm.hardware.name,
            model=cm.model.name,
            dtype=cm.dtype,
            tensor_parallel=cm.tensor_parallel,
            method=self.config.draft.method,
        )

    def rests_on_defaults(self) -> bool:
        """Neither hardware nor model configured and no profile: warn once at start-up."""
        return self.config.profile is None and config_is_default(self.config)


def _restore_route(route: _RouteRecord, before: WindowSummary | None, knots: tuple[tuple[float, float], ...]) -> None:
    """Pending until this process's first live windows confirm them (Pipeline._check_restored_*)."""
    if before is not None:
        route.restored_before = before
    if knots:
        route.restored_knots, route.restored_curve, route.learned_model = knots, None, None
        route.restored_confirmed = False


def _knots(learner: learned.StepTimeLearner | None) -> tuple[tuple[float, float], ...]:
    curve = learner.curve() if learner is not None else None
    return curve.knots if curve is not None else ()
