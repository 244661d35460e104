"""The configuration, each key declared once: the frozen, typed dataclasses that the rest of
specwatch reads, whose `setting(...)` fields state each key's kind (type, bounds, choices), default,
description, example, whether YAML null means "not set", and its environment variable.

From these declarations come validation (config/parse.py walks `SCHEMA`; errors name the dotted key,
the CLI exits 2), the environment overrides (config/env.py: SPECWATCH_<KEY>, nested with a double
underscore), and the generated files (tools/: the Helm chart's `config` schema and README table,
docs/configuration.md), each with `--check` in CI.

How to add a key: add one `setting(...)` field to its dataclass and regenerate (`python
tools/gen_config_docs.py`, `python tools/gen_chart_schema.py`, `python tools/gen_chart_readme.py`). A
new section is a `@declared` dataclass plus a `section(...)` field of its parent; a rule that spans
keys goes into config/parse.py (`_build`). Fields without `setting` are derived at load time.

Why declarations and not pydantic: docs/design-notes.md ("The config schema is a table").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, replace
from typing import Any

from specwatch.base.units import format_duration
from specwatch.config.file_kinds import ExistingFile, JsonFile, ModelRef, StepTimeProfile
from specwatch.config.kinds import (
    FRACTION,
    POSITIVE,
    Choice,
    Duration,
    DurationList,
    Flag,
    HoldTime,
    Listen,
    Name,
    Number,
    Size,
    Text,
    Url,
)
from specwatch.config.label_kinds import LabelMatchers, LabelNames
from specwatch.config.mapping_kinds import FlagOrAuto, Shard, SpeculativeConfig, StringMap
from specwatch.config.nodes import declared, items, schema_of, section, setting
from specwatch.costmodel import (
    DRAFT_METHODS,
    DTYPE_BYTES,
    HARDWARE_PRESETS,
    METHOD_ALIASES,
    MODEL_PRESETS,
    Profile,
    engine_priors,
)
from specwatch.costmodel.learned import DEFAULT_HALF_LIFE_SECONDS, DEFAULT_MIN_POINTS
from specwatch.engines import registry


def _fixed(*values: str) -> Any:
    return lambda: values


def _model_presets() -> tuple[str, ...]:
    return tuple(MODEL_PRESETS)


# The query client's block, declared once for the two sections that query Prometheus (`prometheus:`,
# `readback:`; ReadbackConfig.as_prometheus hands it to the same client): headers, bearer_token_file,
# timeout and max_bytes. Only the deadline and the size cap differ between the two.


def _query_headers() -> Any:
    # Values may hold ${ENV}; resolved at load time and never logged.
    return setting(
        StringMap(env_refs=True, http_headers=True),
        'request headers (Mimir/Cortex tenant); values may be "${ENV_VAR}", never logged; env: a JSON object',
        default_factory=dict,
        example={"X-Scope-OrgID": "${TENANT}"},
        nullable=True,
    )


def _query_bearer_token_file() -> Any:
    # Re-read for every query (projected service-account tokens rotate); relative to the config file.
    return setting(
        ExistingFile(),
        "file holding a bearer token, re-read for every query (relative to this file)",
        default=None,
        example="/var/run/secrets/kubernetes.io/serviceaccount/token",
        nullable=True,
    )


def _query_timeout(doc: str, *, default: float, example: str, default_doc: str = "") -> Any:
    return setting(Duration(), doc, default=default, example=example, default_doc=default_doc)


def _query_max_bytes(*, default: int, example: str) -> Any:
    return setting(Size(), "cap on one decoded query answer", default=default, example=example)


@declared
class TargetConfig:
    name: str = setting(
        Name(),
        "label value of the target's series",
        default="vllm",
        example="vllm-0",
        default_doc="vllm for the first target, target<i> for the others",
    )
    url: str = setting(
        Url(),
        "http(s) URL of the engine's /metrics; redirects are not followed, proxies ignored",
        default="http://127.0.0.1:8000/metrics",
        example="http://10.0.0.1:8000/metrics",
        env="SPECWATCH_TARGET_URL",
    )
    timeout: float = setting(
        Duration(),
        "whole-request deadline, shorter than poll_interval",
        default=2.0,
        example="1s",
        default_doc="min(2s, 0.8 x poll_interval)",
    )
    max_bytes: int = setting(
        Size(), "cap on the decoded body (gzip bombs stop here)", default=16 * 2**20, example="4MiB"
    )
    engine: str = setting(
        Choice(lambda: (registry.AUTO, *registry.ENGINE_NAMES), noun="engine"),
        "serving engine whose metrics the target exports; auto: detected from each payload's families",
        default="auto",
        example="llamacpp",
    )
    # Values may be "${ENV}"; resolved at load time and never logged.
    headers: Mapping[str, str] = setting(
        StringMap(env_refs=True),
        'request headers; values may be "${ENV_VAR}", never logged',
        default_factory=dict,
        example={"Authorization": "Bearer ${VLLM_API_KEY}"},
        nullable=True,
    )


@declared
class RouteConfig:
    name: str = setting(Name(), "route label value", example="code", required=True)
    target: str = setting(
        Text(), "name of the target it is served by (optional with one target)", example="vllm", nullable=True
    )
    match: Mapping[str, str] = setting(
        StringMap(keys=("model_name", "engine"), keys_hint="only model_name and engine can be matched"),
        "vLLM labels that select the route's series: model_name and/or engine; without it the route takes "
        "every series of its target (allowed only for a target's one route)",
        default_factory=dict,
        example={"model_name": "llama-code"},
        nullable=True,
    )
    baseline_itl_p99_seconds: float | None = setting(
        POSITIVE,
        "spec-off P99 inter-token latency, for SpecDecodeITLP99Regression",
        default=None,
        example=0.045,
        nullable=True,
    )
    expect_speculation: bool = setting(
        Flag(), "SpecDecodeMetricsMissing fires when the spec-decode metrics vanish", default=True, example=False
    )


@declared
class HardwareConfig:
    preset: str | None = setting(
        Choice(lambda: tuple(HARDWARE_PRESETS), noun="preset"),
        "GPU preset of the cost model",
        default="h100-sxm",
        example="h200",
        nullable=True,
        # Hardware given as a mapping of measured figures has no preset.
        parsed_default=None,
    )
    bandwidth_bytes_per_second: float | None = setting(
        POSITIVE, "HBM bandwidth per GPU", default=None, example=3.35e12, nullable=True
    )
    flops: float | None = setting(POSITIVE, "dense peak FLOP/s per GPU", default=None, example=989e12, nullable=True)
    mbu: float | None = setting(
        FRACTION, "achieved fraction of the bandwidth", default=None, example=0.7, nullable=True
    )
    mfu: float | None = setting(FRACTION, "achieved fraction of the FLOP/s", default=None, example=0.5, nullable=True)
    overhead_seconds: float | None = setting(
        Number(minimum=0), "fixed cost per engine step", default=None, example=0.002, nullable=True
    )


@declared
class ModelConfig:
    preset: str | None = setting(
        Choice(_model_presets, noun="preset"),
        "model preset of the cost model",
        default=None,
        example="llama-3.1-8b",
        nullable=True,
    )
    config_json: str | None = setting(
        JsonFile(),
        "path of the model's Hugging Face config.json (relative to this file)",
        default=None,
        example="/models/llama/config.json",
        nullable=True,
        also_fills="hf_config",
    )
    # The parsed config.json (read from config_json at load time).
    hf_config: Mapping[str, Any] | None = None
    params: float | None = setting(
        Number(minimum=0, exclusive_minimum=True, numeric_strings=True),
        "parameter count",
        default=None,
        example=8e9,
        nullable=True,
    )
    dtype: str = setting(Choice(lambda: tuple(DTYPE_BYTES)), "weight dtype", default="bf16", example="fp8")
    layers: int | None = setting(
        Number(minimum=1, integer=True), "decoder layers (with params)", default=None, example=32, nullable=True
    )
    kv_heads: int | None = setting(
        Number(minimum=1, integer=True), "KV heads (with params)", default=None, example=8, nullable=True
    )
    head_dim: int | None = setting(
        Number(minimum=1, integer=True), "head dimension (with params)", default=None, example=128, nullable=True
    )
    context_tokens: int = setting(
        Number(minimum=0, integer=True), "mean context per request", default=2048, example=4096, nullable=True
    )


@declared
class DraftConfig:
    method: str = setting(
        Choice(lambda: (*DRAFT_METHODS, *METHOD_ALIASES)),
        "drafter; auto infers n-gram vs model-based from the drafts",
        default="auto",
        example="eagle3",
    )
    cost_per_token: float | None = setting(
        Number(minimum=0, maximum=10, exclusive_maximum=True),
        "fraction of a plain target step per drafted token; null: the method's default",
        default=None,
        example=0.05,
        nullable=True,
    )
    k: int | None = setting(
        Number(minimum=1, maximum=64, integer=True),
        "configured num_speculative_tokens; null: read from the metrics",
        default=None,
        example=4,
        nullable=True,
    )
    # The drafter of method draft_model: a preset name or a config.json path, and that file parsed.
    model: str | None = setting(
        ModelRef(_model_presets),
        "draft model of method draft_model: a model preset or its config.json path; null: llama-3.2-1b",
        default=None,
        example="llama-3.2-1b",
        nullable=True,
        also_fills="model_hf_config",
    )
    model_hf_config: Mapping[str, Any] | None = None
    # The --speculative-config object vLLM runs with (checked against the observed draft length).
    config: Mapping[str, Any] | None = setting(
        SpeculativeConfig(),
        "the --speculative-config vLLM runs with (mapping or JSON string); the observed draft "
        "length is checked against its K (and num_speculative_tokens_per_batch_size schedule)",
        default=None,
        example='{"method":"eagle3","num_speculative_tokens":4,'
        '"num_speculative_tokens_per_batch_size":[[1,16,4],[17,512,2]]}',
        nullable=True,
    )


@declared
class EngineConfig:
    # None: the generic fixed costs of speculation; a name picks its engine's (costmodel.engine_priors).
    name: str | None = setting(
        Choice(lambda: engine_priors.ENGINE_NAMES),
        "engine family; null: the generic fixed costs (the per-engine fits are not yet validated out of sample)",
        default=None,
        example="vllm",
        nullable=True,
    )
    version: str | None = setting(
        Name(),
        "engine version (vLLM below 0.8 is the V0 engine); null: the current one",
        default=None,
        example="0.11.0",
        nullable=True,
    )


@declared
class DecisionConfig:
    min_drafts: int = setting(
        Number(minimum=1, integer=True),
        "fewer drafts in a window: insufficient_data, ratio gauges absent",
        default=500,
        example=1000,
    )
    margin: float = setting(
        Number(minimum=0, maximum=0.5), "hysteresis band around the break-even", default=0.02, example=0.05
    )
    # Two-sided confidence level of the predicted speedup's interval (costmodel/uncertainty.py).
    confidence: float = setting(
        Number(minimum=0.5, maximum=0.999, exclusive_minimum=True),
        "confidence level of the predicted speedup's interval; keep, shorten and disable are given "
        "only when it is clear of 1, otherwise the verdict is undecided",
        default=0.9,
        example=0.95,
    )
    # Seconds (float, from "30s"), or an int: a count of evaluations, so a config that counts
    # polls keeps its meaning.
    hold: float | int = setting(
        HoldTime(),
        "how long a new verdict must stay the candidate before it takes effect; "
        "a bare integer counts evaluations (N = (N-1) x the time between evaluations, see evaluation_interval)",
        default=30.0,
        example="1m",
    )

    def hold_seconds(self, evaluation_period: float) -> float:
        """How long a new verdict must stay the candidate. N evaluations span N - 1 evaluation
        periods (Config.evaluation_period), so an integer hold of N takes effect on the N-th
        consecutive evaluation."""
        if isinstance(self.hold, int):
            return max(self.hold - 1, 0) * evaluation_period
        return float(self.hold)


@declared
class LearningConfig:
    # Learn the step-time curve from the server's own metrics (costmodel/learned.py); a
    # configured profile overrides it. None (auto): learn when neither hardware nor model is
    # configured, i.e. when the verdict would otherwise rest on assumed defaults.
    enabled: bool | None = setting(
        Flag(),
        "learn the step-time curve online; null (auto): only when hardware and model are not configured",
        default=None,
        example=True,
        nullable=True,
    )
    # The learner's own defaults: one home (costmodel/learned.py), so the two cannot diverge.
    min_points: int = setting(
        Number(minimum=1, maximum=10000, integer=True),
        "points (windows) before the learned curve replaces the prior",
        default=DEFAULT_MIN_POINTS,
        example=12,
    )
    half_life: float = setting(
        Duration(), "age at which a point weighs half", default=DEFAULT_HALF_LIFE_SECONDS, example="24h"
    )
    point_seconds: float = setting(Duration(), "shortest span of one point", default=10.0, example="30s")


@declared
class LogConfig:
    format: str = setting(Choice(_fixed("json", "console")), "log format", default="json", example="console")
    level: str = setting(
        Choice(_fixed("debug", "info", "warning", "error")), "lowest level logged", default="info", example="debug"
    )


@declared
class AlertingConfig:
    # The window the alert rules read (window="5m" in rules/); one of `windows`, or they never fire.
    window: float = setting(
        Duration(),
        'the window the alert rules read (window="5m"); warned at start when not among windows; '
        "env also SPECWATCH_ALERT_WINDOW",
        default=300.0,
        example="15m",
        env_aliases=("SPECWATCH_ALERT_WINDOW",),
    )


@declared
class PrometheusConfig:
    """`prometheus:` fleet mode: specwatch polls no vLLM itself and reads every replica from a
    Prometheus-compatible query API instead."""

    url: str = setting(
        Url(base=True),
        "base URL of a Prometheus-compatible query API (Prometheus, Thanos, Mimir, VictoriaMetrics)",
        example="http://prometheus:9090",
        required=True,
    )
    # Label matchers added to every vLLM series, without or with braces: 'namespace="llm",job="vllm"'.
    selector: str = setting(
        LabelMatchers(),
        "PromQL label matchers added to every vLLM series; __name__ is refused",
        default="",
        example='{namespace="llm", job="vllm"}',
    )
    # Labels that together identify one vLLM replica (one /metrics endpoint).
    replica_labels: tuple[str, ...] = setting(
        LabelNames(
            reserved=("model_name", "engine", "position", "le"),
            reserved_prefixes=("__", "specwatch_"),
            reserved_hint="specwatch reads or adds it; name the labels of one vLLM (e.g. namespace, pod)",
        ),
        "labels that together identify one vLLM replica; env: comma-separated",
        default=("instance",),
        example=["namespace", "pod"],
    )
    # Replica labels that identify one deployment (a subset of replica_labels): the rollout grader's
    # key beside the route. Empty: one grading per route.
    deployment_labels: tuple[str, ...] = setting(
        LabelNames(allow_empty=True),
        "replica labels that identify one deployment: rollouts are graded per route and deployment "
        "(docs/rollouts.md); []: per route; env: comma-separated",
        default=(),
        example=["namespace"],
    )
    headers: Mapping[str, str] = _query_headers()
    bearer_token_file: str | None = _query_bearer_token_file()
    timeout: float = _query_timeout(
        "whole-query deadline, shorter than poll_interval (long windows: raise both)",
        default=10.0,
        example="3s",
        default_doc="min(10s, 0.8 x poll_interval)",
    )
    max_bytes: int = _query_max_bytes(default=64 * 2**20, example="256MiB")
    # None infers it from each replica's samples.
    scrape_interval: float | None = setting(
        Duration(),
        "Prometheus's scrape interval of the vLLM job; null: inferred from the samples",
        default=None,
        example="30s",
        nullable=True,
    )
    # The spec-off replicas whose step times are each route's measured baseline, by label value;
    # empty: every replica of the route without speculation (fleet/baseline.py).
    canary: Mapping[str, str] = setting(
        StringMap(),
        "replica labels (or model_name) of the spec-off replicas whose step times are the route's "
        "baseline (docs/fleet.md); empty: every replica of the route without speculation",
        default_factory=dict,
        example={"model_name": "llama-3.1-8b"},
        nullable=True,
    )
    # Live fleet mode's start: how far back the history is replayed into the learners (0: not).
    history_lookback: float = setting(
        Duration(allow_zero=True),
        "live fleet mode, at start and when a reload rebuilds it: replay this much history into the "
        "learners, verdicts and rollout grader, serving none of it (docs/fleet.md); 0s: off",
        default=12 * 3600.0,
        example="6h",
    )
    # None ("auto"): detected with one query at start (fleet/recorded.py).
    recorded: bool | None = setting(
        FlagOrAuto(),
        "read the per-route series of rules/specwatch-fleet-recording.yaml instead of every replica's "
        "(docs/fleet.md); auto: detected with one query at start",
        default=False,
        example="auto",
    )
    # (index, total): this instance evaluates only the routes whose hash falls on its index (fleet/shard.py).
    shard: tuple[int, int] = setting(
        Shard(),
        "{index, total}: evaluate only the routes whose stable hash modulo total is index (docs/fleet.md); "
        "env: index/total, or <StatefulSet pod name>/total",
        default=(0, 1),
        example={"index": 0, "total": 2},
    )

    @property
    def matchers(self) -> str:
        """The selector's matchers without braces ('' when none)."""
        text = self.selector.strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
        return text.strip().rstrip(",").rstrip()


@declared
class ReadbackConfig:
    """`readback:` sidecar mode: at start, read back from the Prometheus that scrapes this sidecar
    what the previous pod of the same route exported (its last before-window), so a change applied
    by replacing the pod is still graded (docs/rollouts.md)."""

    url: str = setting(
        Url(base=True),
        "base URL of the Prometheus-compatible query API that scrapes this sidecar",
        example="http://prometheus:9090",
        required=True,
    )
    # The pod label changes with each pod: the selector picks the deployment's series.
    selector: str = setting(
        LabelMatchers(),
        "PromQL label matchers that pick this deployment's specwatch series (not the pod: it changes)",
        default="",
        example='{namespace="llm", job="vllm-llama"}',
    )
    headers: Mapping[str, str] = _query_headers()
    bearer_token_file: str | None = _query_bearer_token_file()
    timeout: float = _query_timeout(
        "deadline of the whole read-back; polling starts without waiting for it", default=5.0, example="2s"
    )
    max_bytes: int = _query_max_bytes(default=4 * 2**20, example="8MiB")
    lookback: float = setting(
        Duration(), "how long ago the previous pod's last sample may be", default=3600.0, example="6h"
    )

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


#: Sidecar mode without evaluation_interval: polls faster than this are evaluated this often (the
#: polls between only fill the windows). What reads an evaluation (a Prometheus scrape every 15 s or
#: more, the page's refresh, a verdict held for 30 s) reads none faster: at one-second polls four
#: evaluations in five were read by nobody (docs/benchmarks.md, "Polling fast").
AUTO_EVALUATION_SECONDS = 5.0


@declared
class Config:
    listen: str = setting(
        Listen(), "exporter HTTP address [host]:port", default=":9474", example="127.0.0.1:9100", chart=False
    )
    poll_interval: float = setting(Duration(), "time between polls of each target", default=5.0, example="2s")
    # Sidecar mode: polls between two evaluations only ingest (None: Config.evaluation_period's rule).
    evaluation_interval: float | None = setting(
        Duration(),
        "sidecar mode: time between evaluations of the windows (verdicts, the published view); the polls "
        "between only fill the windows, a failed or changed poll is evaluated at once; at least poll_interval "
        "(set it to poll_interval to evaluate every poll)",
        default=None,
        example="5s",
        nullable=True,
        default_doc="5s, or poll_interval when that is longer (at most half the shortest window)",
    )
    windows: tuple[float, ...] = setting(
        DurationList(),
        "rolling windows, each at least 2 x poll_interval; env: comma-separated",
        default=(60.0, 300.0),
        example=["30s", "2m"],
    )
    targets: tuple[TargetConfig, ...] = items(
        TargetConfig,
        "vLLM /metrics endpoints",
        item_doc="a serving engine's /metrics endpoint (vLLM, or another engine of docs/engines.md)",
        default=(TargetConfig(),),
        min_items=1,
        default_doc="one target vllm at http://127.0.0.1:8000/metrics",
    )
    routes: tuple[RouteConfig, ...] = items(
        RouteConfig,
        "named traffic classes",
        item_doc="a named traffic class on one target",
        default_doc="one route per (target, model_name), named after model_name",
    )
    hardware: HardwareConfig = section(
        HardwareConfig, "a preset name, or a mapping with a preset and/or measured figures", shorthand="preset"
    )
    tensor_parallel: int = setting(
        Number(minimum=1, maximum=64, integer=True), "GPUs per model replica", default=1, example=4
    )
    model: ModelConfig = section(ModelConfig, "the target model: a preset, a config.json, or a parameter count")
    draft: DraftConfig = section(DraftConfig, "the speculative method (vLLM does not export it)")
    engine: EngineConfig = section(
        EngineConfig,
        "the serving engine, whose fixed costs of speculation the cost model charges (docs/costmodel.md)",
        shorthand="name",
    )
    # The measured step-time profile (costmodel.parse_profile) and the file it came from.
    profile: Profile | None = setting(
        StepTimeProfile(),
        "measured step-time profile (YAML path or inline) replacing the roofline (docs/costmodel.md)",
        default=None,
        example="profile.yaml",
        nullable=True,
        also_fills="profile_path",
    )
    profile_path: str | None = None
    decision: DecisionConfig = section(DecisionConfig, "when a verdict is given and changed")
    learning: LearningConfig = section(
        LearningConfig,
        "the step-time curve learned from the server's own metrics (docs/costmodel.md); a profile overrides it",
    )
    log: LogConfig = section(LogConfig, "structured logs on stderr")
    alerting: AlertingConfig = section(
        AlertingConfig, "what the alert rules (rules/, the chart's PrometheusRule) expect of the sidecar"
    )
    # Routes not seen for this many polls are dropped (label churn must not grow memory).
    route_ttl_polls: int = setting(
        Number(minimum=1, integer=True), "routes unseen for this many polls are dropped", default=60, example=120
    )
    # The default fits Kubernetes' default 30 s grace period with serve/drain.py's STOP_MARGIN (5 s)
    # to stop in; the chart derives it from the grace period it is given.
    shutdown_drain: float = setting(
        Duration(allow_zero=True),
        "sidecar mode: after SIGTERM keep polling (every 0.5s) and serving while vLLM still answers with "
        "metrics; exit at every target's first refused connection or non-metrics answer, or after this "
        "long, whichever comes first; keep it 5s below the pod's terminationGracePeriodSeconds (the chart "
        "derives it); 0s exits at once",
        default=25.0,
        example="20s",
    )
    # Fleet mode when set (targets is then empty); None: sidecar mode, polling targets.
    prometheus: PrometheusConfig | None = section(
        PrometheusConfig,
        "fleet mode: read every vLLM replica from Prometheus and poll nothing (targets must be absent)",
        nullable=True,
    )
    # Sidecar mode: restore the previous pod's before-window at start (None: start from nothing).
    readback: ReadbackConfig | None = section(
        ReadbackConfig,
        "sidecar mode: at start, read back the previous pod's before-window from the Prometheus that "
        "scrapes specwatch, so a change applied by replacing the pod is graded (docs/rollouts.md)",
        nullable=True,
    )
    # The keys the file, the environment or a flag stated (``hardware.preset``, ``tensor_parallel``):
    # a stated value equal to its default is no assumption. Not part of equality.
    stated: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def evaluation_period(self) -> float:
        """Seconds between two evaluations: evaluation_interval when set; unset, every poll in fleet
        mode, and in sidecar mode every poll no more often than AUTO_EVALUATION_SECONDS (nor than half
        the shortest window)."""
        if self.evaluation_interval is not None:
            return self.evaluation_interval
        if self.prometheus is not None:
            return self.poll_interval
        return max(self.poll_interval, min(AUTO_EVALUATION_SECONDS, min(self.windows) / 2))

    def evaluation_due(self, elapsed: float) -> bool:
        """Whether an evaluation (or the config file's look that goes with it) is due `elapsed`
        seconds after the last: at every poll when the period is one poll, else once the period
        has passed within half a poll interval, so polls that come a little early do not skip a beat."""
        period = self.evaluation_period
        return period <= self.poll_interval or elapsed >= period - 0.5 * self.poll_interval

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


#: The whole table: what validation, the environment and the generated files walk.
SCHEMA = schema_of(Config, "specwatch config file")
