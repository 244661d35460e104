"""The simulator as an SGLang server: its /metrics in SGLang's own families and labels (the ones
specwatch's SGLang schema reads, as in tests/fixtures/engines/sglang/), its tokenizer counters and
scheduler gauges by SGLang's rules, and --speculative-adaptive's step bands switching with the
batch."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.engines.grouping import Grouping
from specwatch.engines.series import Counter, Gauge
from specwatch.sim import Simulator, load_scenario
from specwatch.sim.engine import SGLANG_DECODE_LOG_INTERVAL
from specwatch.sim.scenario import SGLANG_BANDS, ScenarioError, parse_scenario
from support.engine_fixtures import fixture, polls

ROUTE = "llama-8b"


def sglang(**over):
    base = {
        "name": "t",
        "engine": "sglang",
        "model": "llama-3.1-8b",
        "num_speculative_tokens": 3,
        "prompt_tokens": 256,
        "output_tokens": 128,
        "routes": [{"model_name": ROUTE}],
        "phases": [{"name": "p", "duration": "60s", "concurrency": 8, "alpha": 0.8}],
    }
    base.update(over)
    return parse_scenario(base)


def samples(text):
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def families(text):
    return {(f.name, f.type) for f in text_string_to_metric_families(text)}


def test_an_sglang_scenario_renders_the_fixtures_families_and_labels_and_nothing_of_vllm():
    simulator = Simulator(sglang(), seed=1)
    simulator.advance_to(30.0)
    text = simulator.render()
    _, real = polls(fixture("sglang", "eagle3-load.prom"))[3]
    # The real payload also carries the per-token ITL histogram, which specwatch does not read.
    assert families(text) == families(real) - {("sglang:inter_token_latency_seconds", "histogram")}
    label_sets = {tuple(sorted(dict(labels))) for _, labels in samples(real)}
    assert {tuple(sorted(dict(labels))) for _, labels in samples(text)} <= label_sets
    assert "vllm:" not in text and "_created" not in text and "process_" not in text


def test_specwatch_reads_the_simulated_sglang_payload_with_its_sglang_schema():
    simulator = Simulator(sglang(), seed=1)
    simulator.advance_to(30.0)
    engine = simulator.routes[ROUTE].engines[0]
    (snap,) = Grouping().parse(simulator.render(), t=30.0, target="s")
    assert (snap.engine, snap.route, snap.spec_present, snap.configured_k) == ("sglang", ROUTE, True, 3)
    assert snap.gauges[Gauge.ACCEPTANCE_RATE] == engine.sglang.accept_rate
    assert snap.gauges[Gauge.ACCEPTANCE_LENGTH] == engine.sglang.accept_length
    counters = {key.counter: v for key, v in snap.counters.items()}
    assert counters[Counter.DRAFTS] == engine.sglang.verify_calls > 0
    assert counters[Counter.GEN] == engine.sglang.generation_tokens


def test_the_tokenizer_counts_a_request_when_it_finishes_one_verify_call_per_decode_step():
    simulator = Simulator(sglang(), seed=2)
    simulator.advance_to(20.0)
    engine = simulator.routes[ROUTE].engines[0]
    log = engine.sglang
    in_flight = engine.running
    # Every generated token is counted once its request finished: the running ones are not yet.
    assert log.generation_tokens == engine.counters.generation_tokens - sum(r.generated for r in in_flight)
    # A request's verify steps are its decode steps: one per step, each emitting 1..K+1 tokens.
    assert log.requests > 0
    assert log.generation_tokens - log.requests <= (3 + 1) * log.verify_calls
    assert log.generation_tokens - log.requests >= log.verify_calls


def test_the_scheduler_sets_its_acceptance_gauges_from_the_batches_since_its_last_log():
    simulator = Simulator(sglang(), seed=2)
    engine = simulator.routes[ROUTE].engines[0]
    while engine.sglang.accept_length == 0.0:
        engine.step() if engine.busy else simulator.advance_to(simulator.now + 0.1)
    log = engine.sglang
    assert log.num_steps == 3.0
    # accept_length = (accepted + verify) / verify, accept_rate = accepted / drafted over one log's batches.
    assert log.accept_length - 1.0 == pytest.approx(3 * log.accept_rate)
    assert 1.0 < log.accept_length < 4.0
    assert SGLANG_DECODE_LOG_INTERVAL > 1


def test_adaptive_bands_need_the_largest_candidate_steps_started():
    with pytest.raises(ScenarioError) as bad:
        sglang(speculative_config={"num_speculative_tokens": 3, "speculative_adaptive": True})
    assert bad.value.key == "num_speculative_tokens"


def test_a_vllm_scenario_stating_sglangs_adaptive_option_runs_no_bands():
    scenario = parse_scenario(
        {
            "num_speculative_tokens": 7,
            "speculative_config": {"num_speculative_tokens": 7, "speculative_adaptive": True},
            "phases": [{"duration": "10s", "concurrency": 4, "alpha": 0.8}],
        }
    )
    assert scenario.bands == ()


def test_each_band_runs_its_own_steps_and_the_batch_crossing_a_band_edge_switches_them():
    scenario = load_scenario("sglang-adaptive-bands")
    expected = {int(low): k for low, k in scenario.expected["controller"]["band_steps"].items()}
    simulator = Simulator(scenario, seed=3)
    engine = simulator.routes[ROUTE].engines[0]
    steps_seen = {}
    for phase in scenario.phases:
        simulator.advance_to(phase.end - 1.0)
        batch = engine.num_running
        band = max(i for i, b in enumerate(SGLANG_BANDS) if b.low <= batch)
        steps_seen[SGLANG_BANDS[band].low] = engine.sglang.num_steps
    assert steps_seen == expected
    assert len(set(steps_seen.values())) > 1, "the crossing moved the steps"


def test_a_band_steps_down_past_its_hysteresis_when_its_acceptance_falls_and_stays():
    scenario = sglang(
        num_speculative_tokens=7,
        speculative_config={"num_speculative_tokens": 7, "speculative_adaptive": True},
        phases=[
            {"name": "easy", "duration": "60s", "concurrency": 8, "alpha": 0.95},
            {"name": "hard", "duration": "60s", "concurrency": 8, "alpha": 0.4},
        ],
    )
    simulator = Simulator(scenario, seed=4)
    engine = simulator.routes[ROUTE].engines[0]
    simulator.advance_to(59.0)
    assert engine.band_step[0] == 2  # the started 7 steps, kept: nearly every draft is accepted
    seen = set()
    for t in range(90, 120, 3):
        simulator.advance_to(float(t))
        seen.add(engine.band_step[0])
    # Acceptance length about 1.6: under 3 + 1/2 - 1/4 at 7 steps, not under 1 + 1/2 - 1/4 at 3.
    assert seen == {1}
