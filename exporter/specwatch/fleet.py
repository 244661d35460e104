"""Fleet mode: grouped PromQL answers -> one window view per (replica, route, window) -> the same
derivations, cost model, verdicts and hysteresis as the sidecar, plus a fleet row per route.

The maths is not re-implemented here: each replica's window is handed to derive.window_stats as a
window.WindowView whose increases are the query's per-series increases, keyed exactly as the
sidecar keys its counters (series_key below, the one place that knows the key layout). Then the
sidecar's own per-route evaluation (pipeline.evaluate_route: cost class, guard, assessment, hold,
draft.config check, advice) runs per replica: the break-even is nonlinear in the batch, so a
fleet-average batch would decide wrongly.

Freshness: a replica whose newest sample is older than two scrape intervals (or that Prometheus
marked stale) is stale: its values are not served and its verdicts do not move; it is counted.
A failed poll (any query failing) serves nothing and moves nothing; it is counted by reason.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from . import costmodel, decide, promql
from .config import Config, ConfigError, PrometheusConfig
from .derive import window_stats
from .pipeline import (
    RouteEvaluation,
    WindowEntry,
    evaluate_route,
    evaluation_record,
)
from .promsource import (
    QUERY_ERROR_REASONS,
    PromClient,
    PromQueryError,
    Sample,
)
from .schedule_check import schedule_from_config
from .vllm import (
    K_ACCEPTED,
    K_DRAFT_TOKENS,
    K_DRAFTS,
    K_GEN,
    K_ITL_BUCKET,
    K_ITL_COUNT,
    K_ITL_SUM,
    K_POS,
    K_STEPS,
    SCHEMA_V1,
    SCHEMA_V1_LEGACY_ITL,
    RouteMatcher,
    RouteSnapshot,
    SeriesKey,
)
from .window import Entry, WindowView

log = structlog.get_logger("specwatch.fleet")

ReplicaKey = tuple[tuple[str, str], ...]  # the replica labels, in configured order

_FAMILY_KIND = {
    promql.DRAFTS: K_DRAFTS,
    promql.DRAFT_TOKENS: K_DRAFT_TOKENS,
    promql.ACCEPTED: K_ACCEPTED,
    promql.ACCEPTED_PER_POS: K_POS,
    promql.GENERATION: K_GEN,
    promql.ITL_BUCKET: K_ITL_BUCKET,
    promql.ITL_SUM: K_ITL_SUM,
    promql.ITL_COUNT: K_ITL_COUNT,
    promql.STEPS: K_STEPS,
}
_SPEC_KINDS = {K_DRAFTS, K_DRAFT_TOKENS, K_ACCEPTED, K_POS}


# -- the key layout shared with vllm.py (re-point here when the key type changes) ---------------
def series_id(engine: str | None, model_name: str | None) -> str:
    """One engine's series of a route, as vllm.snapshots names it."""
    engine = engine or "0"
    return f"{engine}/{model_name}" if model_name else engine


def series_key(kind: str, series: str, detail: float | None = None) -> SeriesKey:
    """The RouteSnapshot.counters / WindowView key of one canonical series."""
    return SeriesKey(kind, series, detail)


def replica_name(replica: ReplicaKey) -> str:
    return "/".join(value for _, value in replica) or "-"


@dataclass
class _RouteData:
    """One (replica, route)'s answer for one window, in the sidecar's key layout."""

    route: str
    model_name: str
    increases: dict[SeriesKey, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    engines: set[str] = field(default_factory=set)
    positions: set[int] = field(default_factory=set)
    spec: bool = False
    legacy_itl: bool = False


def _routes_for(labels: Mapping[str, str], matchers: Sequence[RouteMatcher]) -> list[tuple[str, str]]:
    """(route, model_name) pairs a series belongs to: configured matchers, else one route per model."""
    model = labels.get("model_name", "")
    if matchers:
        return [(m.route, m.match.get("model_name", model)) for m in matchers if m.matches(labels)]
    return [(model or "default", model)]


def group_window(
    samples: Iterable[Sample], replica_labels: tuple[str, ...], matchers: Sequence[RouteMatcher]
) -> dict[tuple[ReplicaKey, str], _RouteData]:
    """One window query's samples -> per (replica, route) increases keyed as the sidecar keys them."""
    out: dict[tuple[ReplicaKey, str], _RouteData] = {}
    # Each (replica, model, engine) recurs for every family and bucket: resolve it once.
    resolved: dict[tuple[str, ...], tuple[str, list[_RouteData]]] = {}
    names = (*replica_labels, "model_name", "engine")
    defaults = (*("" for _ in replica_labels), "\0", "")
    for labels, value in samples:
        family = labels.get(promql.FAMILY_LABEL)
        if family is None or not math.isfinite(value):
            continue
        identity = tuple(map(labels.get, names, defaults))
        hit = resolved.get(identity)
        if hit is None:
            replica: ReplicaKey = tuple(zip(replica_labels, identity[:-2], strict=False))
            model = labels.get("model_name")
            targets = []
            for route, route_model in _routes_for(labels, matchers):
                data = out.get((replica, route))
                if data is None:
                    data = out[(replica, route)] = _RouteData(route, route_model)
                targets.append(data)
            hit = resolved[identity] = (series_id(labels.get("engine"), model), targets)
        series, targets = hit
        if family == promql.RUNNING_MEAN:
            for data in targets:
                data.running[series] = data.running.get(series, 0.0) + value
                data.engines.add(series)
            continue
        if family == promql.SAMPLES:
            for data in targets:
                data.samples = max(data.samples, int(value))
            continue
        kind = _FAMILY_KIND.get(family)
        if kind is None:
            continue
        detail: float | int | None = None
        if kind == K_POS:
            try:
                detail = int(labels.get("position", ""))
            except (TypeError, ValueError):
                continue
        elif kind == K_ITL_BUCKET:
            try:
                detail = float(labels["le"])
            except (KeyError, TypeError, ValueError):
                continue
        key = series_key(kind, series, detail)
        increase = max(value, 0.0)
        legacy = promql.SCHEMA_LABEL in labels
        for data in targets:
            increases = data.increases
            increases[key] = increases.get(key, 0.0) + increase
            if kind in _SPEC_KINDS:
                data.spec = True
            if kind == K_POS:
                data.positions.add(int(detail))  # type: ignore[arg-type]
            else:
                data.engines.add(series)
            if legacy:
                data.legacy_itl = True
    return out


def window_view(data: _RouteData, replica: ReplicaKey, now: float, span: float) -> WindowView | None:
    """A WindowView the sidecar's derivations read exactly as they read their own: increases from
    the first to the last entry, `samples` entries, and the running gauge's mean over them."""
    if data.samples < 2:
        return None  # like the sidecar: a ratio needs two samples
    schema = SCHEMA_V1_LEGACY_ITL if data.legacy_itl else SCHEMA_V1
    snapshot = RouteSnapshot(
        t=now,
        target=replica_name(replica),
        route=data.route,
        model_name=data.model_name,
        schema=schema,
        spec_present=data.spec,
        engines=tuple(sorted(data.engines)),
        configured_k=(max(data.positions) + 1) if data.positions else None,
        counters=data.increases,
        created={},
        running=data.running,
    )
    first = Entry(now - span, {}, snapshot)  # a key missing from `first` counts from 0
    last = Entry(now, data.increases, snapshot)
    middle = (Entry(now - span / 2, {}, snapshot),) * (data.samples - 2)
    return WindowView(first, last, (first, *middle, last))


@dataclass(frozen=True)
class FleetRow:
    """One route across the fleet, for one window."""

    route: str
    window: str
    replicas: int
    verdicts: Mapping[str, int]
    acceptance_rate: float | None  # token-weighted: sum accepted / sum draft tokens
    losing_token_share: float | None  # decode tokens served where expected speedup < 1
    generation_tokens: float


@dataclass(frozen=True)
class ReplicaRouteState:
    replica: ReplicaKey
    route: str
    model_name: str
    method: str
    stale: bool
    evaluations: tuple[RouteEvaluation, ...]


@dataclass(frozen=True)
class FleetState:
    replica_labels: tuple[str, ...]
    t: float | None
    up: bool | None
    last_success: float | None
    query_duration: float | None
    queries: int
    queries_per_poll: int
    errors: Mapping[str, int]
    stale_replicas: int
    stale_evaluations: int
    routes: tuple[ReplicaRouteState, ...]
    fleet: tuple[FleetRow, ...]
    # Configured spec-off ITL P99 baselines by route name (exported per replica, as the sidecar does).
    baselines: Mapping[str, float] = field(default_factory=dict)


@dataclass
class _Record:
    method: str = "auto:unknown"
    verdicts: dict[str, decide.VerdictState] = field(default_factory=dict)
    advice: dict[str, decide.Assessment] = field(default_factory=dict)
    last_sample: float | None = None
    model_name: str = ""
    evaluations: tuple[RouteEvaluation, ...] = ()
    stale: bool = False
    seen_poll: int = 0


class FleetEvaluator:
    """Pure evaluation state (no I/O): feed it one poll's answers at a time."""

    def __init__(self, config: Config, cost_model: costmodel.CostModel | None = None):
        if config.prometheus is None:
            raise ConfigError("prometheus", "required for fleet mode and backtest (url, selector, replica_labels)")
        self.config = config
        self.source: PrometheusConfig = config.prometheus
        source = self.source
        self.cost_model = cost_model if cost_model is not None else costmodel.cost_model_from_config(config)
        self._schedule = schedule_from_config(config.draft.config)  # validated when the config loaded
        self.matchers = [RouteMatcher(r.name, dict(r.match)) for r in config.routes]
        self.queries = promql.query_set(config.windows, config.window_labels, source.matchers, source.replica_labels)
        self._records: dict[tuple[ReplicaKey, str], _Record] = {}
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

    def evaluate(
        self,
        now: float,
        windows: Mapping[str, Sequence[Sample]],
        freshness: Sequence[Sample],
        duration: float | None = None,
    ) -> list[tuple[ReplicaKey, RouteEvaluation]]:
        """One poll: `windows` maps each window label to its query's samples."""
        if self._failing is not None:
            log.info("prometheus_query_recovered", after=self._failing)
            self._failing = None
        self._polls += 1
        self._up = True
        self._t = now
        self._last_success = now
        self._duration = duration
        replica_labels = self.source.replica_labels
        newest: dict[ReplicaKey, float] = {}
        for sample in freshness:
            replica = tuple((name, sample.labels.get(name, "")) for name in replica_labels)
            if math.isfinite(sample.value):
                newest[replica] = max(newest.get(replica, -math.inf), sample.value)
        by_window = {
            label: group_window(windows.get(label, ()), replica_labels, self.matchers)
            for label in self.config.window_labels
        }
        keys = sorted({key for grouped in by_window.values() for key in grouped})
        longest = max(self.config.windows)
        out: list[tuple[ReplicaKey, RouteEvaluation]] = []
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
            evaluations = self._evaluate_route(record, replica, route, by_window, now, interval, fresh)
            record.evaluations = evaluations
            out.extend((replica, e) for e in evaluations)
        for record in self._records.values():
            if record.seen_poll != self._polls:
                record.stale = True  # gone from every window: its last values must not be served
        self._expire()
        self._fleet = self._fleet_rows(out)
        return out

    def _evaluate_route(
        self,
        record: _Record,
        replica: ReplicaKey,
        route: str,
        by_window: Mapping[str, Mapping[tuple[ReplicaKey, str], _RouteData]],
        now: float,
        interval: float,
        fresh: bool,
    ) -> tuple[RouteEvaluation, ...]:
        windows: list[WindowEntry] = []
        for width, label in zip(self.config.windows, self.config.window_labels, strict=True):
            data = by_window[label].get((replica, route))
            if data is None:
                continue
            record.model_name = data.model_name
            span = min(width, (data.samples - 1) * interval)
            view = window_view(data, replica, now, span)
            if view is not None:
                windows.append(
                    (width, label, view, window_stats(view, route, label, now, configured_k_hint=self.config.draft.k))
                )
        # Exactly the sidecar's per-route evaluation, per replica.
        return evaluate_route(self.config, self.cost_model, self._schedule, record, windows, now, fresh=fresh)

    def _expire(self) -> None:
        ttl = self.config.route_ttl_polls
        for key in [k for k, r in self._records.items() if self._polls - r.seen_poll >= ttl]:
            del self._records[key]

    def _fleet_rows(self, evaluations: Sequence[tuple[ReplicaKey, RouteEvaluation]]) -> tuple[FleetRow, ...]:
        groups: dict[tuple[str, str], list[RouteEvaluation]] = defaultdict(list)
        for _, evaluation in evaluations:
            groups[(evaluation.stats.route, evaluation.stats.window)].append(evaluation)
        rows = []
        for (route, window), items in sorted(groups.items()):
            verdicts: dict[str, int] = dict.fromkeys(decide.VERDICTS, 0)
            accepted = proposed = generated = losing = 0.0
            for e in items:
                if e.verdict is not None:
                    verdicts[e.verdict] += 1
                tokens = e.stats.generation_tokens or 0.0
                generated += tokens
                if e.guard_passed and e.stats.accepted_tokens is not None and e.stats.draft_tokens:
                    accepted += e.stats.accepted_tokens
                    proposed += e.stats.draft_tokens
                speedup = e.value("expected_speedup")
                if speedup is not None and speedup < 1.0:
                    losing += tokens
            rows.append(
                FleetRow(
                    route,
                    window,
                    len(items),
                    verdicts,
                    accepted / proposed if proposed > 0 else None,
                    losing / generated if generated > 0 else None,
                    generated,
                )
            )
        return tuple(rows)

    # -- output ----------------------------------------------------------------------------
    def state(self) -> FleetState:
        routes = tuple(
            ReplicaRouteState(replica, route, r.model_name, r.method, r.stale, r.evaluations)
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
        )


class FleetSource:
    """The I/O edge: one poll = the constant query set against the query API, then evaluate."""

    def __init__(self, evaluator: FleetEvaluator, client: PromClient | None = None):
        self.evaluator = evaluator
        self.client = client or PromClient(evaluator.source)

    def poll(self, now: float | None = None) -> list[tuple[ReplicaKey, RouteEvaluation]] | None:
        now = time.time() if now is None else now
        start = time.monotonic()
        queries = self.evaluator.queries
        try:
            windows = {label: self.client.query(expr, now).samples for label, _, expr in queries.windows}
            freshness = self.client.query(queries.freshness, now).samples
        except PromQueryError as exc:
            self.evaluator.sent_queries = self.client.queries
            self.evaluator.record_error(now, exc.reason, str(exc), time.monotonic() - start)
            return None
        self.evaluator.sent_queries = self.client.queries
        return self.evaluator.evaluate(now, windows, freshness, time.monotonic() - start)


def replica_record(replica: ReplicaKey | None, evaluation: RouteEvaluation) -> dict[str, Any]:
    """A `specwatch replay` line plus the replica's labels."""
    record = evaluation_record(evaluation)
    record["replica"] = dict(replica) if replica is not None else None
    return record


def fleet_record(t: float, row: FleetRow) -> dict[str, Any]:
    return {
        "t": t,
        "route": row.route,
        "window": row.window,
        "replica": None,
        "replicas": row.replicas,
        "acceptance_rate": row.acceptance_rate,
        "losing_token_share": row.losing_token_share,
        "generation_tokens": row.generation_tokens,
        "verdicts": dict(row.verdicts),
    }


__all__ = [
    "FleetEvaluator",
    "FleetRow",
    "FleetSource",
    "FleetState",
    "ReplicaKey",
    "fleet_record",
    "group_window",
    "replica_record",
    "series_id",
    "series_key",
    "window_view",
]
