"""Fleet mode over the engine-side recorded series (rules/specwatch-fleet-recording.yaml) agrees
with fleet mode over each replica's raw series, on a real Prometheus.

The simulator's scenarios are recorded every 5 s and backfilled with promtool, one namespace per
scenario; promtool then evaluates the recording rules over that history (`tsdb create-blocks-from
rules`, on the same 5 s grid) and Prometheus is restarted on both. Each namespace holds one replica,
so a route's aggregate is the replica itself: the recorded read must give the raw read's verdicts,
break-evens, speedups and graded gains within 1 %. A second namespace holds two copies of a
scenario: its aggregate must keep the per-replica ratios and batch (the sum of two equal replicas
is not their average), with twice the drafts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from specwatch import config as config_mod
from specwatch.fleet.backtest import Backtest
from specwatch.fleet.recorded import LAST_SAMPLE
from support.agreement import PRICED_VALUES, agree

from .conftest import POLL
from .promharness import PROMETHEUS, PROMTOOL, serve_scenarios, with_recorded_rules

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="prometheus/promtool not installed"),
]

RULES = Path(__file__).resolve().parents[3] / "rules" / "specwatch-fleet-recording.yaml"
DURATION = 420.0
SCENARIOS = {"alpha-drop": 1, "mixed-routes": 1, "steady": 2}  # namespace (= scenario): replicas


def _config(url: str, recorded: bool, namespaces: str) -> config_mod.Config:
    return config_mod.from_mapping(
        {
            "windows": ["1m", "5m"],
            "poll_interval": f"{POLL:g}s",
            "prometheus": {
                "url": url,
                "selector": f'{{job="vllm", namespace=~"{namespaces}"}}',
                "replica_labels": ["namespace", "instance"],
                "scrape_interval": f"{POLL:g}s",
                "recorded": recorded,
            },
            "hardware": {"preset": "h100-sxm"},
            "model": {"preset": "llama-3.1-8b"},
            "decision": {"confidence": 0.6},
        },
        environ={},
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    replicas = [
        (scenario, {"instance": f"{scenario}-{i}", "job": "vllm", "namespace": scenario})
        for scenario, copies in SCENARIOS.items()
        for i in range(copies)
    ]
    served = serve_scenarios(tmp_path_factory.mktemp("recorded"), replicas, poll=POLL, duration=DURATION)
    served = with_recorded_rules(served, RULES, POLL)
    prometheus, end = served.prometheus, served.end
    # The rules were evaluated every 5 s at an offset of their group's own (Prometheus spreads
    # groups over the interval): both reads evaluate on that grid, so a recorded value at t is what
    # the raw read computes at t.
    answer = requests.get(
        f"{prometheus.url}/api/v1/query",
        params={"query": f"{LAST_SAMPLE}[{DURATION + 60:.0f}s]", "time": f"{end + POLL:.3f}"},
        timeout=30,
    ).json()
    grid = min(float(t) for item in answer["data"]["result"] for t, _ in item["values"])
    try:
        yield prometheus, grid + POLL, end
    finally:
        prometheus.stop()


def _records(url: str, recorded: bool, namespaces: str, start: float, end: float) -> tuple[dict, dict]:
    """Each replica line keyed (namespace, instance, route, window, t), and the backtest summary."""
    backtest = Backtest(_config(url, recorded, namespaces))
    lines = {}
    for line in backtest.run(start, end, POLL):
        labels = line["replica"]
        if labels is not None:
            key = (labels["namespace"], labels.get("instance", ""), line["route"], line["window"], round(line["t"], 3))
            lines[key] = line
    assert backtest.evaluator.recorded is recorded
    return lines, backtest.summary.record()


def test_recorded_series_give_the_raw_series_verdicts_breakevens_and_gains_within_one_percent(served) -> None:
    prometheus, start, end = served
    # One replica per namespace: the aggregate (cluster, namespace, job) is the replica.
    single = "|".join(ns for ns, copies in SCENARIOS.items() if copies == 1)
    raw, raw_summary = _records(prometheus.url, False, single, start, end)
    recorded, recorded_summary = _records(prometheus.url, True, single, start, end)
    mine = {(ns, route, window, t): line for (ns, _, route, window, t), line in recorded.items()}
    theirs = {(ns, route, window, t): line for (ns, _, route, window, t), line in raw.items()}
    assert mine and set(mine) == set(theirs)
    mismatches = [
        (key, name, theirs[key][name], line[name])
        for key, line in mine.items()
        for name in (*PRICED_VALUES, "drafts")
        if not agree(theirs[key][name], line[name])
    ]
    mismatches += [
        (key, "verdict", theirs[key]["verdict"], line["verdict"])
        for key, line in mine.items()
        if theirs[key]["verdict"] != line["verdict"]
    ]
    assert not mismatches, f"{len(mismatches)} of {len(mine)} disagree, first: {mismatches[:5]}"
    seen = {line["verdict"] for line in mine.values()}
    assert len(seen - {"insufficient_data"}) >= 2, seen  # decided verdicts are compared, not only the guard
    for window, graded in raw_summary["windows"].items():
        gain = recorded_summary["windows"][window]["throughput_gain_if_followed"]
        assert agree(graded["throughput_gain_if_followed"], gain), (window, graded, gain)
        assert recorded_summary["windows"][window]["verdict_changes"] == graded["verdict_changes"]


def test_an_aggregate_of_two_equal_replicas_keeps_their_ratios_and_batch_with_twice_the_drafts(served) -> None:
    prometheus, start, end = served
    pair = next(ns for ns, copies in SCENARIOS.items() if copies == 2)
    raw, _ = _records(prometheus.url, False, pair, start, end)
    recorded, _ = _records(prometheus.url, True, pair, start, end)
    compared = 0
    for (ns, _, route, window, t), line in recorded.items():
        one = raw.get((ns, f"{pair}-0", route, window, t))
        if one is None or one["drafts"] is None:
            continue
        compared += 1
        for name in PRICED_VALUES:
            assert agree(one[name], line[name]), (name, t, one[name], line[name])
        assert line["drafts"] == pytest.approx(2 * one["drafts"], rel=0.01)
    assert compared > 10
