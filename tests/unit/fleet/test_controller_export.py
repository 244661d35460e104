"""Fleet mode detects each replica's controller of K as the sidecar does per route, and exports it
(specwatch_speculation_controller_info with the replica's labels) so that
SpecDecodeSpeculationStopped works in fleet mode: under TensorRT-LLM's stated gate, a replica whose
spec counters froze while generation goes on is stopped (gate_fired), its sibling still drafting is
gated. FleetEvaluator on answers in the query API's shape (no Prometheus needed), rendered as the
fleet's /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from specwatch.export.collector import SpecwatchCollector
from specwatch.fleet.client import Sample
from specwatch.fleet.evaluator import FleetEvaluator
from support.fleet_answers import START, fleet_config, replica_answer

K = 3
GATE = {"num_speculative_tokens": K, "acceptance_rate_threshold": 0.55, "acceptance_rate_window_size": 200}


def _metrics(stated: dict[str, object] | None) -> list[str]:
    """The fleet's /metrics after 10 polls a minute apart: pod trt-0 drafts throughout, trt-1's
    spec counters froze (a gate fires on each engine by itself)."""
    evaluator = FleetEvaluator(fleet_config(stated))
    replicas = (("trt-0", True), ("trt-1", False))
    for n in range(10):
        now = START + 60.0 * n
        one = [s for pod, on in replicas for s in replica_answer(pod, K, 8.0, 0.7, 0.010, windows=1.0, drafting=on)]
        five = [s for pod, on in replicas for s in replica_answer(pod, K, 8.0, 0.7, 0.010, windows=5.0, drafting=on)]
        evaluator.evaluate(now, {"1m": one, "5m": five}, [Sample({"pod": pod}, now - 5) for pod, _ in replicas])
    registry = CollectorRegistry(auto_describe=False)
    view = evaluator.view()
    registry.register(SpecwatchCollector(lambda: view))
    return generate_latest(registry).decode().splitlines()


def _controller_lines(lines: list[str]) -> list[str]:
    return sorted(line for line in lines if line.startswith("specwatch_speculation_controller_info{"))


def test_a_replica_whose_gate_fired_is_stopped_and_its_drafting_sibling_gated_on_the_fleets_metrics():
    lines = _metrics(GATE)
    assert _controller_lines(lines) == [
        'specwatch_speculation_controller_info{instance="trt-0",mode="gated",pod="trt-0",reason="",route="llama",'
        'stated="gated",target="trt-0"} 1.0',
        'specwatch_speculation_controller_info{instance="trt-1",mode="stopped",pod="trt-1",reason="gate_fired",'
        'route="llama",stated="gated",target="trt-1"} 1.0',
    ]
    # SpecDecodeSpeculationStopped joins on the replica's spec counters: fleet mode serves their
    # window (no draft in it), not a mirrored counter.
    assert [line for line in lines if line.startswith("specwatch_window_drafts{") and 'pod="trt-1"' in line] == [
        'specwatch_window_drafts{instance="trt-1",pod="trt-1",route="llama",target="trt-1",window="1m"} 0.0',
        'specwatch_window_drafts{instance="trt-1",pod="trt-1",route="llama",target="trt-1",window="5m"} 0.0',
    ]


def test_without_a_stated_controller_the_drafting_replica_runs_a_fixed_k_and_the_frozen_one_is_not_drafting():
    assert _controller_lines(_metrics(None)) == [
        'specwatch_speculation_controller_info{instance="trt-0",mode="fixed",pod="trt-0",reason="",route="llama",'
        'stated="none",target="trt-0"} 1.0',
        'specwatch_speculation_controller_info{instance="trt-1",mode="stopped",pod="trt-1",reason="not_drafting",'
        'route="llama",stated="none",target="trt-1"} 1.0',
    ]
