"""The simulator's controllers against the sidecar: a TensorRT-LLM-like gate firing mid-run and a
vLLM batch schedule dropped under data parallelism each make the exported signal
SpecDecodeSpeculationStopped reads true within the alert window, and no other alert's condition
is true for them at any poll. vLLM's adaptive verification is graded by what it delivers: a win
with a falling acceptance rate is no loss, and its gain is the simulator's within 10 %; a loss at
low concurrency is flagged (SpecDecodeControllerLosing). SGLang's --speculative-adaptive bands,
whose batch crosses a band edge, are marked adaptive with the step gauge per band as evidence, and
graded from SGLang's gauges and token counters within 10 % of the simulator's truth.

The alert conditions are the rules' expressions (rules/*.yaml) over the sidecar's own /metrics
samples at each poll, without `for:` (a condition never true cannot fire)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from specwatch import sim
from specwatch.export.collector import SpecwatchCollector
from specwatch.sidecar.pipeline import Pipeline
from specwatch.verdict.controller import Controller
from support.builders import scenario_config
from support.views import view_of

POLL = 5.0
ALERT_WINDOW = 300.0  # window="5m" in rules/
SEED = 3

Samples = dict[str, list[tuple[dict[str, str], float]]]


def sidecar(scenario: sim.Scenario) -> Pipeline:
    return Pipeline(scenario_config(scenario, poll_interval=POLL))


def samples_of(pipeline: Pipeline) -> Samples:
    out: Samples = defaultdict(list)
    state = pipeline.state()
    for family in SpecwatchCollector(lambda: view_of(state)).collect():
        for sample in family.samples:
            out[sample.name].append((dict(sample.labels), sample.value))
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    for have, v in samples.get(name, []):
        if all(have.get(k) == want for k, want in labels.items()):
            return v
    return None


def stopped(samples: Samples, route: str) -> str | None:
    """SpecDecodeSpeculationStopped's condition: the reason, or None."""
    for labels, v in samples.get("specwatch_speculation_controller_info", []):
        counted = value(samples, "specwatch_drafts_total", route=route) is not None
        if labels["route"] == route and labels["mode"] == "stopped" and v == 1 and counted:
            return labels["reason"]
    return None


def other_alerts(samples: Samples, route: str) -> set[str]:
    """The conditions of every other per-route alert, as the rules state them (window 5m)."""
    w = {"route": route, "window": "5m"}
    fired = set()
    margin = value(samples, "specwatch_acceptance_margin", **w)
    upper = value(samples, "specwatch_expected_speedup_upper", **w)
    if margin is not None and margin < 0 and not (upper is not None and upper >= 1):
        fired.add("SpecDecodeBelowBreakeven")  # and the fleet alert built on the same count
    loss = value(samples, "specwatch_loss_probability", **w)
    off = any(value(samples, "specwatch_verdict", verdict=v, **w) == 1 for v in ("disable", "spec_off"))
    if loss is not None and loss >= 0.8 and not off:
        fired.add("SpecDecodeProbablyLosing")
    recommended = value(samples, "specwatch_recommended_draft_length_tokens", **w)
    drafted = value(samples, "specwatch_draft_length_tokens", **w)
    if recommended is not None and drafted is not None and recommended < drafted and recommended >= 1:
        fired.add("SpecDecodeShorterDraftRecommended")
    if value(samples, "specwatch_speculative_config_mismatch", **w) == 1 and stopped(samples, route) is None:
        fired.add("SpecDecodeConfigMismatch")
    expects = value(samples, "specwatch_route_expects_speculation", route=route) == 1
    if expects and value(samples, "specwatch_drafts_total", route=route) is None:
        fired.add("SpecDecodeMetricsMissing")
    gain = value(samples, "specwatch_advice_measured_gain_ratio", route=route)
    if gain is not None and gain < 0.95:
        fired.add("SpecDecodeAppliedAdviceSlowedDecode")
    if controller_losing(samples, route):
        fired.add("SpecDecodeControllerLosing")
    return fired


def controller_losing(samples: Samples, route: str) -> bool:
    """SpecDecodeControllerLosing's condition (window 5m), warning or critical."""
    w = {"route": route, "window": "5m"}
    loss = value(samples, "specwatch_controller_loss_probability", **w)
    upper = value(samples, "specwatch_controller_gain_ratio_upper", **w)
    return (loss is not None and loss >= 0.8) or (upper is not None and upper < 1)


LAST: dict[str, Pipeline] = {}
#: Per scenario and poll: the sidecar's 5m controller gain, acceptance rate and ITL per token, and
#: the simulator's decode totals (the truth).
GAINS: dict[str, dict[float, tuple[dict[str, float | None], tuple[float, float, float, float]]]] = {}
#: Per scenario and poll: the route's controller of K (verdict/controller.py).
CONTROLLERS: dict[str, dict[float, Controller | None]] = {}


def run(name: str) -> tuple[sim.Scenario, sim.Simulator, list[tuple[float, str | None, set[str], str | None]]]:
    """(scenario, simulator at its end, per poll: sim time, stopped reason, other alerts, mode)."""
    scenario = sim.load_scenario(name)
    simulator = sim.Simulator(scenario, seed=SEED)
    pipeline = sidecar(scenario)
    route = scenario.model_names[0]
    out = []
    t = 0.0
    while t <= scenario.duration + 1e-9:
        simulator.advance_to(t)
        now = simulator.epoch + t
        pipeline.ingest("vllm", now, simulator.render())
        pipeline.evaluate(now)
        samples = samples_of(pipeline)
        modes = [labels["mode"] for labels, _ in samples.get("specwatch_speculation_controller_info", [])]
        out.append((t, stopped(samples, route), other_alerts(samples, route), modes[0] if modes else None))
        seen = {
            family: value(samples, f"specwatch_{family}", route=route, window="5m")
            for family in ("controller_gain_ratio", "acceptance_ratio", "itl_per_token_mean_seconds")
        }
        GAINS.setdefault(name, {})[t] = (seen, simulator.decode_totals(route))
        CONTROLLERS.setdefault(name, {})[t] = next((r.controller for r in pipeline.state().routes), None)
        t += POLL
    LAST[name] = pipeline
    return scenario, simulator, out


@pytest.mark.parametrize("name", ["gate-fires", "schedule-dropped-dp"])
def test_speculation_stopped_within_the_alert_window_and_no_other_alert(name):
    scenario, simulator, polls = run(name)
    truth = scenario.expected["stopped"]
    route = scenario.model_names[0]
    if truth["reason"] == "gate_fired":
        fired_at = simulator.gate_fired_at(route)
        assert fired_at is not None and truth["after"] <= fired_at < truth["after"] + 30, fired_at
    else:
        fired_at = float(truth["after"])
    before = [p for p in polls if p[0] < fired_at]
    assert all(reason is None for _, reason, _, _ in before), [p for p in before if p[1]]
    after = [p for p in polls if p[0] >= fired_at]
    first = next((t for t, reason, _, _ in after if reason is not None), None)
    assert first is not None, f"{name}: never marked stopped"
    assert first - fired_at <= ALERT_WINDOW, (first, fired_at)
    # Once marked, it stays so (a gate is one-way, a dropped schedule stays dropped): the alert's
    # `for:` can run out.
    marked = [p for p in after if p[0] >= first]
    assert {reason for _, reason, _, _ in marked} == {truth["reason"]}
    assert {mode for _, _, _, mode in marked} == {"stopped"}
    assert marked[-1][0] - first >= ALERT_WINDOW
    # No other alert's condition is true at any poll of the run.
    assert not set().union(*(others for _, _, others, _ in polls)), [(t, o) for t, _, o, _ in polls if o]


def test_before_the_gate_fires_the_route_is_marked_gated_from_its_stated_config():
    _, simulator, polls = run("gate-fires")
    fired_at = simulator.gate_fired_at("llama-8b")
    assert fired_at is not None
    assert {mode for t, _, _, mode in polls if POLL <= t < fired_at} == {"gated"}


def test_the_status_json_and_the_page_give_the_controller_with_its_evidence():
    from specwatch.export.page import render_page
    from specwatch.export.page_history import PageHistory
    from specwatch.export.status import status_document

    run("schedule-dropped-dp")
    pipeline = LAST["schedule-dropped-dp"]
    state = pipeline.state()
    (route,) = status_document(view_of(state, pipeline.config))["routes"]
    controller = route["controller"]
    assert controller["mode"] == "stopped" and controller["reason"] == "schedule_dropped"
    assert controller["stated"] == "schedule" and controller["basis"] == "observed"
    assert controller["expected"].startswith("the stated schedule gives K=2..2 at batch")
    assert "on 2 data-parallel engines" in controller["seen"] and "data parallelism" in controller["evidence"]
    html = render_page(view_of(state, pipeline.config), PageHistory()).decode()
    assert "controller: stopped (schedule dropped): data parallelism &gt; 1 drops the batch schedule" in html


def test_adaptive_verification_that_wins_is_no_loss_while_its_acceptance_falls():
    _, _, polls = run("adaptive-wins")
    assert {mode for t, _, _, mode in polls if t >= 60} == {"adaptive"}
    assert not set().union(*(others for _, _, others, _ in polls)), [(t, o) for t, _, o, _ in polls if o]
    busy, quiet = GAINS["adaptive-wins"][360.0][0], GAINS["adaptive-wins"][720.0][0]
    alpha_busy, alpha_quiet = busy["acceptance_ratio"], quiet["acceptance_ratio"]
    itl_busy, itl_quiet = busy["itl_per_token_mean_seconds"], quiet["itl_per_token_mean_seconds"]
    assert alpha_busy is not None and alpha_quiet is not None and itl_busy is not None and itl_quiet is not None
    # The acceptance rate fell by more than a tenth while every request decoded faster.
    assert alpha_quiet < 0.9 * alpha_busy and itl_quiet < itl_busy


@pytest.mark.parametrize("at", [360.0, 720.0])
def test_adaptive_verification_gain_is_graded_within_10_percent_of_the_simulators_truth(at):
    if "adaptive-wins" not in GAINS:
        run("adaptive-wins")
    gains = GAINS["adaptive-wins"]
    seen, totals = gains[at]
    graded = seen["controller_gain_ratio"]
    truth = sim.delivered_gain(gains[at - ALERT_WINDOW][1], totals)
    assert graded is not None and truth > 1.0
    assert abs(graded / truth - 1.0) <= 0.10, (graded, truth)


def test_adaptive_verification_losing_at_low_concurrency_is_flagged():
    scenario, _, polls = run("adaptive-loses-low-concurrency")
    gains = GAINS["adaptive-loses-low-concurrency"]
    end = scenario.duration
    truth = sim.delivered_gain(gains[end - ALERT_WINDOW][1], gains[end][1])
    graded = gains[end][0]["controller_gain_ratio"]
    assert truth < 1.0 and graded is not None and abs(graded / truth - 1.0) <= 0.10, (graded, truth)
    flagged = [t for t, _, others, _ in polls if "SpecDecodeControllerLosing" in others]
    # Flagged from the first full window on.
    assert flagged and all(t in flagged for t, *_ in polls if t >= ALERT_WINDOW), flagged


def test_the_status_says_to_keep_adaptive_verification_with_what_it_delivers():
    from specwatch.export.status import status_document

    if "adaptive-wins" not in LAST:
        run("adaptive-wins")
    pipeline = LAST["adaptive-wins"]
    (route,) = status_document(pipeline.view())["routes"]
    window = route["windows"]["5m"]
    gain = window["controller_gain"]
    assert window["verdict"] == "keep" and gain["gain_ratio"] == window["expected_speedup"] > 1.0
    assert f"Keep enable_adaptive_verification: it delivers {gain['gain_ratio']:.2f}x" in " ".join(window["notes"])


SGLANG = "sglang-adaptive-bands"


def test_sglang_adaptive_bands_are_marked_adaptive_with_the_steps_of_each_band_and_no_alert():
    scenario, _, polls = run(SGLANG)
    assert {mode for t, _, _, mode in polls if t >= 60} == {"adaptive"}
    # SGLang's tokenizer counters appear with the first finished request: from then on no alert.
    assert not set().union(*(others for t, _, others, _ in polls if t >= 60)), [(t, o) for t, _, o, _ in polls if o]
    crossing = scenario.phases[0].end
    steps = {int(low): k for low, k in scenario.expected["controller"]["band_steps"].items()}
    after = CONTROLLERS[SGLANG][crossing + ALERT_WINDOW / 5]
    assert after is not None and after.stated == "adaptive"
    assert "draft.config states speculative_adaptive" in after.evidence
    assert (
        f"sglang:spec_num_steps per batch band: [1, 64) K={steps[1]:.2f} at batch ≈ 32, "
        f"[64, 128) K={steps[64]:.2f} at batch ≈ 96"
    ) in after.evidence, after.evidence


@pytest.mark.parametrize("at", [360.0, 720.0])
def test_sglang_adaptive_bands_gain_is_graded_within_10_percent_of_the_simulators_truth(at):
    if SGLANG not in GAINS:
        run(SGLANG)
    gains = GAINS[SGLANG]
    seen, totals = gains[at]
    graded = seen["controller_gain_ratio"]
    truth = sim.delivered_gain(gains[at - ALERT_WINDOW][1], totals)
    assert graded is not None and truth > 1.0
    assert abs(graded / truth - 1.0) <= 0.10, (graded, truth)


def test_the_status_keeps_sglangs_bands_and_names_the_band_candidates():
    from specwatch.export.status import status_document

    if SGLANG not in LAST:
        run(SGLANG)
    (route,) = status_document(LAST[SGLANG].view())["routes"]
    scenario = sim.load_scenario(SGLANG)
    window = route["windows"]["5m"]
    # keep: the steps the server was started with (the bands choose below them)
    assert window["verdict"] == "keep" and window["recommended_draft_length"] == scenario.num_speculative_tokens
    notes = " ".join(window["notes"])
    assert "shortening K is moot" in notes
    assert "--speculative-adaptive band candidates" in notes and "[64, 128): K=" in notes
