"""Scenario YAML: schema, validation and loading. The schema is written with the config's nodes and
kinds and checked by its parser (config/parse.py), so a bad scenario fails as a bad config does: one
line naming the key (ScenarioError is a ConfigError).

A scenario describes one simulated vLLM deployment over time:

```yaml
name: alpha-drop
description: free text
hardware: h100-sxm            # cost-model preset (same name the sidecar's config uses)
model: llama-3.1-8b           # cost-model model preset
tensor_parallel: 1
dtype: bf16
method: eagle3                # speculative method (draft cost comes from it)
num_speculative_tokens: 4     # configured K: number of `position` labels
schema: v1                    # v1 (vLLM 0.33) | v1-legacy-itl (0.10.1) | v0 (V0 engine, 0.9.x)
engine: vllm                  # vllm | sglang: the server whose /metrics is rendered (sglang: its own
                              # families, schema unread); with speculative_adaptive: true in
                              # speculative_config, SGLang's adaptive step bands (SGLANG_BANDS)
multiprocess: false           # true: --api-server-count>1 (no _created, no python_/process_)
engines: 1                    # data-parallel engines per model, engine="0".."N-1"
max_num_seqs: 256             # per engine
max_model_len: 8192
prompt_tokens: 512            # mean prompt length (per request, sampled)
output_tokens: 256            # mean output length (per request, sampled)
noise: 0.03                   # step-time noise (lognormal sigma)
speculative_config:           # what the server is started with (and the sidecar told, draft.config):
  num_speculative_tokens: 4   #   vLLM's batch schedule is applied per engine step, and dropped with
  num_speculative_tokens_per_batch_size: [[1, 16, 4], [17, 1024, 2]]   # engines > 1 (vLLM < PR #54748);
  acceptance_rate_threshold: 0.4      # TensorRT-LLM's gate: once an engine's rolling acceptance over
  acceptance_rate_window_size: 200    # its last 200 drafting steps is below it, it drafts no more
  enable_adaptive_verification: true  # vLLM's adaptive verification: K' in 1..K per step, the one
                                      # with the most tokens per second by the cost model's profile
                                      # and the engine's online acceptance estimate
routes:                       # model names served (default: one, named after `model`)
  - model_name: chat
  - model_name: code
phases:
  - name: healthy
    duration: 4m
    concurrency: 64           # closed loop: in-flight requests per route (or `rate:` req/s Poisson)
    k: 4                      # draft length actually proposed (<= num_speculative_tokens; 0 = no drafts)
    alpha: 0.7                # i.i.d. per-position conditional acceptance probability, or
    # acceptance_rate: 0.6    # vLLM's alpha (accepted/draft tokens), solved to an i.i.d. conditional, or
    # acceptance: [0.8, 0.7, 0.6, 0.5]   # per-position conditional probabilities
    ramp: false               # true: interpolate concurrency/rate/alpha from the previous phase
    routes:                   # per-route overrides of the phase values
      code: {alpha: 0.4, concurrency: 16}
events:                       # at sim time
  - {at: 5m, type: restart}   # counters restart at 0, new _created, new process start time
  - {at: 6m, type: spec_off}  # spec families vanish (server restarted without speculative_config)
  - {at: 7m, type: spec_on}
  - {at: 8m, type: schema, schema: v0}
faults:                       # applied by the HTTP server only (not by record())
  - {at: 1m, duration: 20s, kind: http_500}
expected:                     # documentation for benchmarks; checked by tests
  crossings: [{at: 240, from: keep, to: disable}]
```
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from typing import Any

import yaml

from specwatch.base import units
from specwatch.config.kinds import Choice, ConfigError, Context, Duration, Flag, Kind, Number, Text
from specwatch.config.nodes import FROM_RESULT, Items, Key, Section
from specwatch.config.parse import parse_section
from specwatch.engines.advice import ADAPTIVE_OPTIONS, SGLANG_ADAPTIVE_BANDS
from specwatch.engines.vllm_schedule import (
    ADAPTIVE_VERIFICATION_KEY,
    SpeculativeConfigError,
    SpeculativeSchedule,
    parse_speculative_config,
)

SCHEMAS = ("v1", "v1-legacy-itl", "v0")
ENGINES = ("vllm", "sglang")
EVENT_TYPES = ("restart", "spec_off", "spec_on", "schema")
FAULT_KINDS = (
    "http_500",  # HTTP 500 with a short text body
    "drop",  # accept, read the request, close the connection without a response
    "slow_drip",  # send the real body a few bytes at a time (slowloris-style server)
    "truncated",  # Content-Length of the full body, only part of it sent, then close
    "garbage",  # 200 with bytes that are not exposition text
    "oversized",  # 200 with the real body padded by comment lines up to `bytes`
    "huge_labels",  # 200 with the real body plus one series carrying `labels` labels
    "empty",  # 200 with an empty body (multiprocess-mode name[] filtering)
)
#: Drafting steps of the rolling acceptance when a gate states no window.
DEFAULT_GATE_WINDOW = 200
SCENARIO_DIR = os.path.join(os.path.dirname(__file__), "scenarios")


class ScenarioError(ConfigError):
    """A scenario file is invalid; the message names the offending key."""


def parse_duration(value: Any, key: str) -> float:
    """'500ms', '5s', '2m', '1h' or a number of seconds -> seconds >= 0 (the one grammar in units.py)."""
    try:
        return units.parse_duration(value, key, allow_zero=True)
    except units.UnitError as exc:
        raise ScenarioError(exc.key, exc.reason) from None


def iid_conditional_for_rate(rate: float, k: int) -> float:
    """The i.i.d. per-position probability c whose vLLM alpha E[accepted]/k equals `rate`.

    vLLM's alpha for i.i.d. c is c(1-c^k)/(k(1-c)), monotone in c, so bisection is exact enough."""
    if k <= 0:
        return rate
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_accepted([mid] * k) / k < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def expected_accepted(cond: list[float]) -> float:
    """E[accepted prefix length] = sum of unconditional per-position rates."""
    return sum(unconditional(cond))


def unconditional(cond: list[float]) -> list[float]:
    """p_i = P(positions 0..i all accepted) = prod_{j<=i} c_j (vLLM's per_pos/drafts)."""
    out, p = [], 1.0
    for c in cond:
        p *= c
        out.append(p)
    return out


@dataclasses.dataclass(frozen=True)
class AdaptiveBand:
    """One batch band of SGLang's --speculative-adaptive controller (PR #24055): from batch
    ``low`` up to the next band's, its own candidate steps, EMA of the acceptance length and
    hysteresis. The switching rule is the simulator's: the band steps up to its next candidate when
    the EMA is above steps + 1/2 + ``up`` (nearly every draft accepted), and down to the one below
    when it is under that candidate + 1/2 + ``down``; with ``up`` >= ``down`` a switch is never
    undone by the acceptance length it leads to alone (it only grows with the steps)."""

    low: int
    candidates: tuple[int, ...]
    up: float
    down: float


#: SGLang's default bands and candidate steps (PR #24055): [1, 64) steps 1/3/7, [64, 128) 1/2/5,
#: [128, inf) 1/2/6; the hysteresis is the simulator's (AdaptiveBand).
SGLANG_BANDS = tuple(
    AdaptiveBand(low, candidates, up, down)
    for (low, _), (candidates, up, down) in zip(
        SGLANG_ADAPTIVE_BANDS,
        (((1, 3, 7), 0.0, -0.25), ((1, 2, 5), 0.0, 0.0), ((1, 2, 6), 0.25, -0.1)),
        strict=True,
    )
)


@dataclasses.dataclass(frozen=True)
class RoutePhase:
    """The parameters one route runs with during a phase (resolved, no overrides left)."""

    concurrency: float | None
    rate: float | None
    k: int
    acceptance: tuple[float, ...]  # conditional, length >= k (padded with the last value)


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    start: float
    duration: float
    ramp: bool
    routes: dict[str, RoutePhase]

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclasses.dataclass(frozen=True)
class Event:
    at: float
    type: str
    schema: str | None = None


@dataclasses.dataclass(frozen=True)
class Fault:
    at: float
    duration: float
    kind: str
    params: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class StepCurve:
    """The simulated target's own step time, replacing the cost model (`step_time:` in a scenario):

        T(n, S) = fixed_seconds + seconds_per_token · min(n, knee_tokens)
                  + seconds_per_token_after_knee · max(n − knee_tokens, 0) + seconds_per_kv_token · S

    n query tokens, S KV tokens in the batch; a speculative step adds `spec_overhead_seconds` and
    the drafter's cost (n-gram: 0.59 % of the verify step; others: `draft_seconds` per drafted
    position, whatever the batch). A server no preset describes: the learning tests run on it."""

    fixed_seconds: float
    seconds_per_token: float
    knee_tokens: float
    seconds_per_token_after_knee: float
    seconds_per_kv_token: float = 0.0
    spec_overhead_seconds: float = 0.0
    draft_seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    hardware: str
    model: str
    tensor_parallel: int
    dtype: str
    method: str
    draft_cost_per_token: float | None
    num_speculative_tokens: int
    schema: str
    multiprocess: bool
    engines: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    prompt_tokens: int
    output_tokens: int
    noise: float
    model_names: tuple[str, ...]
    phases: tuple[Phase, ...]
    events: tuple[Event, ...]
    faults: tuple[Fault, ...]
    expected: dict[str, Any]
    source: str = ""
    step_time: StepCurve | None = None
    #: The simulated engine's fixed costs of speculation (verify overhead, per request, per drafting
    #: pass) as a multiple of the cost model's: a server whose true costs a prior gets wrong.
    spec_cost_scale: float = 1.0
    #: What the server is started with (vLLM's --speculative-config keys, plus TensorRT-LLM's gate
    #: keys), and what the sidecar is told (draft.config); None: nothing stated.
    speculative_config: Mapping[str, Any] | None = None
    #: The server whose /metrics is rendered (ENGINES).
    engine: str = "vllm"

    @functools.cached_property
    def bands(self) -> tuple[AdaptiveBand, ...]:
        """SGLang's adaptive step bands, where the scenario's SGLang server is started with
        --speculative-adaptive (speculative_config ``speculative_adaptive: true``); () otherwise."""
        adaptive = (self.speculative_config or {}).get(ADAPTIVE_OPTIONS["sglang"]) is True
        return SGLANG_BANDS if self.engine == "sglang" and adaptive else ()

    @property
    def graded_controller(self) -> bool:
        """Whether the engine picks K per step itself (vLLM's adaptive verification, SGLang's
        bands): the decode truth then also prices every step without speculation."""
        return self.adaptive or bool(self.bands)

    @functools.cached_property
    def schedule(self) -> SpeculativeSchedule | None:
        """The batch schedule each engine step applies: none with data parallelism > 1, which
        drops it (vLLM before PR #54748)."""
        if self.speculative_config is None or self.engines > 1:
            return None
        schedule = parse_speculative_config(self.speculative_config)
        return schedule if schedule.has_schedule else None

    @functools.cached_property
    def gate(self) -> tuple[float, int] | None:
        """TensorRT-LLM's one-way gate: (acceptance_rate_threshold, acceptance_rate_window_size in
        drafting steps), or None."""
        config = self.speculative_config or {}
        threshold = config.get("acceptance_rate_threshold")
        if not isinstance(threshold, int | float) or threshold <= 0:
            return None
        return float(threshold), int(config.get("acceptance_rate_window_size") or DEFAULT_GATE_WINDOW)

    @functools.cached_property
    def adaptive(self) -> bool:
        """vLLM's adaptive verification (``enable_adaptive_verification``): each engine step picks its
        verify budget K' in 1..K from the step-cost profile and an online acceptance estimate."""
        return bool((self.speculative_config or {}).get(ADAPTIVE_VERIFICATION_KEY) is True)

    @property
    def duration(self) -> float:
        return self.phases[-1].end if self.phases else 0.0

    def phase_at(self, t: float) -> Phase:
        for ph in self.phases:
            if t < ph.end:
                return ph
        return self.phases[-1]

    def route_params(self, route: str, t: float) -> RoutePhase:
        """Route parameters at sim time t, ramped linearly inside a `ramp: true` phase."""
        idx = 0
        for i, ph in enumerate(self.phases):
            idx = i
            if t < ph.end:
                break
        ph = self.phases[idx]
        cur = ph.routes[route]
        if not ph.ramp or idx == 0 or ph.duration <= 0:
            return cur
        prev = self.phases[idx - 1].routes[route]
        f = min(1.0, max(0.0, (t - ph.start) / ph.duration))

        def lerp(a: float | None, b: float | None) -> float | None:
            if a is None or b is None:
                return b
            return a + (b - a) * f

        n = max(len(prev.acceptance), len(cur.acceptance))
        pa = _pad(prev.acceptance, n)
        ca = _pad(cur.acceptance, n)
        return RoutePhase(
            concurrency=lerp(prev.concurrency, cur.concurrency),
            rate=lerp(prev.rate, cur.rate),
            k=cur.k,
            acceptance=tuple(a + (b - a) * f for a, b in zip(pa, ca, strict=True)),
        )

    def events_sorted(self) -> list[Event]:
        return sorted(self.events, key=lambda e: e.at)

    def faults_at(self, t: float) -> list[Fault]:
        return [f for f in self.faults if f.at <= t < f.at + f.duration]


def _pad(acc: tuple[float, ...], n: int) -> tuple[float, ...]:
    if not acc:
        return tuple([0.0] * n)
    return tuple(acc) + (acc[-1],) * (n - len(acc))


class _Values(Kind):
    """A mapping kept as written (`expected:`, documentation for the tests)."""

    def parse(self, value: object, key: str, ctx: Context) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise ConfigError(key, "expected a mapping")
        return dict(value)


class _Probabilities(Kind):
    """A non-empty list of probabilities (`acceptance:` per position)."""

    def parse(self, value: object, key: str, ctx: Context) -> tuple[float, ...]:
        if not isinstance(value, list) or not value:
            raise ConfigError(key, "expected a non-empty list of probabilities")
        return tuple(_PROBABILITY.parse(x, f"{key}[{i}]", ctx) for i, x in enumerate(value))


class _Overrides(Kind):
    """A phase's per-route overrides: model_name -> route parameters."""

    def parse(self, value: object, key: str, ctx: Context) -> dict[str, dict[str, Any]]:
        if not isinstance(value, Mapping):
            raise ConfigError(key, "expected a mapping model_name -> parameters")
        return {str(name): parse_section(_ROUTE_PARAMS, raw, f"{key}.{name}", ctx) for name, raw in value.items()}


def _key(name: str, kind: Kind, default: Any = FROM_RESULT, **options: Any) -> Key:
    return Key(name, kind, "", default=default, **options)


_PROBABILITY = Number(minimum=0, maximum=1)
_COUNT = Number(minimum=0)
_ACCEPTANCE = ("alpha", "acceptance_rate", "acceptance")
_LOAD = ("concurrency", "rate")
_ROUTE_KEYS = (
    _key("concurrency", _COUNT),
    _key("rate", _COUNT),
    _key("k", Number(minimum=0, integer=True)),
    _key("alpha", _PROBABILITY),
    _key("acceptance_rate", _PROBABILITY),
    _key("acceptance", _Probabilities()),
)
_ROUTE_PARAMS = Section("route", dict, _ROUTE_KEYS, "")
_ROUTE_PARAMS_NAMES = frozenset(node.name for node in _ROUTE_KEYS)
_PHASE = Section(
    "phase",
    dict,
    (
        _key("name", Text()),
        _key("duration", Duration(), required=True),
        _key("ramp", Flag(), False),
        _key("routes", _Overrides(), {}),
        *_ROUTE_KEYS,
    ),
    "",
)
_EVENT = Section(
    "event",
    dict,
    (
        _key("at", Duration(allow_zero=True), 0.0),
        _key("type", Choice(lambda: EVENT_TYPES), required=True),
        _key("schema", Choice(lambda: SCHEMAS), None),
    ),
    "",
)
_FAULT = Section(
    "fault",
    dict,
    (
        _key("at", Duration(allow_zero=True), 0.0),
        _key("duration", Duration(allow_zero=True), 10.0),
        _key("kind", Choice(lambda: FAULT_KINDS), required=True),
        _key("bytes", Number(minimum=0, integer=True)),
        _key("labels", Number(minimum=0, integer=True)),
        _key("chunk", Number(minimum=1, integer=True)),
        _key("interval", _COUNT),
        _key("fraction", _PROBABILITY),
    ),
    "",
)
_STEP_TIME = Section(
    "step_time",
    StepCurve,
    tuple(_key(f.name, _COUNT, required=f.default is dataclasses.MISSING) for f in dataclasses.fields(StepCurve)),
    "",
    nullable=True,
)
_WHOLE = Number(minimum=1, integer=True)
SCENARIO_SCHEMA = Section(
    "scenario",
    dict,
    (
        _key("name", Text(), ""),
        _key("description", Text(), ""),
        _key("hardware", Text(), "h100-sxm"),
        _key("model", Text(), "llama-3.1-8b"),
        _key("tensor_parallel", _WHOLE, 1),
        _key("dtype", Text(), "bf16"),
        _key("method", Text(), "eagle3"),
        _key("draft_cost_per_token", _COUNT, None),
        _key("num_speculative_tokens", Number(minimum=1, maximum=64, integer=True), 4),
        _key("schema", Choice(lambda: SCHEMAS), "v1"),
        _key("engine", Choice(lambda: ENGINES), "vllm"),
        _key("multiprocess", Flag(), False),
        _key("engines", Number(minimum=1, maximum=64, integer=True), 1),
        _key("max_num_seqs", _WHOLE, 256),
        _key("max_num_batched_tokens", _WHOLE, 8192),
        _key("max_model_len", Number(minimum=16, integer=True), 8192),
        _key("prompt_tokens", _WHOLE, 512),
        _key("output_tokens", Number(minimum=2, integer=True), 256),
        _key("noise", _PROBABILITY, 0.03),
        Items("routes", Section("route", dict, (_key("model_name", Text(), required=True),), ""), ""),
        Items("phases", _PHASE, "", min_items=1, nullable=False),
        Items("events", _EVENT, ""),
        Items("faults", _FAULT, ""),
        _key("expected", _Values(), {}),
        _STEP_TIME,
        _key("spec_cost_scale", Number(minimum=0, maximum=100), 1.0),
        _key("speculative_config", _Values(), None),
    ),
    "",
)


def _resolve_route(raw: dict[str, Any], key: str, kmax: int) -> RoutePhase:
    """One route's validated parameters as it runs them: one load, one acceptance, k <= K."""
    if sum(x in raw for x in _LOAD) != 1:
        raise ScenarioError(key, "needs `concurrency` or `rate` (exclusive)")
    if sum(x in raw for x in _ACCEPTANCE) != 1:
        raise ScenarioError(key, "needs one of alpha, acceptance_rate, acceptance")
    k = raw.get("k", kmax)
    if k > kmax:
        raise ScenarioError(f"{key}.k", f"must be <= num_speculative_tokens ({kmax}), got {k}")
    n = max(kmax, 1)
    if "alpha" in raw:
        acceptance = (raw["alpha"],) * n
    elif "acceptance_rate" in raw:
        acceptance = (iid_conditional_for_rate(raw["acceptance_rate"], max(k, 1)),) * n
    else:
        acceptance = _pad(raw["acceptance"], n)
    return RoutePhase(concurrency=raw.get("concurrency"), rate=raw.get("rate"), k=k, acceptance=acceptance)


def _phase(raw: dict[str, Any], key: str, start: float, names: list[str], kmax: int) -> Phase:
    overrides = raw["routes"]
    for name in overrides:
        if name not in names:
            raise ScenarioError(f"{key}.routes.{name}", "not a model_name in `routes`")
    routes = {}
    for name in names:
        override = overrides.get(name, {})
        # An override's load or acceptance replaces the phase's whole group.
        merged = {
            k: v
            for k, v in raw.items()
            if k in _ROUTE_PARAMS_NAMES
            and not (k in _ACCEPTANCE and set(_ACCEPTANCE) & set(override))
            and not (k in _LOAD and set(_LOAD) & set(override))
        }
        routes[name] = _resolve_route(
            {**merged, **override}, f"{key}.routes.{name}" if name in overrides else key, kmax
        )
    return Phase(name=raw.get("name", ""), start=start, duration=raw["duration"], ramp=raw["ramp"], routes=routes)


def _model_names(values: dict[str, Any]) -> list[str]:
    names = [route["model_name"] for route in values.get("routes") or [{"model_name": values["model"]}]]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ScenarioError(f"routes[{i}].model_name", f"duplicate {name!r}")
    return names


def _check_stated(stated: Mapping[str, Any], kmax: int, engine: str) -> None:
    """The server's speculative_config, as the engine would check it against the scenario's K."""
    try:
        schedule = parse_speculative_config(stated)
    except SpeculativeConfigError as exc:
        raise ScenarioError(f"speculative_config.{exc.key}", exc.reason) from None
    if schedule.num_speculative_tokens != kmax:
        raise ScenarioError("speculative_config.num_speculative_tokens", f"must equal num_speculative_tokens ({kmax})")
    if engine == "sglang" and stated.get(ADAPTIVE_OPTIONS["sglang"]) is True:
        largest = max(max(band.candidates) for band in SGLANG_BANDS)
        if kmax < largest:
            raise ScenarioError(
                "num_speculative_tokens", f"must be >= {largest}, the largest step of SGLang's adaptive bands"
            )


# Keys parse_scenario builds from the parsed values rather than passing them through.
_BUILT = frozenset({"name", "description", "routes", "phases", "events", "faults", "step_time"})


def parse_scenario(data: Any, source: str = "") -> Scenario:
    """A scenario mapping, validated as the config is (config/parse.py): a ScenarioError names the key."""
    if not isinstance(data, Mapping):
        raise ScenarioError("scenario", "expected a mapping at the top level")
    try:
        values = parse_section(SCENARIO_SCHEMA, data, "", Context())
    except ConfigError as exc:
        raise ScenarioError(exc.key, exc.reason) from None
    if "phases" not in values:
        raise ScenarioError("phases", "required: a non-empty list")
    names, kmax = _model_names(values), values["num_speculative_tokens"]
    phases, start = [], 0.0
    for i, raw in enumerate(values["phases"]):
        phases.append(_phase({"name": f"phase-{i}", **raw}, f"phases[{i}]", start, names, kmax))
        start += phases[-1].duration
    events = [Event(at=e["at"], type=e["type"], schema=e["schema"]) for e in values.get("events") or []]
    for i, event in enumerate(events):
        if event.type == "schema" and event.schema is None:
            raise ScenarioError(f"events[{i}].schema", f"required for a schema event ({', '.join(SCHEMAS)})")
    faults = [
        Fault(at=f.pop("at"), duration=f.pop("duration"), kind=f.pop("kind"), params=f)
        for f in values.get("faults") or []
    ]
    step_time = values.get("step_time")
    stated = values.get("speculative_config")
    if stated is not None:
        _check_stated(stated, kmax, values["engine"])
    return Scenario(
        **{k: v for k, v in values.items() if k not in _BUILT},
        name=values["name"] or os.path.splitext(os.path.basename(source))[0] or "scenario",
        description=values["description"].strip(),
        model_names=tuple(names),
        phases=tuple(phases),
        events=tuple(events),
        faults=tuple(faults),
        source=source,
        step_time=None if step_time is None else StepCurve(**step_time),
    )


def list_scenarios() -> list[str]:
    """Names of the scenarios shipped with specwatch."""
    return sorted(os.path.splitext(f)[0] for f in os.listdir(SCENARIO_DIR) if f.endswith(".yaml"))


def load_scenario(name_or_path: str | os.PathLike[str] | Scenario) -> Scenario:
    """Load a shipped scenario by name (`alpha-drop`) or any YAML file by path."""
    if isinstance(name_or_path, Scenario):
        return name_or_path
    p = os.fspath(name_or_path)
    if not os.path.exists(p):
        cand = os.path.join(SCENARIO_DIR, p + ".yaml")
        if not os.path.exists(cand):
            raise ScenarioError(
                f"scenario {p!r}", f"no such file or shipped scenario (shipped: {', '.join(list_scenarios())})"
            )
        p = cand
    with open(p, encoding="utf-8") as fh:
        try:
            data = yaml.safe_load(fh)
        except yaml.YAMLError as exc:
            raise ScenarioError(p, "invalid YAML: " + " ".join(str(exc).split())) from None
    return parse_scenario(data, source=p)
