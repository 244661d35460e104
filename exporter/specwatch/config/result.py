"""The parsed configuration: frozen, typed dataclasses that the rest of specwatch reads.

Field names equal the schema's key names (config/schema.py); a test proves that every field has a
key and every key a field. Defaults live here, once; the schema reads them for docs and the chart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from specwatch.base.units import format_duration
from specwatch.costmodel import Profile
from specwatch.costmodel.learned import DEFAULT_HALF_LIFE_SECONDS, DEFAULT_MIN_POINTS


@dataclass(frozen=True)
class TargetConfig:
    name: str = "vllm"
    url: str = "http://127.0.0.1:8000/metrics"
    timeout: float = 2.0
    max_bytes: int = 16 * 2**20
    engine: str = "auto"  # an engines.registry name, or "auto": detected from each payload
    # Values may be "${ENV}"; resolved at load time and never logged.
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RouteConfig:
    name: str
    target: str
    match: Mapping[str, str] = field(default_factory=dict)
    baseline_itl_p99_seconds: float | None = None
    expect_speculation: bool = True


@dataclass(frozen=True)
class HardwareConfig:
    preset: str | None = "h100-sxm"
    bandwidth_bytes_per_second: float | None = None
    flops: float | None = None
    mbu: float | None = None
    mfu: float | None = None
    overhead_seconds: float | None = None


@dataclass(frozen=True)
class ModelConfig:
    preset: str | None = None
    config_json: str | None = None
    # The parsed config.json (read from config_json at load time).
    hf_config: Mapping[str, Any] | None = None
    params: float | None = None
    dtype: str = "bf16"
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    context_tokens: int = 2048


@dataclass(frozen=True)
class DraftConfig:
    method: str = "auto"
    cost_per_token: float | None = None
    k: int | None = None
    # The --speculative-config object vLLM runs with (checked against the observed draft length).
    config: Mapping[str, Any] | None = None
    # The drafter of method draft_model: a preset name or a config.json path, and that file parsed.
    model: str | None = None
    model_hf_config: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class EngineConfig:
    # None: the generic fixed costs of speculation; a name picks its engine's (costmodel.engine_priors).
    name: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class DecisionConfig:
    min_drafts: int = 500
    margin: float = 0.02
    # Two-sided confidence level of the predicted speedup's interval (costmodel/uncertainty.py).
    confidence: float = 0.9
    # Seconds (float, from "30s"), or an int: a count of evaluations, as before durations existed.
    hold: float | int = 30.0

    def hold_seconds(self, poll_interval: float) -> float:
        """How long a new verdict must stay the candidate. N evaluations span N - 1 poll intervals,
        so an integer hold behaves exactly as the former count of polls did."""
        if isinstance(self.hold, int):
            return max(self.hold - 1, 0) * poll_interval
        return float(self.hold)


@dataclass(frozen=True)
class LearningConfig:
    # Learn the step-time curve from the server's own metrics (costmodel/learned.py); a
    # configured profile overrides it. None (auto): learn when neither hardware nor model is
    # configured, i.e. when the verdict would otherwise rest on assumed defaults.
    enabled: bool | None = None
    # The learner's own defaults: one home (costmodel/learned.py), so the two cannot diverge.
    min_points: int = DEFAULT_MIN_POINTS
    half_life: float = DEFAULT_HALF_LIFE_SECONDS
    point_seconds: float = 10.0


@dataclass(frozen=True)
class LogConfig:
    format: str = "json"
    level: str = "info"


@dataclass(frozen=True)
class AlertingConfig:
    # The window the alert rules read (window="5m" in rules/); one of `windows`, or they never fire.
    window: float = 300.0


@dataclass(frozen=True)
class PrometheusConfig:
    """`prometheus:` fleet mode: specwatch polls no vLLM itself and reads every replica from a
    Prometheus-compatible query API instead."""

    url: str
    # Label matchers added to every vLLM series, without or with braces: 'namespace="llm",job="vllm"'.
    selector: str = ""
    # Labels that together identify one vLLM replica (one /metrics endpoint).
    replica_labels: tuple[str, ...] = ("instance",)
    # Replica labels that identify one deployment (a subset of replica_labels): the rollout grader's
    # key beside the route. Empty: one grading per route.
    deployment_labels: tuple[str, ...] = ()
    # Values may hold ${ENV}; resolved at load time and never logged.
    headers: Mapping[str, str] = field(default_factory=dict)
    # Re-read for every query (projected service-account tokens rotate); relative to the config file.
    bearer_token_file: str | None = None
    timeout: float = 10.0
    max_bytes: int = 64 * 2**20
    # Prometheus's scrape interval of the vLLM job; None infers it from each replica's samples.
    scrape_interval: float | None = None
    # The spec-off replicas whose step times are each route's measured baseline, by label value;
    # empty: every replica of the route without speculation (fleet/baseline.py).
    canary: Mapping[str, str] = field(default_factory=dict)
    # Live fleet mode's start: how far back the history is replayed into the learners (0: not).
    history_lookback: float = 12 * 3600.0
    # Read the engine-side per-route recorded series (rules/specwatch-fleet-recording.yaml):
    # True, False (the default: every replica's series), or None ("auto") to detect them with one
    # query at start (fleet/recorded.py).
    recorded: bool | None = False
    # (index, total): this instance evaluates only the routes whose hash falls on its index (fleet/shard.py).
    shard: tuple[int, int] = (0, 1)

    @property
    def matchers(self) -> str:
        """The selector's matchers without braces ('' when none)."""
        text = self.selector.strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
        return text.strip().rstrip(",").rstrip()


@dataclass(frozen=True)
class ReadbackConfig:
    """`readback:` sidecar mode: at start, read back from the Prometheus that scrapes this sidecar
    what the previous pod of the same route exported (its last before-window), so a change applied
    by replacing the pod is still graded (docs/rollouts.md)."""

    url: str
    # Label matchers that pick this deployment's specwatch series (the pod label changes with each pod).
    selector: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    bearer_token_file: str | None = None
    timeout: float = 5.0
    max_bytes: int = 4 * 2**20
    # How far back the previous pod's last sample may lie.
    lookback: float = 3600.0

    def as_prometheus(self) -> PrometheusConfig:
        """The query client's settings (fleet mode's client serves both)."""
        return PrometheusConfig(
            url=self.url,
            selector=self.selector,
            headers=self.headers,
            bearer_token_file=self.bearer_token_file,
            timeout=self.timeout,
            max_bytes=self.max_bytes,
        )


@dataclass(frozen=True)
class Config:
    listen: str = ":9474"
    poll_interval: float = 5.0
    windows: tuple[float, ...] = (60.0, 300.0)
    targets: tuple[TargetConfig, ...] = (TargetConfig(),)
    routes: tuple[RouteConfig, ...] = ()
    hardware: HardwareConfig = HardwareConfig()
    tensor_parallel: int = 1
    model: ModelConfig = ModelConfig()
    draft: DraftConfig = DraftConfig()
    engine: EngineConfig = EngineConfig()
    # The measured step-time profile (costmodel.parse_profile) and the file it came from.
    profile: Profile | None = None
    profile_path: str | None = None
    decision: DecisionConfig = DecisionConfig()
    learning: LearningConfig = LearningConfig()
    log: LogConfig = LogConfig()
    alerting: AlertingConfig = AlertingConfig()
    # Routes not seen for this many polls are dropped (label churn must not grow memory).
    route_ttl_polls: int = 60
    # Sidecar mode: the most seconds to keep polling and serving after SIGTERM while vLLM still answers
    # with metrics (its pod got the same signal; serve/drain.py). It must end before the pod's
    # terminationGracePeriodSeconds: the default fits Kubernetes' default 30 s with serve/drain.py's
    # STOP_MARGIN (5 s) to stop in, and the chart derives it from the grace period it is given.
    shutdown_drain: float = 25.0
    # Fleet mode when set (targets is then empty); None: sidecar mode, polling targets.
    prometheus: PrometheusConfig | None = None
    # Sidecar mode: restore the previous pod's before-window at start (None: start from nothing).
    readback: ReadbackConfig | None = None
    # The keys the file, the environment or a flag stated (``hardware.preset``, ``tensor_parallel``):
    # a stated value equal to its default is no assumption. Not part of equality.
    stated: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def window_labels(self) -> tuple[str, ...]:
        return tuple(format_duration(w) for w in self.windows)

    @property
    def listen_address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return (host or "0.0.0.0", int(port))

    # What a reload must rebuild: each evaluator compares these between the old and the new config.
    def pipeline_shape(self) -> tuple[object, ...]:
        """What the sidecar's windows and verdicts are keyed on: a change here starts them afresh."""
        return (tuple((t.name, t.url) for t in self.targets), self.routes, self.windows, self.route_ttl_polls)

    def fleet_shape(self) -> tuple[object, ...]:
        """What fleet mode's queries and verdicts are keyed on: a change here starts them afresh."""
        # How much history a new evaluator replays is not its shape: changing it rebuilds nothing.
        source = replace(self.prometheus, history_lookback=0.0) if self.prometheus is not None else None
        return (source, self.routes, self.windows, self.route_ttl_polls)

    def cost_inputs(self) -> tuple[object, ...]:
        """What the cost model is built from: a change here rebuilds it (verdicts are kept). The
        stated --speculative-config (draft.config) is not: the config check and the advice read it."""
        return (
            self.hardware,
            self.model,
            replace(self.draft, config=None),
            self.engine,
            self.profile,
            self.profile_path,
            self.tensor_parallel,
        )
