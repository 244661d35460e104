"""Fleet mode's grading across rollouts in virtual time: the old pod (K=4) and the new pod (K=2)
are two replicas of one route; while and after the new one replaces the old, the route's graded
gain matches the simulator's true change in tokens/s."""

from __future__ import annotations

import pytest

from specwatch import sim
from specwatch.config.cost_model import cost_model_from_config
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.scenario import parse_scenario
from specwatch.verdict.grading import RolloutGrader
from support.builders import pod_scenario, scenario_config

POLL = 5.0


def pod(k: int, seed: int):
    """A replica drafting K tokens; K = 0: the same server with speculation off."""
    drafted = k or 2
    events = [] if k else [{"at": 0, "type": "spec_off"}]
    sc = parse_scenario({**pod_scenario(drafted, "900s"), "name": f"pod-k{k}", "events": events})
    config = scenario_config(sc, poll_interval=POLL, windows=("1m", "4m"))
    return config, Pipeline(config), sim.Simulator(sc, seed=seed)


def replica_windows(pipeline: Pipeline, simulator, t: float, since: float):
    simulator.advance_to(t - since)
    pipeline.ingest("vllm", t, simulator.render(), duration=0.01)
    pipeline.evaluate(t)
    route = pipeline.state().routes[0]
    return [e.stats for e in route.evaluations], route.method


def generated(simulator) -> float:
    return sum(e.counters.generation_tokens for r in simulator.routes.values() for e in r.engines)


def roll(pods, spans):
    """Replicas (name, k, seed, start, end) on one timeline: returns the grader and each pod's true
    tokens/s after its first minute."""
    grader = RolloutGrader()
    built = {name: (*pod(k, seed), start, end) for name, k, seed, start, end in pods}
    cost_model = cost_model_from_config(next(iter(built.values()))[0])
    marks: dict[str, dict[float, float]] = {name: {} for name in built}
    t = 0.0
    while t < spans:
        t += POLL
        for name, (_, pipeline, simulator, start, end) in built.items():
            if start < t <= end:
                stats, method = replica_windows(pipeline, simulator, t, start)
                grader.observe(name, t, stats, method, 500, cost_model)
                if t in (start + 60.0, end):
                    marks[name][t] = generated(simulator)
    rates = {}
    for name, (_, _, _, start, end) in built.items():
        rates[name] = (marks[name][end] - marks[name][start + 60.0]) / (end - start - 60.0)
    return grader, rates


def test_a_rollout_to_a_shorter_draft_is_graded_across_replicas_within_10_percent_of_the_truth():
    grader, rates = roll([("old", 4, 1, 0.0, 330.0), ("new", 2, 2, 300.0, 660.0)], 660.0)
    true_gain = rates["new"] / rates["old"]
    assert true_gain > 1 / 0.9
    grading = grader.grading
    assert grading is not None and grading.status == "graded"
    assert grading.before.draft_length == pytest.approx(4.0, abs=0.01)
    assert grading.new_draft_length == pytest.approx(2.0, abs=0.01)
    assert grading.after is not None and grading.after.span_seconds == pytest.approx(240.0)
    assert grading.measured_gain_ratio == pytest.approx(true_gain, rel=0.10)
    assert grading.predicted_gain_ratio is not None and grading.predicted_gain_ratio > 1
    # Compared at comparable batch: the before window is the old pods' nearest in batch.
    assert abs(grading.before.batch_size / grading.after.batch_size - 1) < 0.2


def test_replicas_replaced_at_the_same_draft_length_are_never_graded():
    grader, _ = roll([("old", 4, 1, 0.0, 330.0), ("new", 4, 2, 300.0, 660.0)], 660.0)
    assert grader.grading is None


def test_after_the_old_pods_are_gone_the_next_rollout_is_graded_against_the_new_regime():
    pods = [("a", 4, 1, 0.0, 330.0), ("b", 2, 2, 300.0, 900.0), ("c", 4, 3, 860.0, 1200.0)]
    grader, rates = roll(pods, 1200.0)
    grading = grader.grading
    assert grading is not None and grading.before.draft_length == pytest.approx(2.0, abs=0.01)
    assert grading.new_draft_length == pytest.approx(4.0, abs=0.01)
    assert grading.measured_gain_ratio == pytest.approx(rates["c"] / rates["b"], rel=0.10)


def test_a_rollout_with_no_overlap_is_graded_on_the_new_pods_filled_window():
    """Recreate strategy: the old pod is gone before the new one answers; the grading follows the
    new pod's window until it has filled, not its first short one."""
    grader, rates = roll([("old", 4, 1, 0.0, 300.0), ("new", 2, 2, 320.0, 660.0)], 660.0)
    grading = grader.grading
    assert grading is not None and grading.after is not None
    assert grading.after.span_seconds == pytest.approx(240.0)
    assert grading.measured_gain_ratio == pytest.approx(rates["new"] / rates["old"], rel=0.10)


def test_a_spec_off_canary_beside_the_spec_on_replicas_is_no_rollout():
    """The canary (the route's measured baseline) runs beside the spec-on pods for good: grading it
    as a rollout to `disable` would report a change nobody made, and could fire the slowed-decode alert."""
    for first in ("canary", "spec"):  # whichever replica the grader sees first
        pods = [("canary", 0, 2, 0.0, 660.0), ("spec", 4, 1, 0.0, 660.0)]
        grader, _ = roll(pods if first == "canary" else pods[::-1], 660.0)
        assert grader.grading is None, first


def test_a_rollout_that_disables_speculation_is_graded_once_the_old_pods_are_gone():
    grader, rates = roll([("old", 4, 1, 0.0, 330.0), ("new", 0, 2, 300.0, 900.0)], 900.0)
    grading = grader.grading
    assert grading is not None and grading.new_draft_length == 0
    assert grading.measured_gain_ratio == pytest.approx(rates["new"] / rates["old"], rel=0.10)
