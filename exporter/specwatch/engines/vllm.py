"""vLLM's metric schema -> one canonical RouteSnapshot per route.

Reads the V1 names (0.8.3 .. 0.33), the pre-0.10.2 ITL name (`time_per_output_token_seconds`)
and the V0 engine's gauges. Counters keep one series per (engine[, position | le]) so the
window can apply the Prometheus reset rule per series before summing over engines.
docs/architecture.md §5 lists each name per vLLM version and its quirks.

About 500 lines on purpose: the name table, the snapshot types, the per-target grouping with its
remembered plan and the bounds on what a payload may make of them (positions, routes, engines) are
one concern (families -> snapshots) and share its helpers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from specwatch.exposition import ExpositionError, Family, Labels, Sample, Selector
from specwatch.exposition.lastpoll import picker

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
RUNNING = "vllm:num_requests_running"
GENERATION = "vllm:generation_tokens"
PROMPT = "vllm:prompt_tokens"  # prefill tokens: the learned step-time curve counts them per step
ITL = "vllm:inter_token_latency_seconds"
ITL_LEGACY = "vllm:time_per_output_token_seconds"  # same observations; removed in 0.15
ITERATION_TOKENS = "vllm:iteration_tokens_total"  # a histogram despite the name: one obs per engine step
V0_ACCEPTANCE_RATE = "vllm:spec_decode_draft_acceptance_rate"  # lifetime ratio, V0 engine only
V0_EFFICIENCY = "vllm:spec_decode_efficiency"

FAMILIES: dict[str, str] = {
    DRAFTS: "counter",
    DRAFT_TOKENS: "counter",
    ACCEPTED: "counter",
    ACCEPTED_PER_POS: "counter",
    RUNNING: "gauge",
    GENERATION: "counter",
    PROMPT: "counter",
    ITL: "histogram",
    ITL_LEGACY: "histogram",
    ITERATION_TOKENS: "histogram",
    V0_ACCEPTANCE_RATE: "gauge",
    V0_EFFICIENCY: "gauge",
}

SCHEMA_V1 = "v1"
SCHEMA_V1_LEGACY_ITL = "v1-legacy-itl"
SCHEMA_V0 = "v0"


class Counter(StrEnum):
    """The canonical counters of a route, whatever the engine or the source calls them: the
    `counter` of a SeriesKey, the family tag of fleet mode's queries and what the learner reads."""

    DRAFTS = "drafts"
    DRAFT_TOKENS = "draft_tokens"
    ACCEPTED = "accepted"
    POS = "pos"  # accepted tokens at one draft position (SeriesKey.sub = the position)
    GEN = "gen"  # generated output tokens
    ITL_BUCKET = "itl_bucket"  # SeriesKey.sub = the bucket's upper bound `le`
    ITL_SUM = "itl_sum"
    ITL_COUNT = "itl_count"
    STEPS = "steps"  # engine steps (the iteration-tokens histogram's count)
    ITL = "itl"  # the reset group (and `_created`) of one engine's whole ITL histogram
    PROMPT = "prompt"  # prefill tokens: the learned step-time curve counts them per step


_ITL_PARTS = (Counter.ITL_BUCKET, Counter.ITL_SUM, Counter.ITL_COUNT)


class SeriesKey(NamedTuple):
    """One counter series of a route, e.g. SeriesKey(Counter.POS, "0", 2): engine 0's accepted tokens at
    position 2. Deltas are taken per series, before any sum over engines or positions."""

    counter: str  # a Counter: DRAFTS, POS, ITL_BUCKET, ...
    series: str  # the engine, or "engine/model" when a route spans several models
    sub: float | None = None  # the position of Counter.POS, the upper bound `le` of Counter.ITL_BUCKET

    @property
    def position(self) -> int:
        assert self.counter == Counter.POS and self.sub is not None
        return int(self.sub)

    @property
    def le(self) -> float:
        assert self.counter == Counter.ITL_BUCKET and self.sub is not None
        return float(self.sub)


def reset_group(key: SeriesKey) -> SeriesKey:
    """Series that reset together: a histogram resets as a whole (per engine)."""
    if key.counter in _ITL_PARTS:
        return SeriesKey(Counter.ITL, key.series)
    return key


@dataclass(frozen=True)
class RouteSnapshot:
    t: float
    target: str
    route: str
    model_name: str
    schema: str
    spec_present: bool
    engines: tuple[str, ...]
    configured_k: int | None
    counters: Mapping[SeriesKey, float]
    created: Mapping[SeriesKey, float]  # `_created` timestamp per reset group
    running: Mapping[str, float] = field(default_factory=dict)
    v0_acceptance_rate: float | None = None
    v0_efficiency: float | None = None


@dataclass(frozen=True)
class RouteMatcher:
    route: str
    match: Mapping[str, str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match.items())


SELECTOR = Selector(FAMILIES)


def detect_schema(families: Mapping[str, Family]) -> str:
    if V0_ACCEPTANCE_RATE in families:
        return SCHEMA_V0
    if ITL in families:
        return SCHEMA_V1
    if ITL_LEGACY in families:
        return SCHEMA_V1_LEGACY_ITL
    return SCHEMA_V1


def _series_id(labels: Mapping[str, str]) -> str:
    """One series of a canonical counter: its engine, and its model when a route spans several
    (a route matched on engine alone). Deltas are taken per series before any sum, so a series
    that appears or vanishes is a new series, never a jump of the sum."""
    engine = labels.get("engine", "0")
    model = labels.get("model_name")
    return f"{engine}/{model}" if model else engine


def _plain(counter: str) -> Callable[[str, Mapping[str, str], str], SeriesKey | None]:
    return lambda name, labels, series: SeriesKey(counter, series)


def _per_position(name: str, labels: Mapping[str, str], series: str) -> SeriesKey | None:
    try:
        return SeriesKey(Counter.POS, series, int(labels.get("position", "")))
    except ValueError:
        return None


def _itl_part(name: str, labels: Mapping[str, str], series: str) -> SeriesKey | None:
    if name.endswith("_bucket"):
        le = float(labels["le"])
        # le="-Inf" bounds no latency (it counts nothing a valid histogram can hold): dropped, or it
        # would be exported as a second `+Inf` bucket.
        return SeriesKey(Counter.ITL_BUCKET, series, le) if le != -math.inf else None
    if name.endswith("_sum"):
        return SeriesKey(Counter.ITL_SUM, series)
    return SeriesKey(Counter.ITL_COUNT, series)  # _count, and _created (whose reset group is the histogram)


def _engine_steps(name: str, labels: Mapping[str, str], series: str) -> SeriesKey | None:
    # Only the observation count matters: one observation per engine step.
    return SeriesKey(Counter.STEPS, series) if name.endswith(("_count", "_created")) else None


@dataclass(frozen=True)
class CounterSource:
    """How one vLLM family becomes counter series of a RouteSnapshot."""

    families: tuple[str, ...]  # the first one present is read (a renamed family's old name last)
    key_of: Callable[[str, Mapping[str, str], str], SeriesKey | None]  # (sample name, labels, series)
    shows_speculation: bool  # a sample of it means speculation is configured
    names_engines: bool  # its series list the route's engines
    in_v0: bool  # read from V0 engines too
    unmatched_labels: tuple[str, ...] = ()  # labels that do not select a route


COUNTER_SOURCES = (
    # V0's spec counters are sums of running totals (vLLM PR #15415): unusable, so not in_v0.
    CounterSource((DRAFTS,), _plain(Counter.DRAFTS), shows_speculation=True, names_engines=True, in_v0=False),
    CounterSource(
        (DRAFT_TOKENS,), _plain(Counter.DRAFT_TOKENS), shows_speculation=True, names_engines=True, in_v0=False
    ),
    CounterSource((ACCEPTED,), _plain(Counter.ACCEPTED), shows_speculation=True, names_engines=True, in_v0=False),
    CounterSource((GENERATION,), _plain(Counter.GEN), shows_speculation=False, names_engines=True, in_v0=True),
    CounterSource((PROMPT,), _plain(Counter.PROMPT), shows_speculation=False, names_engines=True, in_v0=True),
    CounterSource((ACCEPTED_PER_POS,), _per_position, shows_speculation=True, names_engines=False, in_v0=False),
    CounterSource(
        (ITL, ITL_LEGACY), _itl_part, shows_speculation=False, names_engines=True, in_v0=True, unmatched_labels=("le",)
    ),
    CounterSource((ITERATION_TOKENS,), _engine_steps, shows_speculation=False, names_engines=False, in_v0=True),
)


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
    v0: list[tuple[str, int]] = field(default_factory=list)  # ("v0_rate" | "v0_eff", position)
    engines: set[str] = field(default_factory=set)
    positions: set[int] = field(default_factory=set)
    spec: bool = False
    admitted: set[str] = field(default_factory=set)  # series kept (at most MAX_ENGINES_PER_ROUTE)


@dataclass(frozen=True)
class _Plan:
    """How a poll of one shape (the same series in the same order) becomes route snapshots."""

    parts: tuple[tuple[str, bool], ...]  # (family, its _created samples?) in the order values are read
    routes: tuple[_RoutePlan, ...]
    dropped: Mapping[str, int]  # routes and engines past the bounds, left out of `routes`


#: Distinct (family, sample) placements a Grouping remembers: 16 DP engines of vLLM have ~900.
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


_RUNNING_SOURCE, _V0_SOURCE = -1, -2


class Grouping:
    """Groups one target's parsed families into one snapshot per route.

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
    ) -> None:
        self.matchers = tuple(matchers or ())
        self.route_prefix = route_prefix
        # Each target its own selector: the parser's memory of the last poll is per target.
        self.selector = selector if selector is not None else Selector(FAMILIES)
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

    def _routes(self, labels: Mapping[str, str]) -> tuple[Route, ...]:
        model = labels.get("model_name", "")
        if self.matchers:
            return tuple((m.route, m.match.get("model_name", model)) for m in self.matchers if m.matches(labels))
        return ((self.route_prefix + (model or "default"), model),)

    def set_position_limit(self, max_position: int) -> None:
        """A new bound on `position` (the stated K changed): placements and plan are worked out anew."""
        if max_position != self.max_position:
            self.max_position = max_position
            self._placements.clear()
            self._placement_chars = 0
            self._shape, self._plan, self._pick_values = None, None, None

    def _place(self, source: int, sample: Sample) -> _Placement:
        cache_key = (source, sample.name, sample.labels)
        placed = self._placements.get(cache_key)
        if placed is not None:
            return placed
        labels = dict(sample.labels)
        engine = _series_id(labels)
        if source >= 0:
            counter_source = COUNTER_SOURCES[source]
            key = counter_source.key_of(sample.name, labels, engine)
            if key is not None and key.counter == Counter.POS and not 0 <= int(key.sub or 0) < self.max_position:
                # Checked once per distinct series (placements are remembered); never cached.
                raise ExpositionError(
                    "invalid",
                    f"{ACCEPTED_PER_POS} has position={labels['position'][:24]!r}: draft positions stop "
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

        for index, source in enumerate(COUNTER_SOURCES):
            name = next((name for name in source.families if name in families), None)
            if name is None or (schema == SCHEMA_V0 and not source.in_v0):
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
        running = families.get(RUNNING)
        if running is not None:
            for at, s in read(RUNNING, False, running.samples):
                _, engine, routes = self._place(_RUNNING_SOURCE, s)
                for p in plans_for(routes, engine):
                    p.running.append((engine, at))
                    p.engines.add(engine)
        for gauge, attr in ((V0_ACCEPTANCE_RATE, "v0_rate"), (V0_EFFICIENCY, "v0_eff")):
            v0_family = families.get(gauge)
            if v0_family is not None:
                for at, s in read(gauge, False, v0_family.samples):
                    _, engine, routes = self._place(_V0_SOURCE, s)
                    for p in plans_for(routes, engine):
                        p.v0.append((attr, at))
        dropped = {"routes": len(dropped_routes), "engines": len(dropped_engines)}
        return _Plan(tuple(parts), tuple(plans.values()), dropped)

    def snapshots(
        self, families: Mapping[str, Family], *, t: float, target: str, shape: object | None = None
    ) -> list[RouteSnapshot]:
        """The route snapshots of one poll. ``shape``: the parser's token for the families' layout
        (`Selector.shape`): families of the same shape have the same series in the same order."""
        schema = detect_schema(families)
        if shape is not None and shape is self._shape and self._plan is not None:
            plan = self._plan
            self.replanned = False
        else:
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
            counters: dict[SeriesKey, float] = {}
            for key, at in p.counters:
                counters[key] = counters.get(key, 0.0) + values[at]
            running: dict[str, float] = {}
            for engine, at in p.running:
                running[engine] = running.get(engine, 0.0) + values[at]
            spec = p.spec
            v0: dict[str, float | None] = {"v0_rate": None, "v0_eff": None}
            for attr, at in p.v0:
                if math.isfinite(values[at]):
                    v0[attr] = values[at]
                    spec = True
            result.append(
                RouteSnapshot(
                    t=t,
                    target=target,
                    route=p.route,
                    model_name=p.model_name,
                    schema=schema,
                    spec_present=spec,
                    engines=tuple(sorted(p.engines)),
                    configured_k=(max(p.positions) + 1) if p.positions else None,
                    counters=counters,
                    created={group: values[at] for group, at in p.created},
                    running=running,
                    v0_acceptance_rate=v0["v0_rate"],
                    v0_efficiency=v0["v0_eff"],
                )
            )
        return result

    def parse(self, text: str, *, t: float, target: str) -> list[RouteSnapshot]:
        """Exposition text -> route snapshots. Raises exposition.ExpositionError on any bad input.

        A poll with the last poll's series in the same order skips the families: its values go
        straight to the remembered plan (the same values snapshots() would read from them)."""
        families, values = self.selector.parse_values(text)
        shape = self.selector.shape
        if families is None:
            assert shape is not None and values is not None
            if shape is self._shape and self._plan is not None:
                if self._pick_values is None:
                    self._pick_values = picker(
                        tuple(i for name, created in self._plan.parts for i in shape.positions(name, created))
                    )
                self.replanned, self.dropped = False, self._plan.dropped
                return self._emit(self._plan, self._pick_values(values), self._plan_schema, t, target)
            families = shape.families_of(values)
        return self.snapshots(families, t=t, target=target, shape=shape)


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
