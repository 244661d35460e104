"""Scenario YAML: schema, validation and loading.

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
multiprocess: false           # true: --api-server-count>1 (no _created, no python_/process_)
engines: 1                    # data-parallel engines per model, engine="0".."N-1"
max_num_seqs: 256             # per engine
max_model_len: 8192
prompt_tokens: 512            # mean prompt length (per request, sampled)
output_tokens: 256            # mean output length (per request, sampled)
noise: 0.03                   # step-time noise (lognormal sigma)
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
import math
import os
from typing import Any

import yaml

from specwatch.base import units

SCHEMAS = ("v1", "v1-legacy-itl", "v0")
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
SCENARIO_DIR = os.path.join(os.path.dirname(__file__), "scenarios")


class ScenarioError(ValueError):
    """A scenario file is invalid; the message names the offending key."""


def parse_duration(value: Any, key: str) -> float:
    """'500ms', '5s', '2m', '1h' or a number of seconds -> seconds >= 0 (the one grammar in units.py)."""
    try:
        return units.parse_duration(value, key, allow_zero=True)
    except units.UnitError as exc:
        raise ScenarioError(str(exc)) from None


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


_STEP_CURVE_KEYS = {f.name for f in dataclasses.fields(StepCurve)}


def _step_curve(raw: Any) -> StepCurve | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ScenarioError("step_time: expected a mapping")
    unknown = set(raw) - _STEP_CURVE_KEYS
    if unknown:
        raise ScenarioError(f"step_time.{sorted(unknown)[0]}: unknown key")
    required = ("fixed_seconds", "seconds_per_token", "knee_tokens", "seconds_per_token_after_knee")
    for key in required:
        if key not in raw:
            raise ScenarioError(f"step_time.{key}: required")
    return StepCurve(**{k: _num(v, f"step_time.{k}", lo=0) for k, v in raw.items()})


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


_TOP_KEYS = {
    "name",
    "description",
    "hardware",
    "model",
    "tensor_parallel",
    "dtype",
    "method",
    "draft_cost_per_token",
    "num_speculative_tokens",
    "schema",
    "multiprocess",
    "engines",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "prompt_tokens",
    "output_tokens",
    "noise",
    "routes",
    "phases",
    "events",
    "faults",
    "expected",
    "step_time",
    "spec_cost_scale",
}
_PHASE_KEYS = {"name", "duration", "ramp", "routes"} | {
    "concurrency",
    "rate",
    "k",
    "alpha",
    "acceptance_rate",
    "acceptance",
}
_ROUTE_PARAM_KEYS = {"concurrency", "rate", "k", "alpha", "acceptance_rate", "acceptance"}


def _num(v: Any, key: str, lo: float | None = None, hi: float | None = None, integer: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v)):
        raise ScenarioError(f"{key}: expected a number, got {v!r}")
    if integer and int(v) != v:
        raise ScenarioError(f"{key}: expected an integer, got {v!r}")
    if lo is not None and v < lo:
        raise ScenarioError(f"{key}: must be >= {lo}, got {v!r}")
    if hi is not None and v > hi:
        raise ScenarioError(f"{key}: must be <= {hi}, got {v!r}")
    return int(v) if integer else float(v)


def _int(v: Any, key: str, lo: float | None = None, hi: float | None = None) -> int:
    """``_num`` for a key that must be a whole number, typed as one."""
    return int(_num(v, key, lo, hi, integer=True))


def _resolve_route(raw: dict[str, Any], key: str, kmax: int) -> RoutePhase:
    unknown = set(raw) - _ROUTE_PARAM_KEYS
    if unknown:
        raise ScenarioError(f"{key}.{sorted(unknown)[0]}: unknown key")
    conc, rate = raw.get("concurrency"), raw.get("rate")
    if conc is None and rate is None:
        raise ScenarioError(f"{key}: needs `concurrency` or `rate`")
    if conc is not None and rate is not None:
        raise ScenarioError(f"{key}: `concurrency` and `rate` are exclusive")
    if conc is not None:
        conc = _num(conc, f"{key}.concurrency", lo=0)
    if rate is not None:
        rate = _num(rate, f"{key}.rate", lo=0)
    k = _int(raw.get("k", kmax), f"{key}.k", lo=0, hi=kmax)
    given = [x for x in ("alpha", "acceptance_rate", "acceptance") if x in raw]
    if len(given) > 1:
        raise ScenarioError(f"{key}: give only one of alpha, acceptance_rate, acceptance")
    if not given:
        raise ScenarioError(f"{key}: needs one of alpha, acceptance_rate, acceptance")
    n = max(kmax, 1)
    if "alpha" in raw:
        c = _num(raw["alpha"], f"{key}.alpha", lo=0, hi=1)
        acc = (c,) * n
    elif "acceptance_rate" in raw:
        r = _num(raw["acceptance_rate"], f"{key}.acceptance_rate", lo=0, hi=1)
        c = iid_conditional_for_rate(r, max(k, 1))
        acc = (c,) * n
    else:
        lst = raw["acceptance"]
        if not isinstance(lst, list) or not lst:
            raise ScenarioError(f"{key}.acceptance: expected a non-empty list of probabilities")
        acc = tuple(_num(x, f"{key}.acceptance[{i}]", lo=0, hi=1) for i, x in enumerate(lst))
        acc = _pad(acc, n)
    return RoutePhase(concurrency=conc, rate=rate, k=k, acceptance=acc)


def parse_scenario(data: Any, source: str = "") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError("scenario: expected a mapping at the top level")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ScenarioError(f"{sorted(unknown)[0]}: unknown key")
    name = str(data.get("name") or os.path.splitext(os.path.basename(source))[0] or "scenario")
    kmax = _int(data.get("num_speculative_tokens", 4), "num_speculative_tokens", lo=1, hi=64)
    schema = data.get("schema", "v1")
    if schema not in SCHEMAS:
        raise ScenarioError(f"schema: must be one of {', '.join(SCHEMAS)}, got {schema!r}")
    model = str(data.get("model", "llama-3.1-8b"))
    routes_raw = data.get("routes") or [{"model_name": model}]
    if not isinstance(routes_raw, list):
        raise ScenarioError("routes: expected a list")
    names = []
    for i, r in enumerate(routes_raw):
        if not isinstance(r, dict) or not r.get("model_name"):
            raise ScenarioError(f"routes[{i}].model_name: required")
        if set(r) - {"model_name"}:
            raise ScenarioError(f"routes[{i}].{sorted(set(r) - {'model_name'})[0]}: unknown key")
        if str(r["model_name"]) in names:
            raise ScenarioError(f"routes[{i}].model_name: duplicate {r['model_name']!r}")
        names.append(str(r["model_name"]))

    phases_raw = data.get("phases")
    if not isinstance(phases_raw, list) or not phases_raw:
        raise ScenarioError("phases: expected a non-empty list")
    phases, start = [], 0.0
    for i, p in enumerate(phases_raw):
        key = f"phases[{i}]"
        if not isinstance(p, dict):
            raise ScenarioError(f"{key}: expected a mapping")
        unknown = set(p) - _PHASE_KEYS
        if unknown:
            raise ScenarioError(f"{key}.{sorted(unknown)[0]}: unknown key")
        dur = parse_duration(p.get("duration", 0), f"{key}.duration")
        if dur <= 0:
            raise ScenarioError(f"{key}.duration: must be > 0")
        base = {k: v for k, v in p.items() if k in _ROUTE_PARAM_KEYS}
        overrides = p.get("routes") or {}
        if not isinstance(overrides, dict):
            raise ScenarioError(f"{key}.routes: expected a mapping model_name -> parameters")
        for rn in overrides:
            if rn not in names:
                raise ScenarioError(f"{key}.routes.{rn}: not a model_name in `routes`")
        resolved = {}
        for rn in names:
            merged = dict(base)
            ov = overrides.get(rn) or {}
            if any(x in ov for x in ("alpha", "acceptance_rate", "acceptance")):
                for x in ("alpha", "acceptance_rate", "acceptance"):
                    merged.pop(x, None)
            if any(x in ov for x in ("concurrency", "rate")):
                merged.pop("concurrency", None)
                merged.pop("rate", None)
            merged.update(ov)
            resolved[rn] = _resolve_route(merged, f"{key}.routes.{rn}" if rn in overrides else key, kmax)
        phases.append(
            Phase(
                name=str(p.get("name", f"phase-{i}")),
                start=start,
                duration=dur,
                ramp=bool(p.get("ramp", False)),
                routes=resolved,
            )
        )
        start += dur

    events = []
    for i, e in enumerate(data.get("events") or []):
        key = f"events[{i}]"
        if not isinstance(e, dict):
            raise ScenarioError(f"{key}: expected a mapping")
        if set(e) - {"at", "type", "schema"}:
            raise ScenarioError(f"{key}.{sorted(set(e) - {'at', 'type', 'schema'})[0]}: unknown key")
        typ = e.get("type")
        if typ not in EVENT_TYPES:
            raise ScenarioError(f"{key}.type: must be one of {', '.join(EVENT_TYPES)}, got {typ!r}")
        sch = e.get("schema")
        if typ == "schema" and sch not in SCHEMAS:
            raise ScenarioError(f"{key}.schema: must be one of {', '.join(SCHEMAS)}, got {sch!r}")
        events.append(Event(at=parse_duration(e.get("at", 0), f"{key}.at"), type=typ, schema=sch))

    faults = []
    for i, f in enumerate(data.get("faults") or []):
        key = f"faults[{i}]"
        if not isinstance(f, dict):
            raise ScenarioError(f"{key}: expected a mapping")
        kind = f.get("kind")
        if kind not in FAULT_KINDS:
            raise ScenarioError(f"{key}.kind: must be one of {', '.join(FAULT_KINDS)}, got {kind!r}")
        params = {k: v for k, v in f.items() if k not in ("at", "duration", "kind")}
        for pk in params:
            if pk not in ("bytes", "labels", "chunk", "interval", "fraction"):
                raise ScenarioError(f"{key}.{pk}: unknown key")
        faults.append(
            Fault(
                at=parse_duration(f.get("at", 0), f"{key}.at"),
                duration=parse_duration(f.get("duration", "10s"), f"{key}.duration"),
                kind=kind,
                params=params,
            )
        )

    expected = data.get("expected") or {}
    if not isinstance(expected, dict):
        raise ScenarioError("expected: expected a mapping")

    return Scenario(
        name=name,
        description=str(data.get("description", "")).strip(),
        hardware=str(data.get("hardware", "h100-sxm")),
        model=model,
        tensor_parallel=_int(data.get("tensor_parallel", 1), "tensor_parallel", lo=1),
        dtype=str(data.get("dtype", "bf16")),
        method=str(data.get("method", "eagle3")),
        draft_cost_per_token=(
            None
            if data.get("draft_cost_per_token") is None
            else _num(data["draft_cost_per_token"], "draft_cost_per_token", lo=0)
        ),
        num_speculative_tokens=kmax,
        schema=schema,
        multiprocess=bool(data.get("multiprocess", False)),
        engines=_int(data.get("engines", 1), "engines", lo=1, hi=64),
        max_num_seqs=_int(data.get("max_num_seqs", 256), "max_num_seqs", lo=1),
        max_num_batched_tokens=_int(data.get("max_num_batched_tokens", 8192), "max_num_batched_tokens", lo=1),
        max_model_len=_int(data.get("max_model_len", 8192), "max_model_len", lo=16),
        prompt_tokens=_int(data.get("prompt_tokens", 512), "prompt_tokens", lo=1),
        output_tokens=_int(data.get("output_tokens", 256), "output_tokens", lo=2),
        noise=_num(data.get("noise", 0.03), "noise", lo=0, hi=1),
        model_names=tuple(names),
        phases=tuple(phases),
        events=tuple(events),
        faults=tuple(faults),
        expected=expected,
        source=source,
        step_time=_step_curve(data.get("step_time")),
        spec_cost_scale=_num(data.get("spec_cost_scale", 1.0), "spec_cost_scale", lo=0, hi=100),
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
                f"scenario {p!r}: no such file or shipped scenario (shipped: {', '.join(list_scenarios())})"
            )
        p = cand
    with open(p, encoding="utf-8") as fh:
        try:
            data = yaml.safe_load(fh)
        except yaml.YAMLError as exc:
            raise ScenarioError(f"{p}: invalid YAML: {exc}") from None
    return parse_scenario(data, source=p)
