"""Live fleet mode reads the history before its start (prometheus.history_lookback), against a real
Prometheus backfilled with promtool.

Three simulated replicas of Llama-3.1-8B (EAGLE-3, K=3, on a simulated H100 whose fixed costs of
speculation are twice the prior's) run their first 12 minutes without speculation and with it after.
specwatch starts 6 minutes after the switch, when neither window holds a spec-off step any more:
with the history read, the route's curve rests on those spec-off minutes from its first live poll,
and every value of that poll is exactly what `backtest --baseline-from` gives at the same time
(the same grid, queries and evaluator path: the equality is exact, not within a tolerance); with
`history_lookback: 0s` the baseline is none. A Prometheus that fails the range queries costs the
fleet nothing but the history: the first live poll serves, the failure counted and logged once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specwatch import config as config_mod
from specwatch.base.logsetup import capture_logs
from specwatch.export.status import iso_time
from specwatch.fleet.backtest import Backtest
from specwatch.fleet.evaluator import FleetEvaluator
from specwatch.fleet.history import read_history
from specwatch.fleet.rows import replica_record
from specwatch.serve.service import Service
from specwatch.sim.record import record
from specwatch.sim.scenario import parse_scenario
from support.builders import pod_scenario

from .conftest import POLL
from .faultproxy import FaultProxy
from .promharness import PROMETHEUS, PROMTOOL, serve_backfilled

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="prometheus/promtool not installed"),
]

PHASE = 180.0
LOADS = (2, 16, 4, 32, 8, 24, 12, 4)
SPEC_ON_AT = 4 * PHASE  # spec-off through loads 2, 16, 4 and 32
STARTS_AT = SPEC_ON_AT + 6 * 60.0  # both windows (1m, 5m) are spec-on only by then
LOOKBACK = "20m"  # reaches back past the recordings' start
REPLICAS = ("hist-0:8000", "hist-1:8000", "hist-2:8000")
COMPARED = ("breakeven_acceptance_rate", "expected_speedup", "expected_speedup_lower", "verdict", "draft_length")


def _scenario() -> dict[str, Any]:
    return {
        "name": "switched-on",
        "description": "Spec-off for four loads, then EAGLE-3 K=3 on the same replicas.",
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "prompt_tokens": 64,
        "output_tokens": 1024,
        "noise": 0.03,
        "spec_cost_scale": 2.0,
        "routes": [{"model_name": "llama-8b"}],
        "phases": [
            {"name": f"c{c}-{i}", "duration": f"{PHASE:.0f}s", "concurrency": c, "acceptance_rate": 0.5}
            for i, c in enumerate(LOADS)
        ],
        "events": [{"at": 0, "type": "spec_off"}, {"at": SPEC_ON_AT, "type": "spec_on"}],
    }


def _first_poll_time(recording: Path) -> float:
    return float(json.loads(recording.read_text().splitlines()[0])["t"])


@pytest.fixture(scope="module")
def switched(tmp_path_factory: pytest.TempPathFactory):
    """A Prometheus over the replicas' TSDB, and the recordings' first poll time."""
    work = tmp_path_factory.mktemp("history-at-start")
    scenario = parse_scenario(_scenario())
    recordings = []
    for i, instance in enumerate(REPLICAS):
        path = work / f"{instance.split(':')[0]}.jsonl"
        record(scenario, path, poll_interval=POLL, seed=30 + i)
        recordings.append((path, {"instance": instance, "job": "vllm"}, "vllm:"))
    prometheus = serve_backfilled(work, recordings)
    try:
        yield prometheus, _first_poll_time(recordings[0][0])
    finally:
        prometheus.stop()


def _config(url: str, lookback: str, **prometheus: Any) -> config_mod.Config:
    return config_mod.from_mapping(
        {
            "windows": ["1m", "5m"],
            "poll_interval": f"{POLL:g}s",
            "listen": "127.0.0.1:0",
            "hardware": {"preset": "h100-sxm"},
            "model": {"preset": "llama-3.1-8b"},
            "learning": {"enabled": True},
            "decision": {"min_drafts": 200, "hold": 1},
            "prometheus": {
                "url": url,
                "selector": '{job="vllm"}',
                "scrape_interval": "5s",
                "history_lookback": lookback,
                **prometheus,
            },
        },
        environ={},
    )


def _first_poll(config: config_mod.Config, now: float) -> Service:
    """A fleet-mode service's first tick at `now` (no HTTP server: the published view is read)."""
    service = Service(config, clock=lambda: now)
    service.poll_once()
    return service


def _live_records(service: Service) -> dict[tuple[str, str], dict[str, Any]]:
    assert service.poller.fleet is not None
    return {
        (dict(r.replica)["instance"], e.stats.window): replica_record(r.replica, e)
        for r in service.poller.fleet.evaluator.state().routes
        for e in r.evaluations
    }


def test_with_the_history_read_the_first_live_poll_rests_on_history_exactly_as_backtest_baseline_from(
    switched,
) -> None:
    prometheus, origin = switched
    now = origin + STARTS_AT
    config = _config(prometheus.url, LOOKBACK)
    service = _first_poll(config, now)
    status = json.loads(service.published.status)
    assert [(c["route"], c["source"], c["baseline"]) for c in status["cost_models"]] == [
        ("llama-8b", "learned", "history")
    ]
    history = status["history"]
    # The probe for the first data, then 20m at 1m in one chunk (3 queries); the 2 steps before the
    # recordings' first sample answer nothing and are skipped, so the read starts at that sample.
    assert (history["steps"], history["queries"], history["error"]) == (18, 4, None)
    assert (history["lookback_seconds"], history["start"], history["end"]) == (
        1200.0,
        iso_time(origin),
        iso_time(now - 60),
    )
    metrics = service.published.metrics.decode()
    assert 'specwatch_fleet_cost_model_info{baseline="history",route="llama-8b",source="learned"} 1.0' in metrics
    assert "specwatch_history_steps 18.0" in metrics
    assert 'specwatch_history_errors_total{reason="timeout"} 0.0' in metrics
    assert len(status["routes"]) == len(REPLICAS), "the first live poll serves every replica"

    backtest = Backtest(config)
    try:
        expected = {
            (line["replica"]["instance"], line["window"]): line
            for line in backtest.run(now, now, 60.0, now - 1200.0)
            if line.get("replica")
        }
    finally:
        backtest.client.close()
    live = _live_records(service)
    assert sorted(live) == sorted(expected) and len(live) == 2 * len(REPLICAS)
    for key, line in expected.items():
        assert line["breakeven_acceptance_rate"] is not None and line["expected_speedup"] is not None
        assert {k: live[key][k] for k in COMPARED} == {k: line[k] for k in COMPARED}, key


def test_with_history_lookback_0s_the_first_live_poll_has_no_measured_baseline(switched) -> None:
    prometheus, origin = switched
    service = _first_poll(_config(prometheus.url, "0s"), origin + STARTS_AT)
    status = json.loads(service.published.status)
    assert [c["baseline"] for c in status["cost_models"]] == ["none"]
    assert status["history"]["steps"] == 0 and status["history"]["queries"] == 0
    assert "specwatch_history_steps 0.0" in service.published.metrics.decode()


def test_a_prometheus_failing_the_range_queries_costs_only_the_history_counted_and_logged_once(switched) -> None:
    prometheus, origin = switched
    proxy = FaultProxy(prometheus.url)
    proxy.mode, proxy.only = "http_500", "/api/v1/query_range"
    times = iter(origin + STARTS_AT + POLL * n for n in range(100))
    try:
        service = Service(_config(proxy.url, LOOKBACK), clock=lambda: next(times))
        with capture_logs() as logs:
            service.poll_once()
            status = json.loads(service.published.status)
            service.poll_once()
    finally:
        proxy.stop()
    assert status["prometheus"]["up"] is True
    assert len(status["routes"]) == len(REPLICAS), "the first live poll serves every replica"
    assert [c["baseline"] for c in status["cost_models"]] == ["none"]
    assert (status["history"]["steps"], status["history"]["error"]) == (0, "http_5xx")
    assert [e["reason"] for e in logs if e["event"] == "fleet_history_failed"] == ["http_5xx"]
    assert service.poller.history_errors["http_5xx"] == 1 and sum(service.poller.history_errors.values()) == 1
    metrics = service.published.metrics.decode()
    assert 'specwatch_history_errors_total{reason="http_5xx"} 1.0' in metrics


def test_a_slow_prometheus_ends_the_history_read_at_its_deadline(switched) -> None:
    """The proxy answers after 5 s; a 1 s budget gives up on the first query (an answer would mean no error)."""
    prometheus, origin = switched
    proxy = FaultProxy(prometheus.url)
    proxy.mode, proxy.only, proxy.delay = "slow", "/api/v1/query_range", 5.0
    evaluator = FleetEvaluator(_config(proxy.url, LOOKBACK))
    try:
        read = read_history(evaluator, origin + STARTS_AT, deadline=1.0)
    finally:
        proxy.stop()
    assert (read.steps, read.queries, read.error) == (0, 1, "timeout")
    assert [c.baseline for c in evaluator.learning.baselines()] == []


POD_LIFE = 12 * 60.0  # the old pod's, then the new pod's first minutes
GRADED_AT = POD_LIFE + 6 * 60.0  # the new pod's longest window (5m) has filled


@pytest.fixture(scope="module")
def recreated(tmp_path_factory: pytest.TempPathFactory):
    """A recreate rollout recorded into a TSDB: a K=4 pod for POD_LIFE, then a K=2 pod (another
    instance) from then on; a Prometheus over it, and the recording's start."""
    work = tmp_path_factory.mktemp("rollout-before-start")
    old, new = work / "old.jsonl", work / "new.jsonl"
    record(parse_scenario(pod_scenario(4, "1h")), old, poll_interval=POLL, seed=1, duration=POD_LIFE)
    new_pod = parse_scenario(pod_scenario(2, "1h"))
    record(new_pod, new, poll_interval=POLL, seed=2, start=POD_LIFE, duration=GRADED_AT - POD_LIFE + 60)
    prometheus = serve_backfilled(
        work,
        [
            (old, {"instance": "pod-old:8000", "job": "vllm"}, "vllm:"),
            (new, {"instance": "pod-new:8000", "job": "vllm"}, "vllm:"),
        ],
    )
    try:
        yield prometheus, _first_poll_time(old)
    finally:
        prometheus.stop()


def test_a_rollout_before_the_start_is_graded_from_the_first_live_poll_and_without_the_history_it_is_not(
    recreated,
) -> None:
    prometheus, origin = recreated
    now = origin + GRADED_AT
    graded = json.loads(_first_poll(_config(prometheus.url, LOOKBACK), now).published.status)["rollouts"]
    rollout = graded.get("chat")
    assert rollout is not None and rollout["status"] == "graded", graded
    assert rollout["change"]["draft_length_before"] == pytest.approx(4.0, abs=0.05)
    assert rollout["change"]["draft_length_after"] == pytest.approx(2.0, abs=0.05)
    assert rollout["measured"]["gain_ratio"] > 1.0  # the shorter draft pays at batch 64
    unseen = json.loads(_first_poll(_config(prometheus.url, "0s"), now).published.status)["rollouts"]
    assert unseen.get("chat") is None or unseen["chat"]["status"] != "graded", unseen
