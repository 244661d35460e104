"""The config sections of where specwatch reads vLLM: `targets` (the /metrics endpoints a sidecar
polls), `routes` (named traffic classes on them), `prometheus` (fleet mode's query API) and
`readback` (where a restarted sidecar reads back what its previous pod exported). Part of the config
schema table (config/schema.py holds its root)."""

from __future__ import annotations

from specwatch.config import result
from specwatch.config.file_kinds import ExistingFile
from specwatch.config.kinds import POSITIVE, Choice, Duration, Flag, Name, Size, Text, Url
from specwatch.config.label_kinds import LabelMatchers, LabelNames
from specwatch.config.mapping_kinds import FlagOrAuto, Shard, StringMap
from specwatch.config.nodes import Key, Section
from specwatch.engines.registry import AUTO, ENGINE_NAMES


def _engine_choices() -> tuple[str, ...]:
    return (AUTO, *ENGINE_NAMES)


TARGET = Section(
    "targets",
    result.TargetConfig,
    doc="a serving engine's /metrics endpoint (vLLM, or another engine of docs/engines.md)",
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
            "http(s) URL of the engine's /metrics; redirects are not followed, proxies ignored",
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
            "engine",
            Choice(_engine_choices, noun="engine"),
            "serving engine whose metrics the target exports; auto: detected from each payload's families",
            example="llamacpp",
        ),
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
    result.RouteConfig,
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
            "vLLM labels that select the route's series: model_name and/or engine; without it the route takes every series of its target (allowed only for a target's one route)",
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


def _query_api_keys(
    *,
    url: str,
    selector: str,
    selector_example: str,
    bearer_token_file: str,
    timeout: str,
    timeout_example: str,
    timeout_default_doc: str = "",
    max_bytes_example: str,
) -> tuple[Key, ...]:
    """The keys of a connection to a Prometheus-compatible query API, in their order: url, selector,
    headers, bearer_token_file, timeout, max_bytes. `prometheus` and `readback` word them each."""
    return (
        Key("url", Url(base=True), url, example="http://prometheus:9090", required=True),
        Key("selector", LabelMatchers(), selector, example=selector_example),
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
            bearer_token_file,
            example="/var/run/secrets/kubernetes.io/serviceaccount/token",
            nullable=True,
        ),
        Key("timeout", Duration(), timeout, example=timeout_example, default_doc=timeout_default_doc),
        Key("max_bytes", Size(), "cap on one decoded query answer", example=max_bytes_example),
    )


_FLEET_API = _query_api_keys(
    url="base URL of a Prometheus-compatible query API (Prometheus, Thanos, Mimir, VictoriaMetrics)",
    selector="PromQL label matchers added to every vLLM series; __name__ is refused",
    selector_example='{namespace="llm", job="vllm"}',
    bearer_token_file="file holding a bearer token, re-read for every query (relative to this file)",
    timeout="whole-query deadline, shorter than poll_interval (long windows: raise both)",
    timeout_example="3s",
    timeout_default_doc="min(10s, 0.8 x poll_interval)",
    max_bytes_example="256MiB",
)

PROMETHEUS = Section(
    "prometheus",
    result.PrometheusConfig,
    nullable=True,
    doc="fleet mode: read every vLLM replica from Prometheus and poll nothing (targets must be absent)",
    keys=(
        *_FLEET_API[:2],  # url, selector; the replica labels follow the selector
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
            "deployment_labels",
            LabelNames(allow_empty=True),
            "replica labels that identify one deployment: rollouts are graded per route and deployment "
            "(docs/rollouts.md); []: per route; env: comma-separated",
            example=["namespace"],
        ),
        *_FLEET_API[2:],
        Key(
            "scrape_interval",
            Duration(),
            "Prometheus's scrape interval of the vLLM job; null: inferred from the samples",
            example="30s",
            nullable=True,
        ),
        Key(
            "canary",
            StringMap(),
            "replica labels (or model_name) of the spec-off replicas whose step times are the route's "
            "baseline (docs/fleet.md); empty: every replica of the route without speculation",
            example={"model_name": "llama-3.1-8b"},
            nullable=True,
        ),
        Key(
            "history_lookback",
            Duration(allow_zero=True),
            "live fleet mode, at start and when a reload rebuilds it: replay this much history into the "
            "learners, verdicts and rollout grader, serving none of it (docs/fleet.md); 0s: off",
            example="6h",
        ),
        Key(
            "recorded",
            FlagOrAuto(),
            "read the per-route series of rules/specwatch-fleet-recording.yaml instead of every replica's "
            "(docs/fleet.md); auto: detected with one query at start",
            example="auto",
        ),
        Key(
            "shard",
            Shard(),
            "{index, total}: evaluate only the routes whose stable hash modulo total is index (docs/fleet.md); "
            "env: index/total",
            example={"index": 0, "total": 2},
        ),
    ),
)


READBACK = Section(
    "readback",
    result.ReadbackConfig,
    nullable=True,
    doc="sidecar mode: at start, read back the previous pod's before-window from the Prometheus that "
    "scrapes specwatch, so a change applied by replacing the pod is graded (docs/rollouts.md)",
    keys=(
        *_query_api_keys(
            url="base URL of the Prometheus-compatible query API that scrapes this sidecar",
            selector="PromQL label matchers that pick this deployment's specwatch series (not the pod: it changes)",
            selector_example='{namespace="llm", job="vllm-llama"}',
            bearer_token_file="file holding a bearer token (relative to this file)",
            timeout="deadline of the whole read-back; polling starts without waiting for it",
            timeout_example="2s",
            max_bytes_example="8MiB",
        ),
        Key("lookback", Duration(), "how long ago the previous pod's last sample may be", example="6h"),
    ),
)
