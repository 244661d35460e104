"""Fleet mode: the evaluator and the poll. One poll = the constant query set against the query API
(promql, promsource) -> per (replica, route, window) data (fleet_windows) -> the same derivations,
cost model, verdicts and hysteresis as the sidecar -> a FleetState to serve (fleet_state).

The sidecar's own per-route evaluation (evaluation.evaluate_route: cost class, guard, assessment,
hold, draft.config check, advice) runs per replica: the break-even is nonlinear in the batch, so
a fleet-average batch would decide wrongly. As the sidecar's Pipeline does, it assesses through an
exact-key memo (memo.AssessmentCache), and a replica window whose data did not change since
the last poll keeps its derivations (only their time moves): both give the very values a fresh
computation gives.

Freshness: a replica whose newest sample is older than two scrape intervals (or that Prometheus
marked stale) is stale: its values are not served and its verdicts do not move; it is counted.
A failed poll (any query failing, or an answer that is not the query API's) serves nothing and
moves nothing; it is counted by reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field

from specwatch import costmodel
from specwatch.base.logsetup import get_logger
from specwatch.config import Config, ConfigError, PrometheusConfig, format_duration
from specwatch.engines.series import RouteMatcher
from specwatch.fleet import queries as promql
from specwatch.fleet import recorded
from specwatch.fleet.baseline import FleetLearning, ReplicaWindow
from specwatch.fleet.client import PromClient, PromQueryError, Sample, Vector
from specwatch.fleet.grouping import (
    PlanCache,
    RouteData,
    RouteKey,
    WindowGrouper,
    deployment_of,
    newest_samples,
    window_view,
)
from specwatch.fleet.rows import fleet_rows
from specwatch.fleet.shard import shard_of
from specwatch.verdict import controller as ctl
from specwatch.verdict.bookkeeping import EvaluationContext
from specwatch.verdict.evaluation import RouteEvaluation, RouteRecord, WindowEntry, evaluate_route, route_controller
from specwatch.verdict.grading import RolloutGrader
from specwatch.verdict.memo import DEFAULT_SIZE
from specwatch.view import View
from specwatch.view.fleet import (
    QUERY_ERROR_REASONS,
    FleetRow,
    FleetState,
    HistoryRead,
    ReplicaKey,
    ReplicaRouteState,
    RolloutKey,
)
from specwatch.windows.derive import WindowStats, window_stats

log = get_logger("specwatch.fleet")


@dataclass
class _Record(RouteRecord):
    last_sample: float | None = None
    model_name: str = ""
    stale: bool = False
    # Per window label: the data and derivations of the last evaluation, reused while unchanged.
    derived: dict[str, tuple[RouteData, WindowStats]] = field(default_factory=dict)
    # The (t, batch, K) of its shortest window at each fresh evaluation, and the controller of K
    # they and the stated config show (verdict/controller.py): a gate fires on each engine by itself.
    k_history: deque[ctl.KObservation] = field(default_factory=deque)
    controller: ctl.Controller | None = None


class FleetEvaluator(EvaluationContext):
    """Pure evaluation state (no I/O): feed it one poll's answers at a time."""

    def __init__(self, config: Config, cost_model: costmodel.CostModel | None = None):
        if config.prometheus is None:
            raise ConfigError("prometheus", "required for fleet mode and backtest (url, selector, replica_labels)")
        super().__init__(config, cost_model)
        if config.prometheus.recorded and not recorded.covers(config.windows):
            raise ConfigError(
                "prometheus.recorded",
                "the recording rules record windows "
                + ", ".join(format_duration(w) for w in recorded.WINDOWS)
                + ": set windows among them, or recorded: false",
            )
        self.matchers = [RouteMatcher(r.name, dict(r.match)) for r in config.routes]
        # True: the recorded per-route series are read (fleet/recorded.py), False: each replica's;
        # None: not known yet (FleetSource and replay detect it before their first evaluation).
        self.recorded: bool | None = config.prometheus.recorded
        self.shard: tuple[int, int] = config.prometheus.shard
        self._shard_of: dict[RouteKey, bool] = {}
        self.use_recorded(bool(self.recorded))
        self.recorded = config.prometheus.recorded
        self.learning = FleetLearning(self)  # one step-time curve per route
        self._records: dict[RouteKey, _Record] = {}
        # Per route and deployment (prometheus.deployment_labels): old pods' windows vs new pods' (grading.py).
        self._rollouts: dict[RolloutKey, RolloutGrader] = {}
        self._polls = 0
        self._t: float | None = None
        self._up: bool | None = None
        self._last_success: float | None = None
        self._duration: float | None = None
        self._errors = dict.fromkeys(QUERY_ERROR_REASONS, 0)
        self._stale_evaluations = 0
        self._fleet: tuple[FleetRow, ...] = ()
        self._failing: str | None = None
        self.sent_queries = 0
        self._grouped_series: int | None = None  # series in the answers group() last read
        self._series: int | None = None  # ... in the last successful poll's (0: the selector matched nothing)

    def use_recorded(self, on: bool) -> None:
        """Read the recorded per-route series (on) or every replica's; before the first poll: the
        queries, the replica key and the groupers follow."""
        config = self.config
        assert config.prometheus is not None  # __init__ refuses a config without one
        self.recorded = on
        self.source = _source_for(config.prometheus, on)
        source = self.source
        if on:
            self.queries = recorded.query_set(config.windows, config.window_labels, source.matchers)
        else:
            self.queries = promql.query_set(
                config.windows, config.window_labels, source.matchers, source.replica_labels, source.scrape_interval
            )
        # One grouper per window: each keeps its label sets' plans from poll to poll.
        plans = PlanCache()  # the windows' answers hold the same label sets: planned once
        self._groupers = {
            label: WindowGrouper(source.replica_labels, self.matchers, plans) for label in config.window_labels
        }
        self._shard_of.clear()

    def owns(self, key: RouteKey) -> bool:
        """Whether this shard evaluates the route of this key (prometheus.shard)."""
        owned = self._shard_of.get(key)
        if owned is None:
            index, total = self.shard
            replica, route = key
            owned = shard_of(route, deployment_of(replica, self.source.deployment_labels), total) == index
            if len(self._shard_of) > 1_000_000:  # replicas come and go: forget them now and then
                self._shard_of.clear()
            self._shard_of[key] = owned
        return owned

    def reconfigure(self, config: Config) -> list[str]:
        """Take a reloaded config with the same Prometheus source, routes and windows (otherwise
        build a new FleetEvaluator): verdicts are kept, what came from the old config is derived
        again (the stated schedule, the cost model). Returns what was rebuilt."""
        if config.fleet_shape() != self.config.fleet_shape():
            raise ValueError("the Prometheus source, routes or windows changed: build a new FleetEvaluator")
        rebuilt = super().reconfigure(config)
        # The shape leaves out only history_lookback; still, the source is the reloaded config's, so
        # that evaluator.source and evaluator.config.prometheus are never two answers.
        assert config.prometheus is not None  # the shape check above: a source is configured
        self.source = _source_for(config.prometheus, bool(self.recorded))
        for record in self._records.values():
            record.derived.clear()  # window stats derived with the old draft.k hint
        self.learning.reconfigure(rebuilt)
        return rebuilt

    # -- input -----------------------------------------------------------------------------
    def record_error(self, now: float, reason: str, message: str = "", duration: float | None = None) -> None:
        """A failed poll: nothing moves, nothing is served until the next good one."""
        self._errors[reason if reason in self._errors else "invalid"] += 1
        self._up = False
        self._t = now
        self._duration = duration
        if self._failing != reason:  # log once per failure episode and reason
            log.warning("prometheus_query_failed", reason=reason, message=message)
            self._failing = reason

    def group(self, windows: Mapping[str, Iterable[Sample] | Vector]) -> dict[str, dict[RouteKey, RouteData]]:
        """Each window's answer grouped per (replica, route); nothing moves yet. Raises
        PromQueryError("invalid") for an answer with a malformed series."""
        answers = [windows.get(label, ()) for label in self.config.window_labels]
        sized = all(isinstance(a, Sized) for a in answers)  # (an iterator's count is unknown: None)
        self._grouped_series = sum(len(a) for a in answers if isinstance(a, Sized)) if sized else None
        grouped = {
            label: self._groupers[label].group(a) for label, a in zip(self.config.window_labels, answers, strict=True)
        }
        if self.shard[1] > 1:
            owns = self.owns
            grouped = {label: {k: v for k, v in g.items() if owns(k)} for label, g in grouped.items()}
        return grouped

    def evaluate(
        self,
        now: float,
        windows: Mapping[str, Iterable[Sample] | Vector],
        freshness: Iterable[Sample],
        duration: float | None = None,
    ) -> list[tuple[ReplicaKey, RouteEvaluation]]:
        """One poll: `windows` maps each window label to its query's samples."""
        return self.evaluate_grouped(now, self.group(windows), freshness, duration)

    def evaluate_grouped(
        self,
        now: float,
        by_window: Mapping[str, Mapping[RouteKey, RouteData]],
        freshness: Iterable[Sample],
        duration: float | None = None,
    ) -> list[tuple[ReplicaKey, RouteEvaluation]]:
        """One poll on answers already grouped (group)."""
        if self._failing is not None:
            log.info("prometheus_query_recovered", after=self._failing)
            self._failing = None
        self._polls += 1
        self._up = True
        self._t = now
        self._last_success = now
        self._duration = duration
        self._note_series(self._grouped_series)
        self._grouped_series = None
        newest = newest_samples(freshness, self.source.replica_labels)
        keys = sorted({key for grouped in by_window.values() for key in grouped})
        # The memo holds one entry per replica window (an unchanged one asks again next poll), plus slack.
        self.assessments.size = len(keys) * len(by_window) + DEFAULT_SIZE
        longest, shortest_width = max(self.config.windows), min(self.config.windows)
        out: list[tuple[ReplicaKey, RouteEvaluation]] = []
        pending: list[tuple[_Record, ReplicaKey, str, list[WindowEntry], bool]] = []
        points: dict[str, list[ReplicaWindow]] = {}  # the learner's view of each fresh replica
        for key in keys:
            replica, route = key
            record = self._records.get(key)
            if record is None:
                record = self._records[key] = _Record()
            record.seen_poll = self._polls
            samples_longest = max((g[key].samples for g in by_window.values() if key in g), default=0)
            interval = self.source.scrape_interval or (longest / samples_longest if samples_longest else longest)
            last_sample = newest.get(replica)
            record.stale = last_sample is None or now - last_sample > 2 * interval
            if record.stale:
                self._stale_evaluations += 1
                continue
            fresh = record.last_sample is None or last_sample > record.last_sample  # type: ignore[operator]
            record.last_sample = last_sample
            windows = self._windows(record, replica, route, by_window, now, interval)
            pending.append((record, replica, route, windows, fresh))
            shortest = next((w for w in windows if w[0] == shortest_width), None)
            if fresh and shortest is not None:
                data = by_window[shortest[1]][key]
                points.setdefault(route, []).append(
                    ReplicaWindow(replica, data.model_name, shortest[2], data.spec, record.method)
                )
        # Every replica of a route (spec-on, canary) feeds the route's one curve; then each replica
        # gets exactly the sidecar's per-route evaluation, on that curve.
        self.learning.engine_of.update(_engines(pending))
        self.learning.observe(now, points)
        for record, replica, route, windows, fresh in pending:
            evaluations = evaluate_route(
                self.config,
                self.learning.cost_model_for(route),
                self.schedule,
                record,
                windows,
                now,
                fresh=fresh,
                assess=self.assessments.assess,
            )
            record.evaluations = evaluations
            record.controller = self._controller(record, route, evaluations, fresh)
            if fresh:
                self._observe_rollout(replica, route, record.method, now, evaluations)
            out.extend((replica, e) for e in evaluations)
        for record in self._records.values():
            if record.seen_poll != self._polls:
                record.stale = True  # gone from every window: its last values must not be served
        self._expire()
        self._fleet = fleet_rows(out)
        return out

    def _controller(
        self, record: _Record, route: str, evaluations: Sequence[RouteEvaluation], fresh: bool
    ) -> ctl.Controller | None:
        """The replica's controller of K (the sidecar's per route), kept while it has no evaluation."""
        expects = next((r.expect_speculation for r in self.config.routes if r.name == route), True)
        controller = route_controller(
            self.config,
            self.schedule,
            record.k_history,
            evaluations,
            fresh=fresh,
            method=record.method,
            expects_speculation=expects,
        )
        return controller or record.controller

    def _observe_rollout(
        self, replica: ReplicaKey, route: str, method: str, now: float, evaluations: Iterable[RouteEvaluation]
    ) -> None:
        """Feed a fresh replica's windows to its route's (and deployment's) rollout grader."""
        deployment = deployment_of(replica, self.source.deployment_labels)
        rollout = self._rollouts.setdefault((route, deployment), RolloutGrader())
        stats = [e.stats for e in evaluations]
        rollout.observe(
            replica,
            now,
            stats,
            method,
            self.config.decision.min_drafts,
            self.learning.cost_model_for(route),
            self.k_plan,  # replicas at other batches drafting the schedule's other K: no rollout
        )

    def _windows(
        self,
        record: _Record,
        replica: ReplicaKey,
        route: str,
        by_window: Mapping[str, Mapping[RouteKey, RouteData]],
        now: float,
        interval: float,
    ) -> list[WindowEntry]:
        """One replica's window entries (views and derivations) for evaluate_route."""
        windows: list[WindowEntry] = []
        derived = record.derived
        for width, label in self.labelled_windows:
            data = by_window[label].get((replica, route))
            if data is None:
                derived.pop(label, None)
                continue
            record.model_name = data.model_name
            span = min(width, (data.samples - 1) * interval)
            view = window_view(data, replica, now, span)
            if view is None:
                derived.pop(label, None)
                continue
            previous = derived.get(label)
            if previous is not None and previous[0] == data and previous[1].span_seconds == view.span_seconds:
                # The same window data: window_stats would give the same values but for the time.
                stats = dataclasses.replace(previous[1], t=now)
            else:
                stats = window_stats(view, route, label, now, configured_k_hint=self.config.draft.k)
            derived[label] = (data, stats)
            windows.append((width, label, view, stats))
        return windows

    def _note_series(self, series: int | None) -> None:
        """An answer with no series at all is a success that serves nothing: most often a selector
        that matches no vLLM series. Said once per such episode (and served: FleetState.series)."""
        if series == 0 and self._series != 0:
            log.warning(
                "prometheus_selector_matches_nothing",
                selector=self.source.selector,
                message="the window queries answered no series: check prometheus.selector and the job's labels",
            )
        self._series = series

    def _expire(self) -> None:
        for key in self.expired(((k, r.seen_poll) for k, r in self._records.items()), self._polls):
            del self._records[key]
        labels = self.source.deployment_labels
        live = {(route, deployment_of(replica, labels)) for replica, route in self._records}
        for rollout in [k for k in self._rollouts if k not in live]:
            del self._rollouts[rollout]

    # -- output ----------------------------------------------------------------------------
    def view(self, history: HistoryRead | None = None, history_errors: Mapping[str, int] | None = None) -> View:
        """What this poll publishes: the fleet section (with the history read at the start and its
        failures, when one was asked for) and the cost model the verdicts rest on."""
        state = dataclasses.replace(self.state(), history=history, history_errors=history_errors)
        return View(self.config, self.cost_model, fleet=state)

    def state(self) -> FleetState:
        routes = tuple(
            ReplicaRouteState(replica, route, r.model_name, r.method, r.stale, r.evaluations, r.controller)
            for (replica, route), r in sorted(self._records.items())
        )
        return FleetState(
            self.source.replica_labels,
            self._t,
            self._up,
            self._last_success,
            self._duration,
            self.sent_queries,
            self.queries.count,
            dict(self._errors),
            sum(1 for r in routes if r.stale),
            self._stale_evaluations,
            routes,
            self._fleet if self._up else (),
            {r.name: r.baseline_itl_p99_seconds for r in self.config.routes if r.baseline_itl_p99_seconds is not None},
            self._series,
            {key: g.grading for key, g in sorted(self._rollouts.items()) if g.grading is not None},
            self.learning.baselines(),
            deployment_labels=self.source.deployment_labels,
        )


def _source_for(source: PrometheusConfig, on_recorded: bool) -> PrometheusConfig:
    """The source as the evaluator reads it: on recorded series, an aggregate is the replica."""
    if not on_recorded:
        return source
    labels = recorded.AGGREGATE_LABELS
    return dataclasses.replace(
        source,
        replica_labels=labels,
        deployment_labels=tuple(name for name in source.deployment_labels if name in labels),
    )


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector held off for one poll. Decoding and grouping a 1,000-replica
    answer allocates a burst of acyclic containers; with the collector on, that burst sets off
    collections that walk every live object (the evaluator's state included) again and again, at a
    cost comparable to the decoding's (docs/benchmarks.md, "Chart defaults and constants"). Whatever the poll leaves is collected as
    usual afterwards, in one pass."""
    if not gc.isenabled():  # someone else holds it off: leave it so
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class FleetSource:
    """The I/O edge: one poll = the constant query set against the query API, then evaluate."""

    def __init__(self, evaluator: FleetEvaluator, client: PromClient | None = None):
        self.evaluator = evaluator
        self.client = client or PromClient(evaluator.source)

    def poll(self, now: float | None = None) -> list[tuple[ReplicaKey, RouteEvaluation]] | None:
        with collector_paused():
            return self._poll(time.time() if now is None else now)

    def _poll(self, now: float) -> list[tuple[ReplicaKey, RouteEvaluation]] | None:
        start = time.monotonic()
        try:
            if self.evaluator.recorded is None:
                self.detect(now)
            queries = self.evaluator.queries
            windows = {label: self.client.query_vector(expr, now) for label, _, expr in queries.windows}
            freshness = self.client.query(queries.freshness, now).samples
            grouped = self.evaluator.group(windows)  # a malformed answer fails the poll here, before anything moves
        except PromQueryError as exc:
            self.evaluator.sent_queries = self.client.queries
            self.evaluator.record_error(now, exc.reason, str(exc), time.monotonic() - start)
            return None
        self.evaluator.sent_queries = self.client.queries
        return self.evaluator.evaluate_grouped(now, grouped, freshness, time.monotonic() - start)

    def detect(self, now: float) -> None:
        """Whether the recording rules are there: one query (PromQueryError if it fails)."""
        evaluator = self.evaluator
        matchers = evaluator.source.matchers  # (the same selector whichever series are read)
        found = recorded.covers(evaluator.config.windows) and recorded.present(
            self.client.query(recorded.detection_query(matchers), now).samples
        )
        evaluator.use_recorded(found)
        log.info("fleet_recorded_series", recorded=found)


__all__ = ["FleetEvaluator", "FleetSource", "collector_paused"]


def _engines(
    pending: Iterable[tuple[object, object, str, Sequence[WindowEntry], bool]],
) -> dict[str, tuple[str, str | None]]:
    """The engine and schema each route's replicas were read as (the last replica's, this poll)."""
    return {route: (windows[0][3].engine, windows[0][3].schema) for _, _, route, windows, _ in pending if windows}
