"""Fleet mode's step-time curve per route and the measured baseline behind it (fleet/baseline.py),
through FleetEvaluator on answers in the query API's shape (no Prometheus needed).

The replicas' step times come from a server whose fixed costs of speculation are twice the prior's
(the same presets otherwise): spec-on steps alone leave the prior's split, so its break-even stays
the prior's; a spec-off replica of the same route measures the target's own step time and moves it
to the server's.
"""

from __future__ import annotations

import dataclasses

import pytest

from specwatch import costmodel
from specwatch.config import from_mapping
from specwatch.config.cost_model import cost_model_from_config, route_cost_model
from specwatch.costmodel import uncertainty
from specwatch.export.status import status_document
from specwatch.fleet import queries as promql
from specwatch.fleet.client import Sample
from specwatch.fleet.evaluator import FleetEvaluator

START = 1_800_000_000.0
STEPS = 2000.0  # engine steps per 1m window
K = 3
ALPHA = 0.5


def _config(**extra: object):
    return from_mapping(
        {
            "windows": ["1m", "5m"],
            "decision": {"min_drafts": 100, "hold": 1},
            "draft": {"method": "eagle3"},
            "hardware": {"preset": "h100-sxm"},
            "model": {"preset": "llama-3.1-8b", "context_tokens": 1024},
            "learning": {"enabled": True, "min_points": 6},
            "prometheus": {"url": "http://prometheus:9090", "replica_labels": ["pod"], "scrape_interval": "15s"},
            **extra,
        },
        environ={},
    )


# The route's model before learning: the configured one with the detected engine's (vLLM V1) prior.
PRIOR = route_cost_model(cost_model_from_config(_config()), _config(), "vllm", "v1").with_method("eagle3")
# The server: the prior's step, twice its fixed costs of speculation.
TRUTH = dataclasses.replace(
    PRIOR,
    verify_overhead_seconds=2 * PRIOR.verify_overhead_seconds,
    verify_seconds_per_request=2 * PRIOR.verify_seconds_per_request,
    draft=dataclasses.replace(PRIOR.draft, fixed_seconds=2 * PRIOR.draft.fixed_seconds),
)


def _breakeven(model: costmodel.CostModel, batch: float) -> float:
    return (model.spec_step_time(batch, K) / model.base_step_time(batch) - 1) / K


def _answer(pod: str, batch: float, spec: bool, windows: float = 1.0, speed: float = 1.0) -> list[Sample]:
    """One replica's window answer (``windows`` 1m windows' worth) at ``batch``, K=3 when spec is on."""
    base = {"pod": pod, "engine": "0", "model_name": "llama"}

    def sample(family: str, value: float, **extra: str) -> Sample:
        return Sample({**base, promql.FAMILY_LABEL: family, **extra}, value)

    steps = STEPS * windows
    observations = steps * batch
    seconds = (TRUTH.spec_step_time(batch, K) if spec else TRUTH.base_step_time(batch)) / speed
    out = [
        sample(promql.STEPS, steps),
        sample(promql.RUNNING_MEAN, batch),
        sample(promql.SAMPLES, 5.0 * windows),
        sample(promql.ITL_SUM, observations * seconds),
        sample(promql.ITL_COUNT, observations),
        sample(promql.ITL_BUCKET, observations, le="+Inf"),
        sample(promql.GENERATION, observations * (1 + K * ALPHA if spec else 1.0)),
    ]
    if spec:
        rates = [ALPHA] * K
        out += [
            sample(promql.DRAFTS, observations),
            sample(promql.DRAFT_TOKENS, K * observations),
            sample(promql.ACCEPTED, observations * sum(rates)),
        ]
        out += [sample(promql.ACCEPTED_PER_POS, observations * r, position=str(i)) for i, r in enumerate(rates)]
    return out


def _run(
    evaluator: FleetEvaluator,
    replicas: dict[str, tuple[bool, tuple[float, ...]]],
    polls: int,
    t0: float = START,
    speeds: dict[str, float] | None = None,
    last: list | None = None,
):
    """``polls`` one-minute polls; each replica cycles through its batches, spec on or off (``speeds``:
    a replica on hardware that many times faster)."""
    speeds = speeds or {}
    for n in range(polls):
        now = t0 + 60.0 * n
        one = [
            s
            for pod, (spec, loads) in replicas.items()
            for s in _answer(pod, loads[n % len(loads)], spec, speed=speeds.get(pod, 1.0))
        ]
        five = [
            s
            for pod, (spec, loads) in replicas.items()
            for s in _answer(pod, loads[n % len(loads)], spec, 5.0, speed=speeds.get(pod, 1.0))
        ]
        fresh = [Sample({"pod": pod}, now - 5) for pod in replicas]
        results = evaluator.evaluate(now, {"1m": one, "5m": five}, fresh)
        if last is not None:
            last[:] = results
    return now


SPEC_ON = {"vllm-0": (True, (4.0, 8.0)), "vllm-1": (True, (8.0, 4.0))}
CANARY = {"canary-0": (False, (4.0, 8.0, 16.0, 32.0))}


def test_a_spec_off_replica_of_the_route_is_its_canary_and_moves_the_breakeven_to_the_servers():
    evaluator = FleetEvaluator(_config())
    _run(evaluator, SPEC_ON | CANARY, 12)
    (route,) = evaluator.state().cost_models
    assert (route.route, route.source, route.baseline, route.canaries) == ("llama", "learned", "canary", 1)
    model = evaluator.learning.cost_model_for("llama")
    for batch in (4.0, 8.0):
        assert _breakeven(model, batch) == pytest.approx(_breakeven(TRUTH, batch), abs=0.01)


def test_from_spec_on_replicas_alone_the_curve_says_no_baseline_and_keeps_the_priors_split():
    evaluator = FleetEvaluator(_config())
    _run(evaluator, SPEC_ON, 12)
    (route,) = evaluator.state().cost_models
    assert (route.source, route.baseline, route.baseline_points) == ("learned", "none", 0)
    model = evaluator.learning.cost_model_for("llama")
    # The learned level scales target and speculation alike: the break-even stays the prior's.
    assert _breakeven(model, 8.0) == pytest.approx(_breakeven(PRIOR, 8.0), abs=0.01)
    assert abs(_breakeven(PRIOR, 8.0) - _breakeven(TRUTH, 8.0)) > 0.05


def test_spec_off_windows_from_before_the_switch_are_the_routes_history():
    evaluator = FleetEvaluator(_config())
    pods = {"vllm-0": (4.0, 8.0, 16.0, 32.0), "vllm-1": (8.0, 4.0, 32.0, 16.0)}
    now = _run(evaluator, {pod: (False, loads) for pod, loads in pods.items()}, 8)
    _run(evaluator, {pod: (True, loads[:2]) for pod, loads in pods.items()}, 8, t0=now + 60.0)
    (route,) = evaluator.state().cost_models
    assert (route.source, route.baseline, route.canaries) == ("learned", "history", 0)
    model = evaluator.learning.cost_model_for("llama")
    assert _breakeven(model, 8.0) == pytest.approx(_breakeven(TRUTH, 8.0), abs=0.01)


def test_with_a_configured_canary_a_spec_off_replica_it_does_not_name_is_not_learned_from():
    prometheus = {"url": "http://prometheus:9090", "replica_labels": ["pod"], "scrape_interval": "15s"}
    evaluator = FleetEvaluator(_config(prometheus={**prometheus, "canary": {"pod": "canary-1"}}))
    _run(evaluator, SPEC_ON | CANARY, 12)
    (route,) = evaluator.state().cost_models
    assert (route.baseline, route.canaries, route.baseline_points) == ("none", 0, 0)


def test_each_replica_gives_one_point_per_shortest_window_however_often_it_is_polled():
    evaluator = FleetEvaluator(_config())
    for n in range(13):  # every 15 s for 3 minutes: 4 points per replica (at 0, 60, 120 and 180 s)
        now = START + 15.0 * n
        answer = [s for pod, (spec, loads) in SPEC_ON.items() for s in _answer(pod, loads[0], spec)]
        evaluator.evaluate(now, {"1m": answer, "5m": answer}, [Sample({"pod": pod}, now - 5) for pod in SPEC_ON])
    (route,) = evaluator.state().cost_models
    assert route.points == pytest.approx(2 * 4, rel=0.01)


def test_with_learning_off_the_verdicts_rest_on_the_configured_preset_and_the_status_says_so():
    evaluator = FleetEvaluator(_config(learning={"enabled": False}))
    _run(evaluator, SPEC_ON | CANARY, 8)
    assert evaluator.learning.cost_model_for("llama") is evaluator.route_model("vllm", "v1")
    document = status_document(evaluator.view())
    assert [(c["route"], c["source"], c["baseline"]) for c in document["cost_models"]] == [("llama", "preset", "none")]


def test_the_routes_baseline_is_exported_per_route_and_nothing_after_a_failed_poll():
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from specwatch.export.collector import SpecwatchCollector

    evaluator = FleetEvaluator(_config())
    now = _run(evaluator, SPEC_ON | CANARY, 8)
    registry = CollectorRegistry()
    registry.register(SpecwatchCollector(evaluator.view))

    def info() -> list[dict[str, str]]:
        families = text_string_to_metric_families(generate_latest(registry).decode())
        return [dict(s.labels) for f in families for s in f.samples if s.name == "specwatch_fleet_cost_model_info"]

    assert info() == [{"route": "llama", "source": "learned", "baseline": "canary"}]
    evaluator.record_error(now + 60.0, "timeout")
    assert info() == []


@pytest.mark.parametrize(
    ("replicas", "baseline", "keeps_split"),
    [(SPEC_ON | CANARY, "canary", False), (SPEC_ON, "none", True)],
    ids=["with a canary", "spec-on replicas alone"],
)
def test_the_status_assumptions_name_each_replicas_learned_source_and_whether_the_split_is_measured(
    replicas, baseline, keeps_split
):
    evaluator = FleetEvaluator(_config())
    _run(evaluator, replicas, 12)
    block = status_document(evaluator.view())["assumptions"]
    assert block["setup"]["hardware"] == {"value": "h100-sxm", "origin": "preset"}
    assert block["setup"]["assumed"] is False
    entries = {(r["target"], r["route"]): r for r in block["routes"]}
    assert set(entries) == {(pod, "llama") for pod in replicas}
    for (pod, _), entry in entries.items():
        assert (entry["step_time"], entry["baseline"]) == ("learned", baseline)
        assert entry["interval_keeps_prior_error"] is keeps_split
        assert entry["detected_engine"] == "vllm" and entry["engine_prior"] == "vllm-v1"
        assert entry["engine_prior_chosen"] == "detected"
        if replicas[pod][0]:  # spec on: an interval, and its two parts
            assert entry["model_log_error"] is not None and set(entry["sampling_log_error"]) == {"1m", "5m"}
            # A measured split leaves the curve's residual alone; spec-on steps alone keep the prior's error.
            prior_error = uncertainty.model_log_error(PRIOR)
            assert (entry["model_log_error"] >= prior_error) is keeps_split
        else:
            assert entry["sampling_log_error"] == {}


@pytest.mark.parametrize("speed", [2.5, 1 / 2.5], ids=["canary 2.5x faster", "canary 2.5x slower"])
def test_a_canary_on_other_hardware_is_not_the_routes_baseline_and_the_verdict_stays_keep(speed):
    evaluator, results = FleetEvaluator(_config()), []
    _run(evaluator, SPEC_ON | CANARY, 12, speeds={"canary-0": speed}, last=results)
    (route,) = evaluator.state().cost_models
    assert (route.baseline, route.canaries, route.baseline_points) == ("none", 0, 0)
    assert evaluator.learning.unlike_canaries > 0
    spec_on = [e for replica, e in results if dict(replica)["pod"] in SPEC_ON and e.verdict is not None]
    assert spec_on
    for e in spec_on:
        assert e.verdict != "disable"
        lower, upper = e.value("expected_speedup_lower"), e.value("expected_speedup_upper")
        if lower is not None and upper is not None:
            assert upper > lower, "never a zero-width interval"


def test_a_like_for_like_canary_never_gives_a_zero_width_interval():
    evaluator = FleetEvaluator(_config())
    _run(evaluator, SPEC_ON | CANARY, 12)
    model = evaluator.learning.cost_model_for("llama")
    assert model.profile is not None and model.profile.spec_scale is not None  # split measured
    assert uncertainty.model_log_error(model, 8.0) >= uncertainty.MIN_MEASURED_LOG_ERROR
    interval = uncertainty.speedup_interval(model, 1.2, k=K, alpha=ALPHA, coverage=1.0, drafts=None, confidence=0.9)
    assert interval.upper / interval.lower > 1.1
