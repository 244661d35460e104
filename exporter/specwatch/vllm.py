"""vLLM's metric schema -> one canonical RouteSnapshot per route.

Reads the V1 names (0.8.3 .. 0.33), the pre-0.10.2 ITL name (`time_per_output_token_seconds`)
and the V0 engine's gauges. Counters keep one series per (engine[, position | le]) so the
window can apply the Prometheus reset rule per series before summing over engines.
See ../shared/vllm-metrics.md for where each name and quirk comes from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .exposition import Family, Sample, Selector

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
RUNNING = "vllm:num_requests_running"
GENERATION = "vllm:generation_tokens"
PROMPT = "vllm:prompt_tokens"   # prefill tokens: the learned step-time curve counts them per step
ITL = "vllm:inter_token_latency_seconds"
ITL_LEGACY = "vllm:time_per_output_token_seconds"   # same observations; removed in 0.15
ITERATION_TOKENS = "vllm:iteration_tokens_total"    # a histogram despite the name: one obs per engine step
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

# Series keys of RouteSnapshot.counters (the first element names the canonical counter).
K_DRAFTS, K_DRAFT_TOKENS, K_ACCEPTED, K_POS, K_GEN = "drafts", "draft_tokens", "accepted", "pos", "gen"
K_ITL_BUCKET, K_ITL_SUM, K_ITL_COUNT, K_STEPS = "itl_bucket", "itl_sum", "itl_count", "steps"
K_PROMPT = "prompt"

_SIMPLE_COUNTERS = {DRAFTS: K_DRAFTS, DRAFT_TOKENS: K_DRAFT_TOKENS, ACCEPTED: K_ACCEPTED, GENERATION: K_GEN,
                    PROMPT: K_PROMPT}


def reset_group(key: tuple) -> tuple:
    """Series that reset together: a histogram resets as a whole (per engine)."""
    kind = key[0]
    if kind in (K_ITL_BUCKET, K_ITL_SUM, K_ITL_COUNT):
        return ("itl", key[1])
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
    counters: Mapping[tuple, float]
    created: Mapping[tuple, float]
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


def _labels(sample: Sample) -> dict[str, str]:
    return dict(sample.labels)


def _series_id(labels: Mapping[str, str]) -> str:
    """One series of a canonical counter: its engine, and its model when a route spans several
    (a route matched on engine alone). Deltas are taken per series before any sum, so a series
    that appears or vanishes is a new series, never a jump of the sum."""
    engine = labels.get("engine", "0")
    model = labels.get("model_name")
    return f"{engine}/{model}" if model else engine


class _RouteBuilder:
    def __init__(self, route: str, model_name: str):
        self.route = route
        self.model_name = model_name
        self.counters: dict[tuple, float] = {}
        self.created: dict[tuple, float] = {}
        self.running: dict[str, float] = {}
        self.engines: set[str] = set()
        self.positions: set[int] = set()
        self.spec = False
        self.v0_rate: float | None = None
        self.v0_eff: float | None = None


def snapshots(families: Mapping[str, Family], *, t: float, target: str,
              matchers: Iterable[RouteMatcher] | None = None,
              route_prefix: str = "") -> list[RouteSnapshot]:
    """Group the parsed families into one snapshot per route.

    With matchers, each route takes the samples its labels match (a sample may feed several
    routes). Without, there is one route per model_name, named after it (with route_prefix).
    """
    schema = detect_schema(families)
    matchers = list(matchers or [])
    builders: dict[str, _RouteBuilder] = {}

    def routes_for(labels: dict[str, str]) -> list[_RouteBuilder]:
        model = labels.get("model_name", "")
        if matchers:
            out = []
            for m in matchers:
                if m.matches(labels):
                    b = builders.get(m.route)
                    if b is None:
                        b = builders[m.route] = _RouteBuilder(m.route, m.match.get("model_name", model))
                    out.append(b)
            return out
        name = route_prefix + (model or "default")
        b = builders.get(name)
        if b is None:
            b = builders[name] = _RouteBuilder(name, model)
        return [b]

    itl_family = families.get(ITL) or families.get(ITL_LEGACY)
    for family_name, key in _SIMPLE_COUNTERS.items():
        fam = families.get(family_name)
        if fam is None or (schema == SCHEMA_V0 and key not in (K_GEN, K_PROMPT)):
            continue  # V0's spec counters are sums of running totals (vLLM PR #15415): unusable
        for s in fam.samples:
            labels = _labels(s)
            engine = _series_id(labels)
            for b in routes_for(labels):
                b.counters[(key, engine)] = b.counters.get((key, engine), 0.0) + s.value
                b.engines.add(engine)
                if key not in (K_GEN, K_PROMPT):
                    b.spec = True
        for s in fam.created:
            labels = _labels(s)
            for b in routes_for(labels):
                b.created[(key, _series_id(labels))] = s.value
    fam = families.get(ACCEPTED_PER_POS)
    if fam is not None and schema != SCHEMA_V0:
        for s in fam.samples:
            labels = _labels(s)
            engine = _series_id(labels)
            try:
                position = int(labels.get("position", ""))
            except ValueError:
                continue
            for b in routes_for(labels):
                b.counters[(K_POS, engine, position)] = b.counters.get((K_POS, engine, position), 0.0) + s.value
                b.positions.add(position)
                b.spec = True
        for s in fam.created:
            labels = _labels(s)
            try:
                position = int(labels.get("position", ""))
            except ValueError:
                continue
            for b in routes_for(labels):
                b.created[(K_POS, _series_id(labels), position)] = s.value
    if itl_family is not None:
        for s in itl_family.samples:
            labels = _labels(s)
            engine = _series_id(labels)
            if s.name.endswith("_bucket"):
                key = (K_ITL_BUCKET, engine, float(labels["le"]))
            elif s.name.endswith("_sum"):
                key = (K_ITL_SUM, engine)
            else:
                key = (K_ITL_COUNT, engine)
            for b in routes_for({k: v for k, v in labels.items() if k != "le"}):
                b.counters[key] = b.counters.get(key, 0.0) + s.value
                b.engines.add(engine)
        for s in itl_family.created:
            labels = _labels(s)
            for b in routes_for(labels):
                b.created[("itl", _series_id(labels))] = s.value
    fam = families.get(ITERATION_TOKENS)
    if fam is not None:
        for s in fam.samples:
            if not s.name.endswith("_count"):
                continue
            labels = _labels(s)
            engine = _series_id(labels)
            for b in routes_for(labels):
                b.counters[(K_STEPS, engine)] = b.counters.get((K_STEPS, engine), 0.0) + s.value
        for s in fam.created:
            labels = _labels(s)
            for b in routes_for(labels):
                b.created[(K_STEPS, _series_id(labels))] = s.value
    fam = families.get(RUNNING)
    if fam is not None:
        for s in fam.samples:
            labels = _labels(s)
            engine = _series_id(labels)
            for b in routes_for(labels):
                b.running[engine] = b.running.get(engine, 0.0) + s.value
                b.engines.add(engine)
    for gauge, attr in ((V0_ACCEPTANCE_RATE, "v0_rate"), (V0_EFFICIENCY, "v0_eff")):
        fam = families.get(gauge)
        if fam is None:
            continue
        for s in fam.samples:
            for b in routes_for(_labels(s)):
                if math.isfinite(s.value):
                    setattr(b, attr, s.value)
                    b.spec = True

    result = []
    for b in builders.values():
        result.append(RouteSnapshot(
            t=t, target=target, route=b.route, model_name=b.model_name, schema=schema,
            spec_present=b.spec, engines=tuple(sorted(b.engines)),
            configured_k=(max(b.positions) + 1) if b.positions else None,
            counters=b.counters, created=b.created, running=b.running,
            v0_acceptance_rate=b.v0_rate, v0_efficiency=b.v0_eff,
        ))
    return result


def parse_payload(text: str, *, t: float, target: str, matchers: Iterable[RouteMatcher] | None = None,
                  route_prefix: str = "") -> list[RouteSnapshot]:
    """Exposition text -> route snapshots. Raises exposition.ExpositionError on any bad input."""
    return snapshots(SELECTOR.parse(text), t=t, target=target, matchers=matchers, route_prefix=route_prefix)
