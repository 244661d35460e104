"""The configuration schema: every key of the config file, written once.

Each key states its kind (type, bounds, choices), its description, an example, whether YAML null
means "not set", and its environment variable. From this one table come:

- validation (config/parse.py walks it; errors name the dotted key, the CLI exits 2),
- the environment overrides (config/env.py: SPECWATCH_<KEY>, nested with a double underscore),
- the `config` schema of the Helm chart (config/chart.py writes it into values.schema.json;
  `--check` fails on drift).

Defaults live in the result dataclasses (config/result.py), whose field names equal the key names.

How to add a key: add a typed field with its default to the dataclass in result.py, and one `Key`
line to the section below; regenerate the chart schema (`python -m specwatch.config.chart`). A new
section is a dataclass plus a `Section(...)` entry (and a field of that type in `Config`); a rule
that spans keys goes into config/parse.py (`_build`).

Why a table in the package and not pydantic v2 + pydantic-settings (measured 2026-11-30 on the
shared 2-core machine, Python 3.11, pydantic 2.14.4, pydantic-settings 2.16.3, pydantic-core 2.50.5;
fresh process each, median of 7, peak RSS from ru_maxrss):

    python -c pass                              11.8 MiB
    import specwatch.config (+ load defaults)   14.3 MiB (17.0 MiB)
    sidecar imports (specwatch.service) + load  34.2 MiB
    ... + pydantic, equivalent models            44.3 MiB  (+10.1 MiB, +30 %)
    ... + pydantic + pydantic-settings + models  45.7 MiB  (+11.5 MiB, +34 %)
    import pydantic_settings alone              +22 MiB over bare Python, 250-480 ms import
    sidecar start-up (quietest run)             395 ms -> 762 ms with pydantic + settings + models

This package in the same measurement: import 14.9 MiB, + load 17.3 MiB, sidecar 34.4 MiB (the
hand-written module it replaces: 14.3, 17.0, 34.2 MiB).

The replay benchmark peaks at 31 MB in total; a third more memory and a few hundred ms of start-up
for a file read once is not worth a fifth runtime dependency, and pydantic would still need the
same cross-key rules, the chart-specific schema tweaks and the "key: reason" error lines written
by hand. The package's own kinds (config/kinds.py) and walker (config/parse.py) do it with PyYAML.
"""

from __future__ import annotations

from typing import Any

from .kinds import (
    Choice,
    Duration,
    DurationList,
    ExistingFile,
    Flag,
    HoldTime,
    JsonFile,
    LabelMatchers,
    LabelNames,
    Listen,
    ModelRef,
    Name,
    Number,
    Size,
    SpeculativeConfig,
    StepTimeProfile,
    StringMap,
    Text,
    Url,
)
from .nodes import Items, Key, Section
from .result import (
    AlertingConfig,
    Config,
    DecisionConfig,
    DraftConfig,
    HardwareConfig,
    LearningConfig,
    LogConfig,
    ModelConfig,
    PrometheusConfig,
    RouteConfig,
    TargetConfig,
)


def _costmodel() -> Any:
    from .. import (
        costmodel,  # the cost model owns presets, dtypes and methods; config lists them
    )

    return costmodel


def hardware_presets() -> tuple[str, ...]:
    return tuple(_costmodel().HARDWARE_PRESETS)


def model_presets() -> tuple[str, ...]:
    return tuple(_costmodel().MODEL_PRESETS)


def weight_dtypes() -> tuple[str, ...]:
    return tuple(_costmodel().DTYPE_BYTES)


def draft_methods() -> tuple[str, ...]:
    model = _costmodel()
    return (*model.DRAFT_METHODS, *model.METHOD_ALIASES)


def _fixed(*values: str) -> Any:
    return lambda: values


POSITIVE = Number(minimum=0, exclusive_minimum=True)
FRACTION = Number(minimum=0, maximum=1, exclusive_minimum=True)

TARGET = Section(
    "targets",
    TargetConfig,
    doc="a vLLM /metrics endpoint",
    keys=(
        Key(
            "name",
            Name(),
            "label value of the target's series",
            example="vllm-0",
            default_doc="vllm for the first target, target<i> for the others",
        ),
        Key(
            "url",
            Url(),
            "http(s) URL of vLLM's /metrics; redirects are not followed, proxies ignored",
            example="http://10.0.0.1:8000/metrics",
            env="SPECWATCH_TARGET_URL",
        ),
        Key(
            "timeout",
            Duration(),
            "whole-request deadline, shorter than poll_interval",
            example="1s",
            default_doc="min(2s, 0.8 x poll_interval)",
        ),
        Key("max_bytes", Size(), "cap on the decoded body (gzip bombs stop here)", example="4MiB"),
        Key(
            "headers",
            StringMap(env_refs=True),
            'request headers; values may be "${ENV_VAR}", never logged',
            example={"Authorization": "Bearer ${VLLM_API_KEY}"},
            nullable=True,
        ),
    ),
)

ROUTE = Section(
    "routes",
    RouteConfig,
    doc="a named traffic class on one target",
    keys=(
        Key("name", Name(), "route label value", example="code", required=True),
        Key(
            "target",
            Text(),
            "name of the target it is served by (optional with one target)",
            example="vllm",
            nullable=True,
        ),
        Key(
            "match",
            StringMap(keys=("model_name", "engine"), keys_hint="only model_name and engine can be matched"),
            "vLLM labels that select the route's series: model_name and/or engine",
            example={"model_name": "llama-code"},
            nullable=True,
        ),
        Key(
            "baseline_itl_p99_seconds",
            POSITIVE,
            "spec-off P99 inter-token latency, for SpecDecodeITLP99Regression",
            example=0.045,
            nullable=True,
        ),
        Key(
            "expect_speculation",
            Flag(),
            "SpecDecodeMetricsMissing fires when the spec-decode metrics vanish",
            example=False,
        ),
    ),
)

HARDWARE = Section(
    "hardware",
    HardwareConfig,
    shorthand="preset",
    doc="a preset name, or a mapping with a preset and/or measured figures",
    keys=(
        Key(
            "preset",
            Choice(hardware_presets, noun="preset"),
            "GPU preset of the cost model",
            example="h200",
            nullable=True,
            default=None,
        ),
        Key("bandwidth_bytes_per_second", POSITIVE, "HBM bandwidth per GPU", example=3.35e12, nullable=True),
        Key("flops", POSITIVE, "dense peak FLOP/s per GPU", example=989e12, nullable=True),
        Key("mbu", FRACTION, "achieved fraction of the bandwidth", example=0.7, nullable=True),
        Key("mfu", FRACTION, "achieved fraction of the FLOP/s", example=0.5, nullable=True),
        Key("overhead_seconds", Number(minimum=0), "fixed cost per engine step", example=0.002, nullable=True),
    ),
)

MODEL = Section(
    "model",
    ModelConfig,
    doc="the target model: a preset, a config.json, or a parameter count",
    keys=(
        Key(
            "preset",
            Choice(model_presets, noun="preset"),
            "model preset of the cost model",
            example="llama-3.1-8b",
            nullable=True,
        ),
        Key(
            "config_json",
            JsonFile(),
            "path of the model's Hugging Face config.json (relative to this file)",
            example="/models/llama/config.json",
            nullable=True,
            fields=("config_json", "hf_config"),
        ),
        Key(
            "params",
            Number(minimum=0, exclusive_minimum=True, numeric_strings=True),
            "parameter count",
            example=8e9,
            nullable=True,
        ),
        Key("dtype", Choice(weight_dtypes), "weight dtype", example="fp8"),
        Key("layers", Number(minimum=1, integer=True), "decoder layers (with params)", example=32, nullable=True),
        Key("kv_heads", Number(minimum=1, integer=True), "KV heads (with params)", example=8, nullable=True),
        Key("head_dim", Number(minimum=1, integer=True), "head dimension (with params)", example=128, nullable=True),
        Key("context_tokens", Number(minimum=0, integer=True), "mean context per request", example=4096, nullable=True),
    ),
)

DRAFT = Section(
    "draft",
    DraftConfig,
    doc="the speculative method (vLLM does not export it)",
    keys=(
        Key(
            "method",
            Choice(draft_methods),
            "drafter; auto infers n-gram vs model-based from the drafts",
            example="eagle3",
        ),
        Key(
            "cost_per_token",
            Number(minimum=0, maximum=10, exclusive_maximum=True),
            "fraction of a plain target step per drafted token; null: the method's default",
            example=0.05,
            nullable=True,
        ),
        Key(
            "k",
            Number(minimum=1, maximum=64, integer=True),
            "configured num_speculative_tokens; null: read from the metrics",
            example=4,
            nullable=True,
        ),
        Key(
            "model",
            ModelRef(model_presets),
            "draft model of method draft_model: a model preset or its config.json path; null: llama-3.2-1b",
            example="llama-3.2-1b",
            nullable=True,
            fields=("model", "model_hf_config"),
        ),
        Key(
            "config",
            SpeculativeConfig(),
            "the --speculative-config vLLM runs with (mapping or JSON string); the observed draft "
            "length is checked against its K (and num_speculative_tokens_per_batch_size schedule)",
            example='{"method":"eagle3","num_speculative_tokens":4,'
            '"num_speculative_tokens_per_batch_size":[[1,16,4],[17,512,2]]}',
            nullable=True,
        ),
    ),
)

DECISION = Section(
    "decision",
    DecisionConfig,
    doc="when a verdict is given and changed",
    keys=(
        Key(
            "min_drafts",
            Number(minimum=1, integer=True),
            "fewer drafts in a window: insufficient_data, ratio gauges absent",
            example=1000,
        ),
        Key("margin", Number(minimum=0, maximum=0.5), "hysteresis band around the break-even", example=0.05),
        Key(
            "hold",
            HoldTime(),
            "how long a new verdict must stay the candidate before it takes effect; "
            "a bare integer counts polls (N polls = (N-1) x poll_interval)",
            example="1m",
        ),
    ),
)

LEARNING = Section(
    "learning",
    LearningConfig,
    doc="the step-time curve learned from the server's own metrics (docs/costmodel.md); a profile overrides it",
    keys=(
        Key(
            "enabled",
            Flag(),
            "learn the step-time curve online; null (auto): only when hardware and model are not configured",
            example=True,
            nullable=True,
        ),
        Key(
            "min_points",
            Number(minimum=1, maximum=10000, integer=True),
            "points (windows) before the learned curve replaces the prior",
            example=12,
        ),
        Key("half_life", Duration(), "age at which a point weighs half", example="24h"),
        Key("point_seconds", Duration(), "shortest span of one point", example="30s"),
    ),
)

LOG = Section(
    "log",
    LogConfig,
    doc="structured logs on stderr",
    keys=(
        Key("format", Choice(_fixed("json", "console")), "log format", example="console"),
        Key("level", Choice(_fixed("debug", "info", "warning", "error")), "lowest level logged", example="debug"),
    ),
)

ALERTING = Section(
    "alerting",
    AlertingConfig,
    doc="what the alert rules (rules/, the chart's PrometheusRule) expect of the sidecar",
    keys=(
        Key(
            "window",
            Duration(),
            'the window the alert rules read (window="5m"); warned at start when not among windows; '
            "env also SPECWATCH_ALERT_WINDOW",
            example="15m",
            env_aliases=("SPECWATCH_ALERT_WINDOW",),
        ),
    ),
)

PROMETHEUS = Section(
    "prometheus",
    PrometheusConfig,
    nullable=True,
    doc="fleet mode: read every vLLM replica from Prometheus and poll nothing (targets must be absent)",
    keys=(
        Key(
            "url",
            Url(base=True),
            "base URL of a Prometheus-compatible query API (Prometheus, Thanos, Mimir, VictoriaMetrics)",
            example="http://prometheus:9090",
            required=True,
        ),
        Key(
            "selector",
            LabelMatchers(),
            "PromQL label matchers added to every vLLM series; __name__ is refused",
            example='{namespace="llm", job="vllm"}',
        ),
        Key(
            "replica_labels",
            LabelNames(
                reserved=("model_name", "engine", "position", "le"),
                reserved_prefixes=("__", "specwatch_"),
                reserved_hint="specwatch reads or adds it; name the labels of one vLLM (e.g. namespace, pod)",
            ),
            "labels that together identify one vLLM replica; env: comma-separated",
            example=["namespace", "pod"],
        ),
        Key(
            "headers",
            StringMap(env_refs=True, http_headers=True),
            'request headers (Mimir/Cortex tenant); values may be "${ENV_VAR}", never logged; env: a JSON object',
            example={"X-Scope-OrgID": "${TENANT}"},
            nullable=True,
        ),
        Key(
            "bearer_token_file",
            ExistingFile(),
            "file holding a bearer token, re-read for every query (relative to this file)",
            example="/var/run/secrets/kubernetes.io/serviceaccount/token",
            nullable=True,
        ),
        Key(
            "timeout",
            Duration(),
            "whole-query deadline, shorter than poll_interval (long windows: raise both)",
            example="3s",
            default_doc="min(10s, 0.8 x poll_interval)",
        ),
        Key("max_bytes", Size(), "cap on one decoded query answer", example="256MiB"),
        Key(
            "scrape_interval",
            Duration(),
            "Prometheus's scrape interval of the vLLM job; null: inferred from the samples",
            example="30s",
            nullable=True,
        ),
    ),
)

SCHEMA = Section(
    "",
    Config,
    doc="specwatch config file",
    keys=(
        Key("listen", Listen(), "exporter HTTP address [host]:port", example="127.0.0.1:9100", chart=False),
        Key("poll_interval", Duration(), "time between polls of each target", example="2s"),
        Key(
            "windows",
            DurationList(),
            "rolling windows, each at least 2 x poll_interval; env: comma-separated",
            example=["30s", "2m"],
        ),
        Items(
            "targets",
            TARGET,
            "vLLM /metrics endpoints",
            min_items=1,
            default_doc="one target vllm at http://127.0.0.1:8000/metrics",
        ),
        Items(
            "routes",
            ROUTE,
            "named traffic classes",
            default_doc="one route per (target, model_name), named after model_name",
        ),
        HARDWARE,
        Key("tensor_parallel", Number(minimum=1, maximum=64, integer=True), "GPUs per model replica", example=4),
        MODEL,
        DRAFT,
        Key(
            "profile",
            StepTimeProfile(),
            "measured step-time profile (YAML path or inline) replacing the roofline (docs/costmodel.md)",
            example="profile.yaml",
            nullable=True,
            fields=("profile", "profile_path"),
        ),
        DECISION,
        LEARNING,
        LOG,
        ALERTING,
        Key(
            "route_ttl_polls",
            Number(minimum=1, integer=True),
            "routes unseen for this many polls are dropped",
            example=120,
        ),
        PROMETHEUS,
    ),
)
