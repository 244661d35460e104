"""Fleet mode, first stage: one window query's answer -> per (replica, route) window data -> the
sidecar's WindowView.

The maths is not re-implemented here: each replica's window is handed on as a window.WindowView
whose increases are the query's per-series increases, keyed exactly as the sidecar keys its
counters (series_key below, the one place that knows the key layout), so derive.window_stats
reads it as it reads its own.

Speed: a large fleet's answer holds tens of thousands of series per window, and the same label sets come back
poll after poll. WindowGrouper therefore resolves each label set once (its replica, routes, counter
key, position or bucket bound) and keeps that plan between polls; a poll then costs one dict
lookup and one float per series. The plans are a pure function of the label set and the config,
so the grouped increases are the same as resolving every series afresh.

Memory: the plans are the one thing kept per series between polls, so they are small and shared.
A streamed answer's series (promsource.Vector, packed) are keyed by their label set's JSON text,
the client's interned bytes object (no per-series label strings or tuples are kept), and the
windows' groupers share one PlanCache: the 1m and 5m answers hold the same label sets, planned
once, with one _Identity each, and a SeriesKey shared by every replica (it names the engine).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from specwatch.engines import registry
from specwatch.engines.grouping import gauge_k
from specwatch.engines.series import DEFAULT_ENGINE, POSITION_COUNTERS, Counter, RouteMatcher, RouteSnapshot, SeriesKey
from specwatch.engines.vllm import SCHEMA_V1, SCHEMA_V1_LEGACY_ITL
from specwatch.fleet import queries as promql
from specwatch.fleet.client import PromQueryError, Sample, Vector
from specwatch.view.fleet import DeploymentKey, ReplicaKey, replica_name
from specwatch.windows.gauges import BATCH
from specwatch.windows.window import Entry, WindowView

RouteKey = tuple[ReplicaKey, str]  # (replica, route)

_FAMILY_KIND = {
    promql.DRAFTS: Counter.DRAFTS,
    promql.DRAFT_TOKENS: Counter.DRAFT_TOKENS,
    promql.ACCEPTED: Counter.ACCEPTED,
    promql.ACCEPTED_PER_POS: Counter.POS,
    promql.DRAFTED_PER_POS: Counter.POS_DRAFTS,
    promql.GENERATION: Counter.GEN,
    promql.ITL_BUCKET: Counter.ITL_BUCKET,
    promql.ITL_SUM: Counter.ITL_SUM,
    promql.ITL_COUNT: Counter.ITL_COUNT,
    promql.STEPS: Counter.STEPS,
}
_SPEC_KINDS = {Counter.DRAFTS, Counter.DRAFT_TOKENS, Counter.ACCEPTED, Counter.POS, Counter.POS_DRAFTS}


# -- the key layout shared with engines/schema.py (re-point here when the key type changes) -----
def series_id(engine: str | None, model_name: str | None) -> str:
    """One engine's series of a route, as EngineSchema.series_id names it for vLLM's labels."""
    engine = engine or "0"
    return f"{engine}/{model_name}" if model_name else engine


def series_key(kind: str, series: str, detail: float | None = None) -> SeriesKey:
    """The RouteSnapshot.counters / WindowView key of one canonical series."""
    return SeriesKey(kind, series, detail)


def deployment_of(replica: ReplicaKey, deployment_labels: Sequence[str]) -> DeploymentKey:
    """The deployment a replica belongs to: its values of the deployment labels ("" where it lacks one)."""
    if not deployment_labels:
        return ()  # the default: one grading per route
    values = dict(replica)
    return tuple((name, values.get(name, "")) for name in deployment_labels)


@dataclass
class RouteData:
    """One (replica, route)'s answer for one window, in the sidecar's key layout. Equal data give
    equal derivations (the evaluator reuses a replica's stats while its window is unchanged)."""

    route: str
    model_name: str
    increases: dict[SeriesKey, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    engines: set[str] = field(default_factory=set)
    positions: set[int] = field(default_factory=set)
    spec: bool = False
    legacy_itl: bool = False
    engine: str = DEFAULT_ENGINE  # the serving engine whose series these are (queries.ENGINE_LABEL)
    # A gauge-only engine's window means (a Gauge, or BATCH), one per series of the route.
    gauges: dict[str, list[float]] = field(default_factory=dict)


def routes_for(labels: Mapping[str, str], matchers: Sequence[RouteMatcher]) -> list[tuple[str, str]]:
    """(route, model_name) pairs a series belongs to: configured matchers, else one route per model."""
    model = labels.get("model_name", "")
    if matchers:
        return [(m.route, m.match.get("model_name", model)) for m in matchers if m.matches(labels)]
    return [(model or "default", model)]


class _Identity:
    """One (replica, model, engine) of an answer: every family and bucket of it shares its routes.
    `targets` are this poll's RouteData of those routes (resolved on its first series of a poll)."""

    __slots__ = ("engine", "poll", "replica", "routes", "series", "targets")

    def __init__(self, replica: ReplicaKey, series: str, routes: list[tuple[str, str]], engine: str) -> None:
        self.replica = replica
        self.series = series
        self.routes = routes
        self.engine = engine
        self.poll = -1
        self.targets: list[RouteData] = []


# What a label set contributes: nothing (no family label), only its identity (an unknown family,
# an unreadable position or bound), a counter increase, the running gauge's mean, the count, or
# a gauge-only engine's window mean (its SeriesKey.counter names the gauge).
_NO_FAMILY, _IDENTITY_ONLY, _COUNTER, _RUNNING, _SAMPLES, _GAUGE = range(6)


# A label set's plan: (action, identity, counter key, position of Counter.POS, spec family, legacy ITL).
_Plan = tuple[int, _Identity | None, SeriesKey, int | None, bool, bool]
_NO_KEY = SeriesKey("", "")
_NOTHING: _Plan = (_NO_FAMILY, None, _NO_KEY, None, False, False)


class PlanCache:
    """Label-set plans (and the identities they name) shared by the groupers of one config's
    windows: a plan is a pure function of the label set, the replica labels and the matchers.
    Keys: a packed series' label-set text (bytes), or a decoded one's names + values (a tuple)."""

    __slots__ = ("calls", "identities", "plans", "seen", "series_keys")

    def __init__(self) -> None:
        self.plans: dict[object, _Plan] = {}
        self.identities: dict[tuple[object, ...], _Identity] = {}
        # One SeriesKey per (counter, engine, position or bound): the same for every replica.
        self.series_keys: dict[SeriesKey, SeriesKey] = {}
        self.calls = 0  # group() calls, all groupers: an _Identity's targets are one call's
        self.seen: dict[int, int] = {}  # each grouper's last answer size

    def forget_gone(self, grouper: int, seen: int) -> None:
        """Replicas come and go: forget label sets gone for good (every window's answer holds
        about the same ones, so the sum of the last answers bounds what is still asked)."""
        self.seen[grouper] = seen
        if len(self.plans) > 2 * sum(self.seen.values()) + 1024:
            self.plans.clear()
            self.identities.clear()
            self.series_keys.clear()

    def series_key(self, key: SeriesKey) -> SeriesKey:
        return self.series_keys.setdefault(key, key)


class WindowGrouper:
    """Groups one window's answers poll after poll, keeping each label set's plan in between
    (in `plans`, shared with the other windows' groupers of the same replica labels and matchers)."""

    def __init__(
        self, replica_labels: tuple[str, ...], matchers: Sequence[RouteMatcher], plans: PlanCache | None = None
    ) -> None:
        self.replica_labels = replica_labels
        self.matchers = tuple(matchers)
        self._names = (*replica_labels, "model_name", "engine", promql.ENGINE_LABEL)
        self._defaults = (*("" for _ in replica_labels), "\0", "", DEFAULT_ENGINE)
        self._cache = plans if plans is not None else PlanCache()
        self._plans = self._cache.plans
        self._identities = self._cache.identities

    def group(self, samples: Iterable[Sample] | Vector) -> dict[RouteKey, RouteData]:
        """One window query's series -> per (replica, route) increases keyed as the sidecar keys them.
        A Vector's labels and values are read here, in the same pass (PromQueryError "invalid" for
        a malformed series, as PromClient.query raises)."""
        self._cache.calls += 1
        out: dict[RouteKey, RouteData] = {}
        try:
            if isinstance(samples, Vector) and samples.keys is not None and samples.values is not None:
                seen = len(samples.keys)
                self._apply(out, self._packed_plans(samples.keys), samples.values)
            else:
                items = (
                    samples.items
                    if isinstance(samples, Vector)
                    else [{"metric": labels, "value": (None, value)} for labels, value in samples]
                )
                seen = len(items)
                self._apply(out, *self._raw_plans(items))
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            raise PromQueryError("invalid", f"malformed vector sample ({type(exc).__name__})") from None
        self._cache.forget_gone(id(self), seen)
        return out

    def _packed_plans(self, keys: list[bytes]) -> list[_Plan]:
        """A streamed answer's plans: one dict lookup per series (its label set's interned text)."""
        plans = self._plans
        get = plans.get
        out = []
        for key in keys:
            plan = get(key)
            if plan is None:
                labels = json.loads(key)  # validated here, once per label set (ValueError: invalid)
                if not isinstance(labels, Mapping):
                    raise TypeError("series labels are not an object")
                hash(tuple(labels.values()))  # a list or object as a label value: invalid, as _raw_plans finds
                plan = plans[key] = self._plan(labels)
            out.append(plan)
        return out

    def _raw_plans(self, items: Sequence[object]) -> tuple[list[_Plan], list[float]]:
        """The query API's series as decoded: {"metric": {...}, "value": [t, "v"]}."""
        plans = self._plans
        out, values = [], []
        for item in items:
            labels = item["metric"]  # type: ignore[index]
            values.append(float(item["value"][1]))  # type: ignore[index]  # Prometheus writes "NaN", "+Inf", "-Inf"
            # Names too: a missing label must not alias another. (A non-object fails here: invalid.)
            label_set = (*labels, *labels.values())
            plan = plans.get(label_set)
            if plan is None:
                if not isinstance(labels, Mapping):
                    raise TypeError("series labels are not an object")
                plan = plans[label_set] = self._plan(labels)
            out.append(plan)
        return out, values

    def _apply(self, out: dict[RouteKey, RouteData], plans: Sequence[_Plan], values: Iterable[float]) -> None:
        """Each series' value added where its plan says (one pass, inlined)."""
        poll = self._cache.calls
        isfinite = math.isfinite
        for plan, value in zip(plans, values, strict=True):
            action, identity, key, position, spec, legacy = plan
            if identity is None or not isfinite(value):
                continue
            if identity.poll != poll:
                identity.poll = poll
                identity.targets = [
                    self._data(out, identity.replica, r, m, identity.engine) for r, m in identity.routes
                ]
            if action == _COUNTER:
                increase = value if value > 0.0 else 0.0  # max(value, 0.0), the same sums
                for data in identity.targets:
                    increases = data.increases
                    increases[key] = increases.get(key, 0.0) + increase
                    if spec:
                        data.spec = True
                    if position is not None:
                        data.positions.add(position)
                    else:
                        data.engines.add(identity.series)
                    if legacy:
                        data.legacy_itl = True
            elif action == _RUNNING:
                series = identity.series
                for data in identity.targets:
                    data.running[series] = data.running.get(series, 0.0) + value
                    data.engines.add(series)
            elif action == _SAMPLES:
                for data in identity.targets:
                    data.samples = max(data.samples, int(value))
            elif action == _GAUGE:
                for data in identity.targets:
                    data.gauges.setdefault(key.counter, []).append(value)

    @staticmethod
    def _data(out: dict[RouteKey, RouteData], replica: ReplicaKey, route: str, model: str, engine: str) -> RouteData:
        data = out.get((replica, route))
        if data is None:
            data = out[(replica, route)] = RouteData(route, model, engine=engine)
        return data

    def _plan(self, labels: Mapping[str, str]) -> _Plan:
        family = labels.get(promql.FAMILY_LABEL)
        if family is None:
            return _NOTHING
        name = tuple(map(labels.get, self._names, self._defaults))
        identity = self._identities.get(name)
        if identity is None:
            replica: ReplicaKey = tuple(zip(self.replica_labels, name[:-3], strict=False))
            series = series_id(labels.get("engine"), labels.get("model_name"))
            identity = self._identities[name] = _Identity(
                replica, series, routes_for(labels, self.matchers), name[-1] or DEFAULT_ENGINE
            )
        if family == promql.RUNNING_MEAN:
            return (_RUNNING, identity, _NO_KEY, None, False, False)
        if family == promql.SAMPLES:
            return (_SAMPLES, identity, _NO_KEY, None, False, False)
        if family.startswith(promql.GAUGE_PREFIX):
            gauge = SeriesKey(family.removeprefix(promql.GAUGE_PREFIX), identity.series)
            return (_GAUGE, identity, self._cache.series_key(gauge), None, False, False)
        kind = _FAMILY_KIND.get(family)
        if kind is None:
            return (_IDENTITY_ONLY, identity, _NO_KEY, None, False, False)
        detail: float | int | None = None
        if kind in POSITION_COUNTERS:
            try:
                detail = int(labels.get("position", ""))
            except (TypeError, ValueError):
                return (_IDENTITY_ONLY, identity, _NO_KEY, None, False, False)
        elif kind == Counter.ITL_BUCKET:
            try:
                detail = float(labels["le"])
            except (KeyError, TypeError, ValueError):
                return (_IDENTITY_ONLY, identity, _NO_KEY, None, False, False)
        return (
            _COUNTER,
            identity,
            self._cache.series_key(series_key(kind, identity.series, detail)),
            int(detail) if kind == Counter.POS and detail is not None else None,  # the positions that give K
            kind in _SPEC_KINDS,
            promql.SCHEMA_LABEL in labels,
        )


def group_window(
    samples: Iterable[Sample] | Vector, replica_labels: tuple[str, ...], matchers: Sequence[RouteMatcher]
) -> dict[RouteKey, RouteData]:
    """One window query's samples grouped without keeping plans (WindowGrouper keeps them)."""
    return WindowGrouper(replica_labels, matchers).group(samples)


class _FleetView(WindowView):
    """A window whose first entry holds no counters: its increases are the last entry's values
    (what WindowView.increases computes key by key), handed over as one copy."""

    def increases(self) -> dict[SeriesKey, float]:
        return dict(self.last.totals)


def window_view(data: RouteData, replica: ReplicaKey, now: float, span: float) -> WindowView | None:
    """A WindowView the sidecar's derivations read exactly as they read their own: increases from
    the first to the last entry, `samples` entries, and the running gauge's mean over them."""
    if data.samples < 2:
        return None  # like the sidecar: a ratio needs two samples
    schema = SCHEMA_V1_LEGACY_ITL if data.legacy_itl else SCHEMA_V1
    engine = registry.BY_NAME.get(data.engine, registry.DEFAULT)
    if engine.window_gauges:
        return _gauge_window_view(data, engine.schema_of(()), replica, now, span)
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
        engine=data.engine,
    )
    first = Entry(now - span, {}, snapshot)  # a key missing from `first` counts from 0
    last = Entry(now, data.increases, snapshot)
    middle = (Entry(now - span / 2, {}, snapshot),) * (data.samples - 2)
    return _FleetView(first, last, (first, *middle, last))


def _gauge_window_view(data: RouteData, schema: str, replica: ReplicaKey, now: float, span: float) -> WindowView:
    """A gauge-only engine's window: Prometheus computed the gauge means over the active scrapes,
    so the view holds them as one reading after one active interval, which windows/gauges.py
    reads back unchanged (no reading, no activity: the values stay absent)."""
    means = {name: sum(values) / len(values) for name, values in data.gauges.items() if values}
    batch = means.pop(BATCH, None)
    snapshot = RouteSnapshot(
        t=now,
        target=replica_name(replica),
        route=data.route,
        model_name=data.model_name,
        schema=schema,
        spec_present=data.spec or any(value > 0 for value in means.values()),
        engines=tuple(sorted(data.engines)),
        configured_k=gauge_k(means),
        counters=data.increases,
        created={},
        running={"batch": batch} if batch is not None else {},
        engine=data.engine,
        gauges=means,
        gauge_acceptance=True,
    )
    before = dataclasses.replace(snapshot, running={}, gauges={})
    first = Entry(now - span, {}, before)
    middle = (Entry(now - span / 2, {}, before),) * (data.samples - 2)
    last = Entry(now, data.increases, snapshot)
    return _FleetView(first, last, (first, *middle, last))


def newest_samples(freshness: Iterable[Sample], replica_labels: tuple[str, ...]) -> dict[ReplicaKey, float]:
    """Each replica's newest sample time from the freshness query."""
    newest: dict[ReplicaKey, float] = {}
    for sample in freshness:
        replica = tuple((name, sample.labels.get(name, "")) for name in replica_labels)
        if math.isfinite(sample.value):
            newest[replica] = max(newest.get(replica, -math.inf), sample.value)
    return newest
