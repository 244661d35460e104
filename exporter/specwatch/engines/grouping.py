"""One target's parsed families -> one canonical RouteSnapshot per route, for any engine.

The engine is an EngineSchema (engines/schema.py): detected from each payload's families
(registry.detect) unless the target names one. The table says where each sample goes; this module
holds the grouping with its remembered plan and the bounds on what a payload may make of it
(positions, routes, engines), one concern (families -> snapshots) sharing its helpers.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import NamedTuple

from specwatch.engines import registry
from specwatch.engines.schema import EngineSchema
from specwatch.engines.series import (
    POSITION_COUNTERS,
    Counter,
    Gauge,
    RouteMatcher,
    RouteSnapshot,
    SeriesKey,
    reset_group,
)
from specwatch.exposition import ExpositionError, Family, Labels, Sample, Selector
from specwatch.exposition.lastpoll import picker


def _without(labels: dict[str, str], names: tuple[str, ...]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in names} if names else labels


Route = tuple[str, str]  # (route name, its model_name if the sample creates the route)


class _Placement(NamedTuple):
    """Where one sample goes: its series key (None: skipped), its engine and the routes it feeds."""

    key: SeriesKey | None
    engine: str
    routes: tuple[Route, ...]


@dataclass
class _RoutePlan:
    """Where one route's values come from: positions in the poll's flat list of sample values."""

    route: str
    model_name: str
    counters: list[tuple[SeriesKey, int]] = field(default_factory=list)
    created: list[tuple[SeriesKey, int]] = field(default_factory=list)
    running: list[tuple[str, int]] = field(default_factory=list)
    v0: list[tuple[str, int]] = field(default_factory=list)  # (EngineSchema.lifetime_gauges value, position)
    gauges: list[tuple[str, int]] = field(default_factory=list)  # (EngineSchema.window_gauges value, position)
    engines: set[str] = field(default_factory=set)
    positions: set[int] = field(default_factory=set)
    spec: bool = False
    admitted: set[str] = field(default_factory=set)  # series kept (at most MAX_ENGINES_PER_ROUTE)
    # counters_of's shortcut, made at the first poll read through this plan (the plan is complete then).
    read_counters: Callable[[Sequence[float]], dict[SeriesKey, float]] | None = None

    def counters_of(self, values: Sequence[float]) -> dict[SeriesKey, float]:
        """`summed_counters(self.counters, values)`; when no key repeats (one series per key, the
        usual route), the values are read in one pass in C."""
        read = self.read_counters
        if read is None:
            read = self.read_counters = counter_reader(self.counters)
        return read(values)


def summed_counters(counters: Sequence[tuple[SeriesKey, int]], values: Sequence[float]) -> dict[SeriesKey, float]:
    """Each key's values at its positions, added from 0.0 in plan order."""
    out: dict[SeriesKey, float] = {}
    for key, at in counters:
        out[key] = out.get(key, 0.0) + values[at]
    return out


def counter_reader(counters: Sequence[tuple[SeriesKey, int]]) -> Callable[[Sequence[float]], dict[SeriesKey, float]]:
    """summed_counters over these (key, position) pairs, as a function of the values: with no key
    twice, each key's one value read by position and added to 0.0 (summed_counters' first addition,
    which makes -0.0 0.0), all in C."""
    keys = tuple(key for key, _ in counters)
    if len(set(keys)) != len(keys):
        pairs = tuple(counters)
        return lambda values: summed_counters(pairs, values)
    pick = picker(tuple(at for _, at in counters))
    add = operator.add

    def read(values: Sequence[float]) -> dict[SeriesKey, float]:
        return dict(zip(keys, map(add, repeat(0.0), pick(values)), strict=True))

    return read


@dataclass(frozen=True)
class _Plan:
    """How a poll of one shape (the same series in the same order) becomes route snapshots."""

    parts: tuple[tuple[str, bool], ...]  # (family, its _created samples?) in the order values are read
    routes: tuple[_RoutePlan, ...]
    dropped: Mapping[str, int]  # routes and engines past the bounds, left out of `routes`


#: Distinct (family, sample) placements a Grouping remembers: several times the largest payload's
#: (docs/benchmarks.md, "Chart defaults and constants").
PLACEMENT_CACHE_SIZE = 4096
#: ... and the label characters they may hold together (a sample's labels are bounded one by one
#: by the parser; this bounds what stays remembered across polls of ever-new long labels).
PLACEMENT_CACHE_CHARS = 4 << 20

# Bounds on what a payload controls (docs/architecture.md §2, "Bounds"). Constants, not config
# keys: each is far above anything vLLM produces, and a payload past one is broken or hostile.
#: Draft positions accepted without a stated K: `position` < 64. vLLM sets no maximum on
#: num_speculative_tokens, but real K's stay far below (suffix decoding's default tree depth is 24)
#: and the config's own `draft.k` stops at 64. Past the limit the payload is rejected (`invalid`):
#: every position up to the largest is a draft length K the verdict rests on.
MAX_DRAFT_POSITIONS = 64
#: With a stated K (draft.config's num_speculative_tokens, else draft.k) positions up to K + slack
#: pass: a K raised on the server before the config keeps its metrics (the config check flags it).
POSITION_SLACK = 8
#: ... however large the stated K: per-position work stays small.
POSITION_CEILING = 1024
#: Routes one target's payload may create (one per model_name when no route is configured; one
#: vLLM process serves one model name). Routes past it, in payload order, are dropped and counted.
MAX_ROUTES_PER_TARGET = 64
#: Engines (the `engine` label, data-parallel ranks; "engine/model" series of a route spanning
#: models) one route keeps: per payload, engines past it (in payload order) are dropped and
#: counted; across polls, the pipeline forgets the least recently seen ones past it. 64 DP ranks
#: of full vLLM metrics already come near the parser's MAX_SELECTED_SERIES.
MAX_ENGINES_PER_ROUTE = 64
#: The names of Grouping.dropped (and of specwatch_payload_dropped_total's `limit`).
DROPPED_KINDS = ("routes", "engines")


def position_limit(stated_k: int | None) -> int:
    """The first `position` a payload may not carry: MAX_DRAFT_POSITIONS, or K + POSITION_SLACK
    (at most POSITION_CEILING) for a stated K."""
    if stated_k is None:
        return MAX_DRAFT_POSITIONS
    return min(stated_k + POSITION_SLACK, POSITION_CEILING)


_RUNNING_SOURCE, _V0_SOURCE, _GAUGE_SOURCE = -1, -2, -3

#: Consecutive polls another engine's payload must hold before a detected target is taken to speak
#: it: an engine flipping from poll to poll is a mismatch, never a restart of the windows.
ENGINE_SWITCH_POLLS = 3

#: A parser of every engine's names: what detection reads a payload of an unknown engine with.
SELECTOR = Selector(registry.FAMILIES)


class Grouping:
    """Groups one target's parsed families into one snapshot per route.

    The engine: `engine` when the target names one, else the one each payload's families show
    (registry.detect); a payload of another engine than the last is planned afresh.

    With matchers, each route takes the samples its labels match (a sample may feed several
    routes). Without, there is one route per model_name, named after it (with route_prefix).
    Where a sample goes depends only on its family, name and labels: it is worked out once per
    distinct series and remembered, and a poll with the last poll's series in the same order (the
    parser's `Selector.shape`, vLLM's usual case) reuses the whole plan, so only its values are read.
    """

    def __init__(
        self,
        matchers: Iterable[RouteMatcher] | None = None,
        route_prefix: str = "",
        selector: Selector | None = None,
        *,
        max_position: int = MAX_DRAFT_POSITIONS,
        engine: EngineSchema | None = None,
    ) -> None:
        self.matchers = tuple(matchers or ())
        self.route_prefix = route_prefix
        # Each target its own selectors (the parser's memory of the last poll is per target), one
        # per engine: a parser of the engine's own names keeps the scan of a poll as cheap as with
        # one engine. A given selector parses every poll (its families: every engine's, or a test's).
        self._given_selector = selector
        self._selectors: dict[str, Selector] = {}
        self.fixed_engine = engine  # None: detected per payload
        # The engine the last payload looks like when it held none of the fixed engine's families.
        self.mismatched: EngineSchema | None = None
        self.engine: EngineSchema = engine if engine is not None else registry.DEFAULT  # the last payload's
        # Detected targets: whether a payload was read as self.engine yet, and the other engine the
        # last payloads spoke with how many polls in a row (ENGINE_SWITCH_POLLS).
        self._settled = False
        self._switching: tuple[EngineSchema, int] | None = None
        self.max_position = max_position  # a `position` at or past it rejects the payload
        # What the last parse left out past the bounds (DROPPED_KINDS -> count), and whether it
        # worked out a new plan (False: the same series, routes and engines as the poll before).
        self.dropped: Mapping[str, int] = dict.fromkeys(DROPPED_KINDS, 0)
        self.replanned = True
        self._placements: dict[tuple[int, str, Labels], _Placement] = {}
        self._placement_chars = 0
        self._shape: object | None = None
        self._plan: _Plan | None = None
        # For the plan of a parser shape: the schema, and where each value the plan reads sits
        # in the parser's values (Selector.parse_values), so that poll needs no families.
        self._plan_schema = ""
        self._pick_values: Callable[[Sequence[float]], tuple[float, ...]] | None = None

    @property
    def selector(self) -> Selector:
        """The parser of the next poll: the given one, else the current engine's."""
        if self._given_selector is not None:
            return self._given_selector
        selector = self._selectors.get(self.engine.name)
        if selector is None:
            selector = self._selectors[self.engine.name] = Selector(self.engine.families)
        return selector

    def _routes(self, labels: Mapping[str, str]) -> tuple[Route, ...]:
        model = labels.get(self.engine.model_label, "")
        if self.matchers:
            return tuple((m.route, m.match.get("model_name", model)) for m in self.matchers if m.matches(labels))
        return ((self.route_prefix + (model or "default"), model),)

    def set_position_limit(self, max_position: int) -> None:
        """A new bound on `position` (the stated K changed): placements and plan are worked out anew."""
        if max_position != self.max_position:
            self.max_position = max_position
            self._forget_plans()

    def _forget_plans(self) -> None:
        self._placements.clear()
        self._placement_chars = 0
        self._shape, self._plan, self._pick_values = None, None, None

    def _use_engine(self, families: Mapping[str, Family]) -> None:
        """The payload's engine; placements are the engine's, so another engine plans afresh."""
        engine = self.fixed_engine or registry.detect(families, self.engine)
        if engine is not self.engine:
            self.engine = engine
            self._forget_plans()

    def _place(self, source: int, sample: Sample) -> _Placement:
        cache_key = (source, sample.name, sample.labels)
        placed = self._placements.get(cache_key)
        if placed is not None:
            return placed
        labels = dict(sample.labels)
        engine = self.engine.series_id(labels)
        if source >= 0:
            counter_source = self.engine.counters[source]
            key = counter_source.key_of(sample.name, labels, engine) if counter_source.selects(labels) else None
            if key is not None and key.counter in POSITION_COUNTERS and not 0 <= int(key.sub or 0) < self.max_position:
                # Checked once per distinct series (placements are remembered); never cached.
                position = labels[self.engine.position_label][:24]
                raise ExpositionError(
                    "invalid",
                    f"{counter_source.families[0]} has position={position!r}: draft positions stop "
                    f"before {self.max_position} (docs/architecture.md, Bounds)",
                )
            routes = self._routes(_without(labels, counter_source.unmatched_labels)) if key is not None else ()
        else:
            key, routes = None, self._routes(labels)
        placed = _Placement(key, engine, routes)
        chars = sum(len(k) + len(v) for k, v in sample.labels)
        if len(self._placements) >= PLACEMENT_CACHE_SIZE or self._placement_chars + chars > PLACEMENT_CACHE_CHARS:
            self._placements.clear()  # bounded, whatever targets send
            self._placement_chars = 0
        self._placements[cache_key] = placed
        self._placement_chars += chars
        return placed

    def _make_plan(self, families: Mapping[str, Family], schema: str) -> _Plan:
        parts: list[tuple[str, bool]] = []
        plans: dict[str, _RoutePlan] = {}
        position = 0
        # Routes come from the payload only without matchers (the config bounds those it names).
        route_cap = MAX_ROUTES_PER_TARGET if not self.matchers else None
        dropped_routes: set[str] = set()
        dropped_engines: set[tuple[str, str]] = set()

        def plans_for(routes: tuple[Route, ...], series: str) -> list[_RoutePlan]:
            """The plans of the routes a sample of `series` feeds, within the bounds."""
            out = []
            for route, model in routes:
                p = plans.get(route)
                if p is None:
                    if route_cap is not None and len(plans) >= route_cap:
                        dropped_routes.add(route)
                        continue
                    p = plans[route] = _RoutePlan(route, model)
                if series not in p.admitted:
                    if len(p.admitted) >= MAX_ENGINES_PER_ROUTE:
                        dropped_engines.add((route, series))
                        continue
                    p.admitted.add(series)
                out.append(p)
            return out

        def read(family: str, created: bool, samples: tuple[Sample, ...]) -> Iterator[tuple[int, Sample]]:
            nonlocal position
            parts.append((family, created))
            start, position = position, position + len(samples)
            return enumerate(samples, start)

        spoken = self.engine
        for index, source in enumerate(spoken.counters):
            name = next((name for name in source.families if name in families), None)
            if name is None or schema in source.skip_in:
                continue
            fam = families[name]
            for at, s in read(name, False, fam.samples):
                key, _, routes = self._place(index, s)
                if key is None:
                    continue
                for p in plans_for(routes, key.series):
                    p.counters.append((key, at))
                    if source.names_engines:
                        p.engines.add(key.series)
                    if source.shows_speculation:
                        p.spec = True
                    if key.counter == Counter.POS:
                        p.positions.add(key.position)
            for at, s in read(name, True, fam.created):
                key, _, routes = self._place(index, s)
                if key is not None:
                    for p in plans_for(routes, key.series):
                        p.created.append((reset_group(key), at))
        running = families.get(spoken.running) if spoken.running is not None else None
        if running is not None:
            for at, s in read(running.name, False, running.samples):
                _, engine, routes = self._place(_RUNNING_SOURCE, s)
                for p in plans_for(routes, engine):
                    p.running.append((engine, at))
                    p.engines.add(engine)
        for gauge, attr in spoken.lifetime_gauges.items():
            v0_family = families.get(gauge)
            if v0_family is not None:
                for at, s in read(gauge, False, v0_family.samples):
                    _, engine, routes = self._place(_V0_SOURCE, s)
                    for p in plans_for(routes, engine):
                        p.v0.append((attr, at))
        for gauge, name in spoken.window_gauges.items():
            gauge_family = families.get(gauge)
            if gauge_family is not None:
                for at, s in read(gauge, False, gauge_family.samples):
                    _, engine, routes = self._place(_GAUGE_SOURCE, s)
                    for p in plans_for(routes, engine):
                        p.gauges.append((name, at))
        dropped = {"routes": len(dropped_routes), "engines": len(dropped_engines)}
        return _Plan(tuple(parts), tuple(plans.values()), dropped)

    def snapshots(
        self, families: Mapping[str, Family], *, t: float, target: str, shape: object | None = None
    ) -> list[RouteSnapshot]:
        """The route snapshots of one poll. ``shape``: the parser's token for the families' layout
        (`Selector.shape`): families of the same shape have the same series in the same order."""
        if shape is not None and shape is self._shape and self._plan is not None:
            # The last poll's series in the same order: the same engine and schema, the same plan.
            plan, schema = self._plan, self._plan_schema
            self.replanned = False
        else:
            self._use_engine(families)
            schema = self.engine.schema_of(families)
            plan = self._make_plan(families, schema)
            self._shape, self._plan = (shape, plan) if shape is not None else (None, None)
            self._plan_schema, self._pick_values = schema, None
            self.replanned = True
        self.dropped = plan.dropped
        values = [
            s.value
            for name, created in plan.parts
            for s in (families[name].created if created else families[name].samples)
        ]
        return self._emit(plan, values, schema, t, target)

    def _emit(self, plan: _Plan, values: Sequence[float], schema: str, t: float, target: str) -> list[RouteSnapshot]:
        """The route snapshots from the values in the order the plan reads them."""
        result = []
        for p in plan.routes:
            counters = p.counters_of(values)
            running: dict[str, float] = {}
            for engine, at in p.running:
                running[engine] = running.get(engine, 0.0) + values[at]
            spec = p.spec
            v0: dict[str, float | None] = {"v0_acceptance_rate": None, "v0_efficiency": None}
            for attr, at in p.v0:
                if math.isfinite(values[at]):
                    v0[attr] = values[at]
                    spec = True
            gauges = _gauge_readings(p.gauges, values)
            spec = spec or any(value > 0 for value in gauges.values())  # 0: the engine's unset value
            result.append(
                RouteSnapshot(
                    t=t,
                    target=target,
                    route=p.route,
                    model_name=p.model_name,
                    schema=schema,
                    spec_present=spec,
                    engines=tuple(sorted(p.engines)),
                    configured_k=(max(p.positions) + 1) if p.positions else gauge_k(gauges),
                    counters=counters,
                    created={group: values[at] for group, at in p.created},
                    running=running,
                    v0_acceptance_rate=v0["v0_acceptance_rate"],
                    v0_efficiency=v0["v0_efficiency"],
                    engine=self.engine.name,
                    gauges=gauges,
                    gauge_acceptance=bool(self.engine.window_gauges),
                )
            )
        return result

    def parse(self, text: str, *, t: float, target: str) -> list[RouteSnapshot]:
        """Exposition text -> route snapshots. Raises exposition.ExpositionError on any bad input.

        A poll with the last poll's series in the same order skips the families: its values go
        straight to the remembered plan (the same values snapshots() would read from them). A poll
        holding none of the current engine's families is read once with every engine's names: if
        another engine's are there, the target speaks that engine from now on."""
        selector = self.selector
        families, values = selector.parse_values(text)
        shape = selector.shape
        if families is None:
            assert shape is not None and values is not None
            if shape is self._shape and self._plan is not None:
                if self._pick_values is None:
                    self._pick_values = picker(
                        tuple(i for name, created in self._plan.parts for i in shape.positions(name, created))
                    )
                self.replanned, self.dropped = False, self._plan.dropped
                self._switching = None
                return self._emit(self._plan, self._pick_values(values), self._plan_schema, t, target)
            families = shape.families_of(values)
        self.mismatched = None
        if not families and self._given_selector is None:
            spoken = registry.detect(SELECTOR.parse(text), self.engine)
            if spoken is not self.engine and self.fixed_engine is not None:
                # Pinned to one engine, the payload speaks another: no route at all, never silently.
                self.mismatched = spoken
                raise ExpositionError(
                    "engine_mismatch",
                    f"the target's engine is {self.fixed_engine.name} but the payload looks like {spoken.name}",
                )
            if spoken is not self.engine:
                self._confirm_switch(spoken)
                self.engine = spoken
                self._forget_plans()
                return self.parse(text, t=t, target=target)  # the new engine's families are there
        snaps = self.snapshots(families, t=t, target=target, shape=shape)
        self._settled, self._switching = self._settled or bool(snaps), None  # read as its engine
        return snaps

    def _confirm_switch(self, spoken: EngineSchema) -> None:
        """A detected target that has spoken one engine takes another only after
        ENGINE_SWITCH_POLLS payloads of it in a row; until then each is a failed poll
        (engine_mismatch) and the windows keep the engine they have."""
        if not self._settled:
            return
        previous = self._switching
        polls = previous[1] + 1 if previous is not None and previous[0] is spoken else 1
        if polls >= ENGINE_SWITCH_POLLS:
            self._switching = None
            return
        self._switching = (spoken, polls)
        self.mismatched = spoken
        raise ExpositionError(
            "engine_mismatch",
            f"the target spoke {self.engine.name} but the payload looks like {spoken.name} "
            f"({polls} of {ENGINE_SWITCH_POLLS} polls in a row before it is taken as a new engine)",
        )


def gauge_k(gauges: Mapping[str, float]) -> int | None:
    """The draft length an engine states as a gauge (SGLang's active speculative_num_steps)."""
    k = gauges.get(Gauge.DRAFT_LENGTH)
    return round(k) if k is not None and 1 <= k < POSITION_CEILING else None


def _gauge_readings(placed: Sequence[tuple[str, int]], values: Sequence[float]) -> dict[str, float]:
    """Each window gauge's reading: the mean of its finite values over the route's series."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for name, at in placed:
        if math.isfinite(values[at]):
            sums[name] = sums.get(name, 0.0) + values[at]
            counts[name] = counts.get(name, 0) + 1
    return {name: total / counts[name] for name, total in sums.items()}


def snapshots(
    families: Mapping[str, Family],
    *,
    t: float,
    target: str,
    matchers: Iterable[RouteMatcher] | None = None,
    route_prefix: str = "",
) -> list[RouteSnapshot]:
    """Group the parsed families into one snapshot per route (see Grouping; nothing remembered)."""
    return Grouping(matchers, route_prefix, SELECTOR).snapshots(families, t=t, target=target)


def parse_payload(
    text: str, *, t: float, target: str, matchers: Iterable[RouteMatcher] | None = None, route_prefix: str = ""
) -> list[RouteSnapshot]:
    """Exposition text -> route snapshots. Raises exposition.ExpositionError on any bad input."""
    return snapshots(SELECTOR.parse(text), t=t, target=target, matchers=matchers, route_prefix=route_prefix)
