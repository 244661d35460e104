"""Fleet mode over recorded series (fleet/recorded.py): the rules file is the module's own output,
every series the recorded queries read is one the rules record, and the evaluator reads an
aggregate as it reads a replica (no Prometheus needed; tests/system/fleet runs one)."""

from __future__ import annotations

import re
from array import array
from pathlib import Path

import pytest
import yaml

from specwatch.config import ConfigError, PrometheusConfig, from_mapping
from specwatch.fleet import queries as promql
from specwatch.fleet import recorded
from specwatch.fleet.client import Points, PromClient, RangeAnswer, Sample, Series
from specwatch.fleet.evaluator import FleetEvaluator
from specwatch.fleet.history import read_history

RULES = Path(__file__).resolve().parents[3] / "rules" / "specwatch-fleet-recording.yaml"
BASE = {
    "windows": ["1m", "5m"],
    "decision": {"min_drafts": 10, "hold": 1},
    "hardware": {"preset": "h100-sxm"},
    "model": {"preset": "llama-3.1-8b", "context_tokens": 1024},
}


def _config(**prometheus: object) -> dict[str, object]:
    return {**BASE, "prometheus": {"url": "http://prometheus:9090", "scrape_interval": "15s", **prometheus}}


def test_the_committed_rules_file_is_what_the_module_writes():
    # (tools/gen_fleet_rules.py writes it; regenerate with it when this fails)
    assert recorded.render() == RULES.read_text()


def test_every_series_the_recorded_queries_read_is_recorded_by_a_rule_of_its_window():
    records = {
        rule["record"]
        for group in yaml.safe_load(RULES.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    for seconds, label in zip(recorded.WINDOWS, ("1m", "5m"), strict=True):
        read = set(re.findall(r"fleet_(?:route|replica):[a-z_]+:[a-z_]+[0-9a-z]*", recorded.window_query(seconds, "")))
        assert read and read <= records
        assert all(name.endswith(label) for name in read)
    assert recorded.LAST_SAMPLE in records


def test_the_recorded_query_tags_the_same_families_as_the_raw_query():
    def tags(query: str) -> set[str]:
        return set(re.findall(rf'"{promql.FAMILY_LABEL}", "([a-z_]+)"', query))

    raw = promql.window_query(300.0, "", ("instance",), engines=(recorded.ENGINE,))
    assert tags(recorded.window_query(300.0, "")) == tags(raw)


def test_recorded_mode_refuses_windows_the_rules_do_not_record_naming_the_key():
    config = from_mapping({**_config(recorded=True), "windows": ["1m", "10m"]}, environ={})
    with pytest.raises(ConfigError) as caught:
        FleetEvaluator(config)
    assert caught.value.key == "prometheus.recorded"


def test_an_aggregate_is_evaluated_as_a_replica_is_keyed_by_the_aggregation_labels():
    evaluator = FleetEvaluator(
        from_mapping(
            _config(recorded=True, deployment_labels=["namespace"], replica_labels=["namespace", "pod"]), environ={}
        )
    )
    assert evaluator.source.replica_labels == recorded.AGGREGATE_LABELS
    assert evaluator.source.deployment_labels == ("namespace",)
    assert "fleet_route:" in evaluator.queries.windows[0][2]
    labels = {"cluster": "eu", "namespace": "llm", "job": "vllm", "model_name": "m", "engine": "0"}

    def answer(windows: float) -> list[Sample]:
        def sample(family: str, value: float, **extra: str) -> Sample:
            return Sample({**labels, promql.FAMILY_LABEL: family, **extra}, value)

        n = 4000.0 * windows
        return [
            sample(promql.STEPS, n),
            sample(promql.RUNNING_MEAN, 8.0),
            sample(promql.SAMPLES, 4.0 * windows + 1),
            sample(promql.ITL_SUM, n * 0.02),
            sample(promql.ITL_COUNT, n),
            sample(promql.ITL_BUCKET, n, le="+Inf"),
            sample(promql.GENERATION, n * 2.8),
            sample(promql.DRAFTS, n),
            sample(promql.DRAFT_TOKENS, 3 * n),
            sample(promql.ACCEPTED, 1.8 * n),
        ]

    now = 1_800_000_000.0
    fresh = [Sample({k: labels[k] for k in recorded.AGGREGATE_LABELS}, now - 5)]
    results = evaluator.evaluate(now, {"1m": answer(1), "5m": answer(5)}, fresh)
    assert {replica for replica, _ in results} == {(("cluster", "eu"), ("namespace", "llm"), ("job", "vllm"))}
    assert {e.stats.window for _, e in results} == {"1m", "5m"}
    assert all(e.stats.acceptance_rate == pytest.approx(0.6) for _, e in results)


def test_raw_mode_by_default_keeps_the_replica_labels_and_the_raw_queries():
    for stated in ({"recorded": False}, {}):
        config = from_mapping(_config(**stated, replica_labels=["namespace", "pod"]), environ={})
        evaluator = FleetEvaluator(config)
        assert evaluator.recorded is False
        assert evaluator.source.replica_labels == ("namespace", "pod")
        assert "fleet_route:" not in evaluator.queries.windows[0][2]


def test_recorded_series_are_detected_by_any_aggregate_above_zero():
    assert recorded.present([Sample({}, 3.0)])
    assert not recorded.present([Sample({}, 0.0)])
    assert not recorded.present([])


class _Answering(PromClient):
    """A PromClient that sends nothing: it notes each range query and answers `present` to the
    detection query (one point above zero) and nothing to any other."""

    def __init__(self, config: PrometheusConfig, present: bool) -> None:
        super().__init__(config)
        self.present = present
        self.asked: list[str] = []

    def query_range(self, expr: str, start: float, end: float, step: float) -> RangeAnswer:
        self.asked.append(expr)
        if expr.startswith("count(") and self.present:
            return RangeAnswer((Series({}, Points(array("d", (end, 3.0)))),), 0.0, 0)
        return RangeAnswer((), 0.0, 0)


@pytest.mark.parametrize("present", [True, False])
def test_the_history_read_detects_the_recorded_series_and_then_reads_only_per_route_aggregates(present):
    config = from_mapping(_config(history_lookback="10m", recorded="auto"), environ={})
    evaluator = FleetEvaluator(config)
    assert evaluator.recorded is None
    assert config.prometheus is not None
    client = _Answering(config.prometheus, present)
    try:
        read_history(evaluator, 1_800_000_000.0, client=client)
    finally:
        client.close()
    detection, *reads = client.asked
    assert detection == recorded.detection_query(config.prometheus.matchers)
    assert evaluator.recorded is present and reads
    assert all(("fleet_route:" in q or "fleet_replica:" in q) is present for q in reads)
