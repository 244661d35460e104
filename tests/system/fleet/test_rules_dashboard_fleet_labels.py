"""Rules and dashboard work in fleet mode too: the series fleet mode exports carry the replica
labels (and their own `instance`), so each replica has its own (job, instance, route) as one sidecar
per pod has.

- rules/tests/fleet-labels.yaml (promtool, run with every rule test by tests/test_rules.py) feeds the
  unchanged alert rules fleet-mode series; here we prove those fixture series are exactly what
  the collector exports in fleet mode (metric names and label names), so the promtool cases are not invented;
- every dashboard query on a family fleet mode exports selects the fleet series with the
  dashboard's "All" variable values, and the panels that read sidecar-only families are listed.

The exposition comes from the collector fed one poll's answer in the query API's shape (no
Prometheus needed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.config import from_mapping
from specwatch.export.collector import SpecwatchCollector
from specwatch.fleet import queries as promql
from specwatch.fleet.client import Sample
from specwatch.fleet.evaluator import FleetEvaluator

promql_parser = pytest.importorskip("promql_parser")

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "rules" / "tests" / "fleet-labels.yaml"
DASHBOARD_VALUES = {
    "cluster": ".*",
    "namespace": ".*",
    "pod": ".*",
    "target": ".*",
    "model_name": ".*",
    "route": ".*",
    "window": "5m",
}
# Families fleet mode does not export (Prometheus holds vLLM's own counters; a replica's health is
# Prometheus's `up`, specwatch's own is specwatch_prometheus_up): their panels are sidecar-only.
SIDECAR_ONLY = {
    "specwatch_drafts_total",
    "specwatch_draft_tokens_total",
    "specwatch_accepted_tokens_total",
    "specwatch_accepted_tokens_by_position_total",
    "specwatch_generation_tokens_total",
    "specwatch_target_up",
    "specwatch_last_scrape_success_timestamp_seconds",
    "specwatch_scrape_errors_total",
    "specwatch_target_restarts_total",
    "specwatch_scrape_duration_seconds",
    "specwatch_route_expects_speculation",
}
REPLICAS = (("llm", "vllm-0", 0.45), ("llm", "vllm-1", 0.7), ("batch", "vllm-0", 0.6))
NOW = 1_800_000_000.0


def _answer(namespace: str, pod: str, alpha: float) -> list[Sample]:
    """One replica's window answer as the grouped PromQL returns it (K=3, 1,000 drafts)."""
    base = {"namespace": namespace, "pod": pod, "model_name": "llama", "engine": "0"}

    def sample(family: str, value: float, **extra: str) -> Sample:
        return Sample({**base, promql.FAMILY_LABEL: family, **extra}, value)

    drafts = 1000.0
    rates = [alpha ** (i + 1) for i in range(3)]
    out = [
        sample(promql.DRAFTS, drafts),
        sample(promql.DRAFT_TOKENS, 3 * drafts),
        sample(promql.ACCEPTED, drafts * sum(rates)),
        sample(promql.GENERATION, 4000.0),
        sample(promql.STEPS, 1500.0),
        sample(promql.RUNNING_MEAN, 8.0),
        sample(promql.SAMPLES, 21.0),
        sample(promql.ITL_SUM, 60.0),
        sample(promql.ITL_COUNT, 3000.0),
    ]
    out += [sample(promql.ACCEPTED_PER_POS, drafts * r, position=str(i)) for i, r in enumerate(rates)]
    out += [
        sample(promql.ITL_BUCKET, count, le=le)
        for le, count in (("0.01", 100.0), ("0.025", 2000.0), ("0.05", 2900.0), ("+Inf", 3000.0))
    ]
    return out


@pytest.fixture(scope="module")
def fleet_series() -> list[tuple[str, dict[str, str]]]:
    """(sample name, labels) of the collector's fleet-mode exposition after one good poll of three replicas."""
    config = from_mapping(
        {
            "windows": ["1m", "5m"],
            "decision": {"min_drafts": 100, "hold": 1},
            # The config vLLM runs with, so the draft.config check (the configured-K line) is exported.
            "draft": {"config": {"method": "eagle3", "num_speculative_tokens": 3}},
            "routes": [{"name": "chat", "match": {"model_name": "llama"}, "baseline_itl_p99_seconds": 0.05}],
            "prometheus": {
                "url": "http://prometheus:9090",
                "replica_labels": ["namespace", "pod"],
                "scrape_interval": "15s",
            },
        },
        environ={},
    )
    evaluator = FleetEvaluator(config)
    samples = [s for namespace, pod, alpha in REPLICAS for s in _answer(namespace, pod, alpha)]
    freshness = [Sample({"namespace": ns, "pod": pod}, NOW - 5) for ns, pod, _ in REPLICAS]
    evaluations = evaluator.evaluate(NOW, {"1m": samples, "5m": samples}, freshness)
    assert len(evaluations) == 2 * len(REPLICAS)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecwatchCollector(evaluator.view))
    text = generate_latest(registry).decode()
    return [(s.name, dict(s.labels)) for family in text_string_to_metric_families(text) for s in family.samples]


def test_every_replica_series_carries_its_replica_labels_target_and_own_instance(fleet_series) -> None:
    per_replica = [labels for name, labels in fleet_series if "target" in labels]
    assert per_replica
    for labels in per_replica:
        assert labels["target"] == labels["instance"] == f"{labels['namespace']}/{labels['pod']}"
    margins = {
        (labels["instance"], labels["window"]) for name, labels in fleet_series if name == "specwatch_acceptance_margin"
    }
    assert margins == {(f"{ns}/{pod}", w) for ns, pod, _ in REPLICAS for w in ("1m", "5m")}
    baselines = [labels for name, labels in fleet_series if name == "specwatch_baseline_itl_p99_seconds"]
    assert len(baselines) == len(REPLICAS), "the configured baseline, per replica (the ITL alert joins on it)"


def test_the_promtool_fleet_fixture_uses_exactly_the_names_and_labels_fleet_mode_exports(fleet_series) -> None:
    exported = {}
    for name, labels in fleet_series:
        exported.setdefault(name, set()).add(frozenset(labels))
    spec = yaml.safe_load(FIXTURE.read_text())
    series = [s["series"] for t in spec["tests"] for s in t["input_series"]]
    assert series
    for text in series:
        name, body = re.fullmatch(r"([a-z_0-9]+)\{(.*)\}", text).groups()
        names = set(re.findall(r'(\w+)="', body))
        assert name in exported, f"{name} is not exported in fleet mode"
        # `job` is Prometheus's; everything else must be a label set fleet mode exports for that name.
        assert frozenset(names - {"job"}) in exported[name], f"{text}: labels differ from {exported[name]}"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_the_unchanged_alert_rules_pass_their_fleet_mode_cases() -> None:
    done = subprocess.run(
        ["promtool", "test", "rules", str(FIXTURE)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _selectors(expr: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    found = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            matchers = node.matchers.matchers if node.matchers is not None else []
            found.append((node.name, [(m.name, str(m.op).rsplit(".", 1)[-1], m.value) for m in matchers]))
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def _matches(labels: dict[str, str], matchers: list[tuple[str, str, str]]) -> bool:
    ops = {
        "Equal": lambda v, x: v == x,
        "NotEqual": lambda v, x: v != x,
        "Re": lambda v, x: re.fullmatch(x, v) is not None,
        "NotRe": lambda v, x: re.fullmatch(x, v) is None,
    }
    return all(ops[op](labels.get(name, ""), value) for name, op, value in matchers if name != "__name__")


def test_every_dashboard_query_on_a_fleet_family_selects_the_fleet_series(fleet_series) -> None:
    import json

    dashboard = json.loads((ROOT / "dashboards" / "specwatch.json").read_text())
    panels = [p for top in dashboard["panels"] for p in (top.get("panels", []) if top["type"] == "row" else [top])]
    exported = {name for name, _ in fleet_series}
    checked, sidecar_only, recorded = set(), set(), set()
    for panel in panels:
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", "1m")
            for name, value in DASHBOARD_VALUES.items():
                expr = expr.replace("$" + name, value)
            for metric, matchers in _selectors(expr):
                if ":" in metric:
                    recorded.add(panel["title"])  # recording rules over the mirrored counters
                elif metric in SIDECAR_ONLY:
                    sidecar_only.add(panel["title"])
                else:
                    assert metric in exported, (
                        f"{panel['title']}: {metric} is neither exported in fleet mode nor sidecar-only"
                    )
                    assert any(_matches(labels, matchers) for name, labels in fleet_series if name == metric), (
                        f"{panel['title']}: {metric}{matchers} selects no fleet series"
                    )
                    checked.add(panel["title"])
    assert {
        "Verdict",
        "Expected speedup",
        "Recommended --speculative-config",
        "ITL per step: P50 and P99 vs spec-off baseline",
    } <= checked
    assert "Target up" in sidecar_only and recorded, "the sidecar-only panels are known, not silently skipped"
