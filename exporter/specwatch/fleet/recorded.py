"""Fleet mode over recorded series: the engine's Prometheus aggregates each route's replicas, and
fleet mode reads one series per (route, window, family) instead of one per replica.

rules/specwatch-fleet-recording.yaml is written from this module (`python -m
specwatch.fleet.recorded rules/specwatch-fleet-recording.yaml`; `--check` exits 1 when it differs),
so the rules and the queries that read them are one fact:

- `fleet_route:<series>:increase<w>`: each vLLM counter's (and ITL histogram part's) exact window
  increase per replica (queries._exact_increase, the raw read's very expression), summed by the
  aggregation labels + model_name + engine (+ position, + le). A sum of per-replica increases is
  what summing the raw answer would give: ratios (alpha, tau, p_i, ITL quantiles) are the route's
  token-weighted ones.
- `fleet_route:<running>:avg_over_time<w>` / `:count_over_time<w>`: the replicas' mean batch (the
  break-even is read at a replica's batch, so the route's batch is the replicas' mean, not their
  sum) and the most samples any replica has in the window.
- `fleet_replica:*`: small per-replica series (newest sample time, speculating or not, K drafted
  per draft, acceptance) and the median K of an aggregate's replicas, for dashboards and the alerts
  of the `specwatch-fleet-replicas` group (what stays per replica: another K, a replica below its
  route's break-even, a stale replica); fleet mode reads only the newest sample time, per aggregate.

In recorded mode an "aggregate" (cluster, namespace, job) plays the part a replica plays in raw
mode: it is the evaluator's replica key, so grouping, derivations, verdicts and grading run
unchanged, on answers whose size grows with routes, not replicas. The engine families read are
vLLM's (the `vllm` EngineSchema); other engines are read raw (prometheus.recorded: false).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from specwatch.config import format_duration
from specwatch.engines import registry
from specwatch.engines.schema import EngineSchema
from specwatch.fleet import queries as promql
from specwatch.fleet.client import Sample, Series

#: The labels the rules keep besides model_name and engine (+ position, le): one aggregate.
AGGREGATE_LABELS = ("cluster", "namespace", "job")
#: The windows the rules record (config.windows must be among them for recorded mode).
WINDOWS = (60.0, 300.0)
#: The engine whose series the rules aggregate.
ENGINE: EngineSchema = registry.BY_NAME["vllm"]
ROUTE_LEVEL = "fleet_route"
REPLICA_LEVEL = "fleet_replica"
#: One group for every record: Prometheus evaluates each group at an offset of its own within the
#: interval, and fleet mode reads a window's series together, so they must come from one evaluation.
GROUP = "specwatch-fleet-recording"
#: The alerts on what stays per replica.
REPLICA_GROUP = "specwatch-fleet-replicas"
SHARD_GROUP = "specwatch-fleet-shards"
#: The job label of the fleet shards' own scrape (the chart writes its own in its place).
SHARD_JOB = "specwatch-fleet"
#: The per-replica newest sample time: the freshness read and the detection query.
LAST_SAMPLE = f"{REPLICA_LEVEL}:vllm_last_sample:timestamp"


def recorded_name(series: str, operation: str, window: str) -> str:
    """fleet_route:<series, colons as underscores>:<operation><window> (level:metric:operations)."""
    return f"{ROUTE_LEVEL}:{series.replace(':', '_')}:{operation}{window}"


def _by(extra: str = "") -> str:
    return ", ".join((*AGGREGATE_LABELS, "model_name", "engine")) + extra


Rule = dict[str, str]


def _route_readers(
    matchers: str, group: str, rules: list[Rule] | None = None
) -> tuple[promql.Reader, promql.GaugeReader]:
    """Readers of the recorded series for queries._engine_parts; with `rules`, each read also
    appends the rule that records what it reads (so the rules are the queries' own reads)."""

    def counter(name: str, window: str, extra: str, select: tuple[tuple[str, str], ...]) -> str:
        recorded = recorded_name(name, "increase", window)
        if rules is not None:
            if select:  # (vLLM's sources select nothing; a select would need its own recorded name)
                raise ValueError(f"{name}: a selected source cannot be recorded")
            increase = promql.exact_increase(name, window)
            rules.append({"record": recorded, "expr": f"sum by ({_by(extra)}) ({increase})"})
        return f"sum by ({group}{extra}) ({promql.selector(recorded, matchers)})"

    def gauge(name: str, window: str, how: str) -> str:
        recorded = recorded_name(name, f"{how}_over_time", window)
        if rules is not None:
            combine = "avg" if how == "avg" else "max"
            rules.append({"record": recorded, "expr": f"{combine} by ({_by()}) ({how}_over_time({name}[{window}]))"})
        return f"sum by ({group}) ({promql.selector(recorded, matchers)})"

    return counter, gauge


def window_query(window_seconds: float, matchers: str) -> str:
    """The recorded twin of queries.window_query: the same family tags, one series per aggregate."""
    group = _by()
    counter, gauge = _route_readers(matchers, group)
    return "\n or ".join(promql.engine_parts(ENGINE, format_duration(window_seconds), counter, gauge))


def freshness_query(matchers: str) -> str:
    """Each aggregate's newest replica sample time."""
    return f"max by ({', '.join(AGGREGATE_LABELS)}) ({promql.selector(LAST_SAMPLE, matchers)})"


def detection_query(matchers: str) -> str:
    """One cheap query: how many aggregates have a recorded longest window (0 or absent: none)."""
    return f"count({promql.selector(recorded_name(ENGINE.running or '', 'count_over_time', '5m'), matchers)})"


def query_set(windows: tuple[float, ...], labels: tuple[str, ...], matchers: str) -> promql.QuerySet:
    return promql.QuerySet(
        tuple(
            (label, seconds, window_query(seconds, matchers)) for label, seconds in zip(labels, windows, strict=False)
        ),
        freshness_query(matchers),
    )


def covers(windows: tuple[float, ...]) -> bool:
    """Whether the rules record every one of these windows."""
    return all(w in WINDOWS for w in windows)


def present(answer: Iterable[Sample]) -> bool:
    """The detection query's answer: whether any aggregate is recorded."""
    return any(sample.value > 0 for sample in answer)


def present_in_range(answer: Iterable[Series]) -> bool:
    """The detection query asked as a range (backtest, history): any point above zero."""
    return any(value > 0 for series in answer for _, value in series.points)


#: A replica's K, accepted over drafted tokens per replica: the per-replica alerts read them.
REPLICA_K = f"{REPLICA_LEVEL}:vllm_spec_decode_k:ratio_increase5m"
REPLICA_ACCEPTANCE = f"{REPLICA_LEVEL}:vllm_spec_decode_acceptance:ratio_increase5m"
#: The median K of a route's replicas in one aggregate: the K the rollout is at for most of them.
ROUTE_MEDIAN_K = f"{ROUTE_LEVEL}:vllm_spec_decode_k:median_ratio_increase5m"
#: What a replica is compared with: its aggregate and served model (engine is summed in).
REPLICA_ROUTE = (*AGGREGATE_LABELS, "model_name")
#: A replica drafting a K this far from its route's median drafts another K (a fixed K is whole).
K_DIFFERS_BY = 0.5
RUNBOOK = "https://github.com/specwatch/specwatch/blob/main/docs/runbook.md"
DASHBOARD = (
    "https://grafana.example.com/d/specwatch/specwatch?orgId=1{{ with $labels.cluster }}&var-cluster={{ . }}{{ end }}"
)


def _replica_rules() -> list[Rule]:
    """Per-replica health: small series, one per replica, for dashboards and alerts."""
    running = ENGINE.running or ""
    drafts = "vllm:spec_decode_num_drafts_total"
    draft_tokens = "vllm:spec_decode_num_draft_tokens_total"
    accepted = "vllm:spec_decode_num_accepted_tokens_total"
    route = ", ".join(REPLICA_ROUTE)
    return [
        {"record": LAST_SAMPLE, "expr": f"max without (engine) (timestamp({running}))"},
        {
            "record": f"{REPLICA_LEVEL}:vllm_spec_decode_enabled:increase5m",
            "expr": f"max without (engine) (increase({drafts}[5m]) > bool 0)",
        },
        {
            "record": REPLICA_K,
            "expr": f"sum without (engine) (increase({draft_tokens}[5m]))\n"
            f"  / (sum without (engine) (increase({drafts}[5m])) > 0)",
        },
        {
            "record": REPLICA_ACCEPTANCE,
            "expr": f"sum without (engine) (increase({accepted}[5m]))\n"
            f"  / (sum without (engine) (increase({draft_tokens}[5m])) > 0)",
        },
        {"record": ROUTE_MEDIAN_K, "expr": f"quantile by ({route}) (0.5, {REPLICA_K})"},
    ]


def _replica_alerts() -> list[dict[str, Any]]:
    """What stays per replica, evaluated by Prometheus on the series above: fleet mode over
    recorded series sees aggregates only (docs/fleet.md)."""
    route = ", ".join(REPLICA_ROUTE)
    target = ", ".join((*AGGREGATE_LABELS, "route", "target"))
    replica = "{{ $labels.instance }}{{ with $labels.pod }} (pod {{ . }}){{ end }}"
    where = "{{ with $labels.namespace }} in namespace {{ . }}{{ end }}"

    def alert(name: str, expr: str, wait: str, severity: str, summary: str, description: str) -> dict[str, Any]:
        return {
            "alert": name,
            "expr": expr,
            "for": wait,
            "labels": {"severity": severity},
            "annotations": {
                "summary": summary,
                "description": description,
                "runbook_url": f"{RUNBOOK}#{name.lower()}",
                "dashboard_url": DASHBOARD,
            },
        }

    return [
        alert(
            "SpecwatchReplicaDraftLengthDiffers",
            f"abs(\n  {REPLICA_K}\n    - on ({route}) group_left\n  {ROUTE_MEDIAN_K}\n) >= {K_DIFFERS_BY:g}",
            "15m",
            "warning",
            "A vLLM replica drafts another K than the other replicas of its model.",
            f"vLLM replica {replica}{where} (model {{{{ $labels.model_name }}}}) drafts a K that differs by "
            '{{ printf "%.2g" $value }} from the median of its model\'s replicas over 5m: a rollout of '
            "--speculative-config that stopped half-way, or a pod started with another config. Fleet mode over "
            "recorded series averages the two Ks into one route.",
        ),
        alert(
            "SpecwatchReplicaBelowBreakeven",
            f"{REPLICA_ACCEPTANCE}\n  < on ({route}) group_left (route)\n"
            f"max by ({route}, route) (\n"
            f"  max by ({target}, model_name) (specwatch_route_info)\n"
            f"    * on ({target}) group_left\n"
            f'  specwatch_breakeven_acceptance_ratio{{window="5m"}}\n'
            f'    and on ({target}) (specwatch_acceptance_margin{{window="5m"}} > 0)\n'
            f")",
            "15m",
            "info",
            "A vLLM replica accepts fewer draft tokens than its route needs to pay, while the route pays.",
            f"vLLM replica {replica}{where} (route {{{{ $labels.route }}}}) accepts "
            '{{ printf "%.2f" $value }} of its draft tokens over 5m, below its route\'s break-even, while '
            "the route as a whole is above it: this replica slows decoding, its route's verdict does not show it.",
        ),
        alert(
            "SpecwatchReplicaStale",
            f"(\n  max_over_time({LAST_SAMPLE}[1h])\n    unless {LAST_SAMPLE}\n)\n"
            "and on (cluster, namespace, job, instance) up",
            "5m",
            "warning",
            "A vLLM replica still scraped by Prometheus has no fresh vLLM samples.",
            f"vLLM replica {replica}{where} is still a target of Prometheus (its up series exists) but its vLLM "
            "series have been stale for 5 minutes (the alert ends an hour after the last sample): its scrape fails (up = 0) or it serves /metrics without vLLM's "
            "series. Its tokens are missing from its route's recorded series.",
        ),
    ]


def _shard_rules() -> list[dict[str, Any]]:
    """A fleet shard down: its target failing, or gone from discovery within the last 15 minutes
    (a StatefulSet scaled down without fleet.shards: the routes of its index go unevaluated)."""
    up = f'up{{job="{SHARD_JOB}"}}'
    return [
        {
            "alert": "SpecwatchFleetShardDown",
            "expr": f"({up} == 0)\nor\n(max_over_time({up}[15m]) unless {up})",
            "for": "3m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "specwatch fleet shard {{ $labels.instance }} is down.",
                "description": "A fleet shard has not been scraped for 3 minutes: the routes whose hash falls on "
                "its index are not evaluated (their verdicts and alerts stop); the other shards keep theirs.",
                "runbook_url": f"{RUNBOOK}#specwatchfleetsharddown",
                "dashboard_url": DASHBOARD,
            },
        }
    ]


def rules_document() -> dict[str, Any]:
    """The whole rules file."""
    rules: list[Rule] = []
    counter, gauge = _route_readers("", _by(), rules)
    for seconds in WINDOWS:
        promql.engine_parts(ENGINE, format_duration(seconds), counter, gauge)
    return {
        "groups": [
            {"name": GROUP, "rules": [*rules, *_replica_rules()]},
            {"name": REPLICA_GROUP, "rules": _replica_alerts()},
            {"name": SHARD_GROUP, "rules": _shard_rules()},
        ]
    }


HEADER = """\
# specwatch fleet recording rules: each route's vLLM series aggregated across its replicas, so fleet
# mode (prometheus.recorded) reads one series per route and window instead of one per replica.
#
# Generated from exporter/specwatch/fleet/recorded.py (the queries that read them are built from the
# same code): python tools/gen_fleet_rules.py
# Each counter's window increase is taken per replica exactly as fleet mode's raw read takes it
# (last - first sample, increase() only across a reset), then summed by (cluster, namespace, job,
# model_name, engine[, position | le]). The batch is the replicas' mean, the samples their most.
# The group specwatch-fleet-replicas alerts on what stays per replica (the fleet_replica: series).
"""


def render() -> str:
    class _Literal(str):
        pass

    class _Dumper(yaml.SafeDumper):  # its own class: the global SafeDumper is left as it is
        pass

    def literal(dumper: yaml.SafeDumper, value: _Literal) -> yaml.Node:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")

    _Dumper.add_representer(_Literal, literal)

    def multiline(node: object) -> object:
        if isinstance(node, dict):
            return {k: multiline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [multiline(v) for v in node]
        if isinstance(node, str) and "\n" in node:
            return _Literal(node + "\n")
        return node

    text = yaml.dump(multiline(rules_document()), Dumper=_Dumper, sort_keys=False, width=1000)
    return HEADER + text
