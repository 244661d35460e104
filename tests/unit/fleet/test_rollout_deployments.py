"""Fleet mode's rollout grader (verdict/grading.py RolloutGrader, fleet/evaluator.py) with two
deployments of one model: namespaces team-a and team-b both serve model_name llama, through
FleetEvaluator on answers in the query API's shape (no Prometheus needed).

Routes match only model_name and engine, so the route alone cannot tell the deployments apart:
with `prometheus.deployment_labels: [namespace]` the grader is kept per (route, namespace) and
team-b's rollout is graded against team-b's old pods; with the default [] there is one
grading per route, and the exports and status keep their shape.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from specwatch.config import from_mapping
from specwatch.export.collector import SpecwatchCollector
from specwatch.export.status import status_document
from specwatch.fleet import queries as promql
from specwatch.fleet.client import Sample
from specwatch.fleet.evaluator import FleetEvaluator
from specwatch.fleet.grouping import deployment_of
from specwatch.view.fleet import rollout_name

START = 1_800_000_000.0
CONFIG = {
    "windows": ["1m", "5m"],
    "decision": {"min_drafts": 100, "hold": 1},
    "draft": {"method": "eagle3"},
    "hardware": {"preset": "h100-sxm"},
    "model": {"preset": "llama-3.1-8b", "context_tokens": 1024},
    "prometheus": {"url": "http://prometheus:9090", "replica_labels": ["namespace", "pod"], "scrape_interval": "15s"},
}


def _answer(namespace: str, pod: str, k: int, alpha: float, itl: float, windows: float) -> list[Sample]:
    """One replica's window answer (``windows`` 1m windows' worth) at batch 8."""
    base = {"namespace": namespace, "pod": pod, "engine": "0", "model_name": "llama"}

    def sample(family: str, value: float, **extra: str) -> Sample:
        return Sample({**base, promql.FAMILY_LABEL: family, **extra}, value)

    steps = 2000.0 * windows
    observations = steps * 8.0
    return [
        sample(promql.STEPS, steps),
        sample(promql.RUNNING_MEAN, 8.0),
        sample(promql.SAMPLES, 5.0 * windows),
        sample(promql.ITL_SUM, observations * itl),
        sample(promql.ITL_COUNT, observations),
        sample(promql.ITL_BUCKET, observations, le="+Inf"),
        sample(promql.GENERATION, observations * (1 + k * alpha)),
        sample(promql.DRAFTS, observations),
        sample(promql.DRAFT_TOKENS, k * observations),
        sample(promql.ACCEPTED, observations * k * alpha),
        *(sample(promql.ACCEPTED_PER_POS, observations * alpha, position=str(i)) for i in range(k)),
    ]


def _evaluated(deployment_labels: list[str] | None = None) -> FleetEvaluator:
    """20 polls a minute apart: team-a at K=3 throughout; team-b's code workload (alpha 0.4) at K=3,
    then from poll 10 new pods at K=2, team-a's old pods (alpha 0.7) still serving beside them."""
    raw = {**CONFIG, "prometheus": dict(CONFIG["prometheus"])}
    if deployment_labels is not None:
        raw["prometheus"]["deployment_labels"] = deployment_labels
    config = from_mapping(raw, environ={})
    evaluator = FleetEvaluator(config)
    for n in range(20):
        now = START + 60.0 * n
        replicas = [("team-a", "a-0", 3, 0.7, 0.010)]
        replicas.append(("team-b", "b-old-0", 3, 0.4, 0.012) if n < 10 else ("team-b", "b-new-0", 2, 0.45, 0.011))
        one = [s for r in replicas for s in _answer(*r, windows=1.0)]
        five = [s for r in replicas for s in _answer(*r, windows=5.0)]
        fresh = [Sample({"namespace": r[0], "pod": r[1]}, now - 5) for r in replicas]
        evaluator.evaluate(now, {"1m": one, "5m": five}, fresh)
    return evaluator


def _exposition(evaluator: FleetEvaluator) -> list[str]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SpecwatchCollector(evaluator.view))
    return [line for line in generate_latest(registry).decode().splitlines() if "gain_ratio{" in line]


def test_a_rollout_in_one_namespace_is_graded_against_its_own_old_pods_not_another_namespaces():
    evaluator = _evaluated(["namespace"])
    gradings = evaluator.state().gradings
    assert list(gradings) == [("llama", (("namespace", "team-b"),))], "team-a rolled nothing out"
    grading = gradings["llama", (("namespace", "team-b"),)]
    assert grading.new_draft_length == 2
    assert grading.before.acceptance_rate == pytest.approx(0.4), "team-b's own old pods are its before window"


def test_with_deployment_labels_the_gains_and_the_status_name_the_deployment():
    evaluator = _evaluated(["namespace"])
    lines = _exposition(evaluator)
    assert [line.split(" ")[0] for line in lines] == [
        'specwatch_advice_predicted_gain_ratio{namespace="team-b",route="llama"}',
        'specwatch_advice_measured_gain_ratio{namespace="team-b",route="llama"}',
    ]
    rollouts = status_document(evaluator.view())["rollouts"]
    assert list(rollouts) == ['llama{namespace="team-b"}']
    rollout = rollouts['llama{namespace="team-b"}']
    assert (rollout["route"], rollout["deployment"], rollout["status"]) == ("llama", {"namespace": "team-b"}, "graded")


def test_without_deployment_labels_one_grading_per_route_as_before():
    evaluator = _evaluated()
    gradings = evaluator.state().gradings
    assert list(gradings) == [("llama", ())]
    lines = _exposition(evaluator)
    assert [line.split(" ")[0] for line in lines] == [
        'specwatch_advice_predicted_gain_ratio{route="llama"}',
        'specwatch_advice_measured_gain_ratio{route="llama"}',
    ]
    rollouts = status_document(evaluator.view())["rollouts"]
    assert list(rollouts) == ["llama"]
    assert "route" not in rollouts["llama"] and "deployment" not in rollouts["llama"]
    assert rollouts["llama"]["status"] == "graded"


def test_a_deployment_is_the_replicas_values_of_the_deployment_labels_and_a_missing_one_reads_empty():
    replica = (("namespace", "team-a"), ("pod", "a-0"))
    assert deployment_of(replica, ["namespace"]) == (("namespace", "team-a"),)
    assert deployment_of(replica, ["deployment", "namespace"]) == (("deployment", ""), ("namespace", "team-a"))
    assert deployment_of(replica, []) == ()


def test_a_rollouts_status_name_is_its_route_then_its_deployment_as_a_selector():
    assert rollout_name(("llama", ())) == "llama"
    assert rollout_name(("llama", (("namespace", "team-b"), ("deployment", 'a"b')))) == (
        'llama{namespace="team-b",deployment="a\\"b"}'
    )
