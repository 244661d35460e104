"""What stays per replica when fleet mode reads per-route aggregates (rules/specwatch-fleet-recording.yaml,
group specwatch-fleet-replicas), on a real Prometheus: three replicas of one model in one aggregate,
one of them started with another K (a rollout stopped half-way), recorded by the simulator every
5 s, backfilled with promtool, the recording rules evaluated over that history by promtool. The
recorded per-replica K names the odd replica, and the alert's expression, asked of that Prometheus,
returns it alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import requests
import yaml

from specwatch.fleet import recorded
from specwatch.sim.scenario import load_scenario

from .conftest import POLL
from .promharness import PROMETHEUS, PROMTOOL, serve_scenarios, with_recorded_rules

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="prometheus/promtool not installed"),
]

RULES = Path(__file__).resolve().parents[3] / "rules" / "specwatch-fleet-recording.yaml"
DURATION = 420.0


def _query(url: str, expr: str, at: float) -> dict[str, float]:
    answer = requests.post(f"{url}/api/v1/query", data={"query": expr, "time": f"{at:.3f}"}, timeout=60).json()
    assert answer["status"] == "success", answer
    return {item["metric"]["instance"]: float(item["value"][1]) for item in answer["data"]["result"]}


def _alert_expr(name: str) -> str:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                return str(rule["expr"])
    raise AssertionError(f"{name} is not in {RULES}")


@pytest.fixture(scope="module")
def half_rolled_out(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("replicas")
    steady = load_scenario("steady")
    assert steady.num_speculative_tokens == 3
    # The same scenario, the server started with K=5 (each phase's K defaults to it).
    variant = work / "steady-k5.yaml"
    variant.write_text(
        Path(steady.source)
        .read_text()
        .replace("name: steady", "name: steady-k5")
        .replace("num_speculative_tokens: 3", "num_speculative_tokens: 5")
    )
    other_k = load_scenario(variant)
    labels = {"job": "vllm", "namespace": "llm"}
    replicas = [
        (steady, {**labels, "instance": "vllm-0"}),
        (steady, {**labels, "instance": "vllm-1"}),
        (other_k, {**labels, "instance": "vllm-2"}),
    ]
    served = serve_scenarios(work, replicas, poll=POLL, duration=DURATION)
    served = with_recorded_rules(served, RULES, POLL)
    try:
        yield served
    finally:
        served.prometheus.stop()


def test_a_replica_started_with_another_k_is_named_alone_by_the_recorded_series_and_the_alert(half_rolled_out) -> None:
    url, at = half_rolled_out.prometheus.url, half_rolled_out.end
    k = _query(url, recorded.REPLICA_K, at)
    assert k == pytest.approx({"vllm-0": 3.0, "vllm-1": 3.0, "vllm-2": 5.0})
    median = requests.post(
        f"{url}/api/v1/query", data={"query": recorded.ROUTE_MEDIAN_K, "time": f"{at:.3f}"}, timeout=60
    ).json()["data"]["result"]
    assert [float(item["value"][1]) for item in median] == [3.0]
    # The two replicas at the route's K are not flagged; the odd one is, by its K's distance.
    flagged = _query(url, _alert_expr("SpecwatchReplicaDraftLengthDiffers"), at)
    assert flagged == pytest.approx({"vllm-2": 2.0})
