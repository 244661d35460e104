"""Fleet mode's rollout grader (verdict/grading.py RolloutGrader, one per route in fleet/evaluator.py)
with two deployments of one model: namespaces team-a and team-b both serve model_name llama, through
FleetEvaluator on answers in the query API's shape (no Prometheus needed).

Known defect (#22): the grader is keyed by route, the only identity the evaluator groups replicas by,
and routes can match only model_name and engine, so the two deployments share one grading record and
team-b's rollout is graded against team-a's windows. Strict xfail: it fails once that is fixed.
"""

from __future__ import annotations

import pytest

from specwatch.config import from_mapping
from specwatch.fleet import queries as promql
from specwatch.fleet.client import Sample
from specwatch.fleet.evaluator import FleetEvaluator

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


@pytest.mark.xfail(strict=True, reason="#22: rollouts are graded per route, across deployments of the same model")
def test_a_rollout_in_one_namespace_is_graded_against_its_own_old_pods_not_another_namespaces():
    evaluator = FleetEvaluator(from_mapping(CONFIG, environ={}))
    for n in range(20):
        now = START + 60.0 * n
        # team-a: a chat workload at K=3 throughout; team-b: code (alpha 0.4) at K=3, new pods at K=2 from poll 10.
        replicas = [("team-a", "a-0", 3, 0.7, 0.010)]
        replicas.append(("team-b", "b-old-0", 3, 0.4, 0.012) if n < 10 else ("team-b", "b-new-0", 2, 0.45, 0.011))
        one = [s for r in replicas for s in _answer(*r, windows=1.0)]
        five = [s for r in replicas for s in _answer(*r, windows=5.0)]
        fresh = [Sample({"namespace": r[0], "pod": r[1]}, now - 5) for r in replicas]
        evaluator.evaluate(now, {"1m": one, "5m": five}, fresh)
    (grading,) = evaluator.state().gradings.values()
    assert grading.new_draft_length == 2
    assert grading.before.acceptance_rate == pytest.approx(0.4), "team-b's own old pods are its before window"
