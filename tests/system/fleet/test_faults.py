"""Fleet mode under a failing or partial query API, and with stale replicas: counted by reason,
logged once, never a crash, never a verdict or a number from a bad or stale answer.

Correct answers come from a real Prometheus serving a backfilled TSDB (conftest `backfilled`);
the faults come from a proxy in front of it that answers like a failing one."""

from __future__ import annotations

import json
import re
import time

import pytest

from specwatch import config as config_mod
from specwatch.base.logsetup import capture_logs
from specwatch.fleet.evaluator import FleetEvaluator, FleetSource
from support.loopback import free_port

from .conftest import POLL
from .faultproxy import FaultProxy
from .promharness import PROMETHEUS, PROMTOOL

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="prometheus/promtool not installed"),
]

FAULTS = {  # proxy mode -> counted reason
    "http_500": "http_5xx",
    "http_400": "http_4xx",
    "too_many_samples": "limit",
    "warnings": "warnings",
    "huge": "too_large",
    "slow": "timeout",
    "drip": "timeout",
    "not_json": "invalid",
    "bad_value": "invalid",
    "bad_labels": "invalid",
    "hang_up": "connect",
}


def _config(url: str) -> config_mod.Config:
    return config_mod.from_mapping(
        {
            "windows": ["1m", "5m"],
            "poll_interval": f"{POLL:g}s",
            "decision": {"hold": 1},
            "prometheus": {
                "url": url,
                "selector": '{job="vllm"}',
                "timeout": "1s",
                "max_bytes": "4MiB",
                "scrape_interval": "5s",
            },
        },
        environ={},
    )


def _times(recordings) -> list[float]:
    return sorted({json.loads(line)["t"] for path in recordings.values() for line in path.read_text().splitlines()})


@pytest.fixture()
def proxy(backfilled):
    prometheus, _ = backfilled
    proxy = FaultProxy(prometheus.url)
    yield proxy
    proxy.stop()


def _source(url: str) -> FleetSource:
    return FleetSource(FleetEvaluator(_config(url)))


@pytest.mark.parametrize("mode", sorted(FAULTS))
def test_a_failing_query_api_is_counted_by_reason_logged_once_and_moves_no_verdict(backfilled, proxy, mode) -> None:
    _, recordings = backfilled
    times = _times(recordings)
    fleet = _source(proxy.url)
    good = fleet.poll(times[40])
    assert good and all(e.verdict is not None for _, e in good)
    before = fleet.evaluator.state()
    proxy.mode = mode
    with capture_logs() as logs:
        assert fleet.poll(times[41]) is None
        assert fleet.poll(times[42]) is None
    state = fleet.evaluator.state()
    assert state.errors[FAULTS[mode]] == 2
    assert sum(state.errors.values()) == 2
    assert state.up is False and state.fleet == (), "nothing is served from a failed poll"
    assert [entry["reason"] for entry in logs if entry["event"] == "prometheus_query_failed"] == [FAULTS[mode]]
    assert [(r.replica, r.route, [e.verdict for e in r.evaluations]) for r in state.routes] == [
        (r.replica, r.route, [e.verdict for e in r.evaluations]) for r in before.routes
    ]
    proxy.mode = "ok"
    with capture_logs() as logs:
        assert fleet.poll(times[43])
    assert fleet.evaluator.state().up is True
    assert [entry["event"] for entry in logs] == ["prometheus_query_recovered"]


def test_prometheus_down_is_a_connect_error() -> None:
    fleet = _source(f"http://127.0.0.1:{free_port()}")
    assert fleet.poll(time.time()) is None
    assert fleet.evaluator.state().errors["connect"] == 1


def test_a_replica_whose_newest_sample_is_older_than_two_scrape_intervals_is_stale(backfilled) -> None:
    prometheus, recordings = backfilled
    times = _times(recordings)
    fleet = _source(prometheus.url)
    assert fleet.poll(times[-1] + 9.0), "9 s after the last sample (< 2 x 5 s): fresh"
    fresh = fleet.evaluator.state()
    assert fresh.stale_replicas == 0 and fresh.fleet
    results = fleet.poll(times[-1] + 11.0)
    assert results == [], "11 s after the last sample: every replica is stale, nothing evaluated"
    state = fleet.evaluator.state()
    assert state.stale_replicas == len(state.routes) == 3  # alpha-drop's route, mixed-routes' chat and code
    assert state.stale_evaluations == 3
    assert state.fleet == ()
    assert fleet.poll(times[-1] + 400.0) == [], "past the longest window: no samples at all"
    assert fleet.evaluator.state().stale_replicas == 3, "a replica gone from every window stays stale"


def test_exported_series_carry_the_replica_labels_and_vanish_when_stale_or_failed(backfilled, proxy) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from specwatch.export.collector import SpecwatchCollector

    _, recordings = backfilled
    times = _times(recordings)
    fleet = _source(proxy.url)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecwatchCollector(fleet.evaluator.view))
    fleet.poll(times[60])
    text = generate_latest(registry).decode()
    assert 'specwatch_acceptance_ratio{instance="sim-a:8000",route="llama-70b",target="sim-a:8000",window="1m"}' in text
    # One verdict in effect for the replica's route (which one depends on the cost model's calibration).
    verdicts = re.findall(
        r'specwatch_verdict\{instance="sim-b:8000",route="code",target="sim-b:8000",verdict="(\w+)",window="5m"\} 1\.0',
        text,
    )
    assert len(verdicts) == 1, verdicts
    counted = re.findall(r'specwatch_fleet_replicas\{route="code",verdict="\w+",window="1m"\} ([0-9.]+)', text)
    assert sum(float(c) for c in counted) == 1.0, "the one replica serving route code is counted once"
    assert 'specwatch_fleet_losing_tokens_ratio{route="chat",window="1m"} 0.0' in text
    assert "specwatch_prometheus_queries_per_poll 3.0" in text
    proxy.mode = "http_500"
    fleet.poll(times[61])
    text = generate_latest(registry).decode()
    assert "specwatch_acceptance_ratio{" not in text and "specwatch_fleet_replicas{" not in text
    assert 'specwatch_prometheus_query_errors_total{reason="http_5xx"} 1.0' in text
    proxy.mode = "ok"
    fleet.poll(times[-1] + 11.0)
    text = generate_latest(registry).decode()
    assert "specwatch_acceptance_ratio{" not in text and "specwatch_stale_replicas 3.0" in text
