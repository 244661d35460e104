"""`specwatch replay` on recordings built here, with expected values computed independently."""

import json
import math

import pytest

from specwatch.config import from_mapping
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from support.agreement import WINDOW_VALUES
from support.cli import run_cli
from support.vllm_payloads import FakeVllm

POLL = 5.0
CONFIG = {"poll_interval": "5s", "windows": ["30s", "1m"], "decision": {"min_drafts": 100, "hold": 2}}
PATTERN = [4, 3, 2, 1, 0, 4, 3, 2]  # accepted tokens of the 8 requests of each step (K=4)


def run_phase(fake, polls, t0, lines, *, engines=(0,), steps_per_poll=10, batch=8, pattern=PATTERN, itl=0.02):
    t = t0
    for _ in range(polls):
        for _ in range(steps_per_poll):
            for e in engines:
                fake.step(e, batch=batch, accepted_per_request=pattern, itl_seconds=itl)
        t += POLL
        lines.append(json.dumps({"t": t, "target": "vllm", "text": fake.text()}))
    return t


def expected_for(pattern, batch, k=4, itl=0.02):
    requests = [pattern[j % len(pattern)] for j in range(batch)]
    accepted = sum(requests)
    # ITL 0.02 s falls in (0.01, 0.025]: linear interpolation from 0.01, as histogram_quantile does.
    return {
        "acceptance_rate": accepted / (batch * k),
        "mean_acceptance_length": 1 + accepted / batch,
        "draft_length": float(k),
        "batch_size": float(batch),
        "itl_p50_seconds": 0.01 + 0.015 * 0.5,
        "itl_p99_seconds": 0.01 + 0.015 * 0.99,
        "position_rates": [sum(1 for a in requests if a > i) / batch for i in range(k)],
        "itl_per_token_mean_seconds": batch * itl / (accepted + batch),
    }


def evaluations(lines, config=CONFIG):
    return list(replay(from_mapping(config), lines))


def assert_close(record, expected, keys=WINDOW_VALUES):
    for key in keys:
        assert record[key] == pytest.approx(expected[key], abs=1e-9), key


def test_constant_rate_recording_reproduces_alpha_tau_k_batch_and_itl_quantiles():
    lines = []
    run_phase(FakeVllm(), 14, 1000.0, lines)
    out = evaluations(lines)
    last = {r["window"]: r for r in out if r["t"] == out[-1]["t"]}
    expected = expected_for(PATTERN, 8)
    for window in ("30s", "1m"):
        assert_close(last[window], expected)
        assert last[window]["drafts"] == (6 if window == "30s" else 12) * 10 * 8
        # Nothing configured: the assumed setup's interval spans 1 (costmodel/uncertainty.py).
        assert last[window]["verdict"] == "undecided" and last[window]["measurement"] is not None


def test_position_rates_and_per_token_itl_through_the_pipeline():
    lines = []
    run_phase(FakeVllm(), 8, 0.0, lines)
    pipeline = Pipeline(from_mapping(CONFIG))
    list(replay(from_mapping(CONFIG), lines, pipeline))
    evaluation = next(e for e in pipeline.evaluate(40.0) if e.stats.window == "30s")
    expected = expected_for(PATTERN, 8)
    assert list(evaluation.position_rates) == pytest.approx(expected["position_rates"], abs=1e-12)
    assert evaluation.stats.itl_per_token_mean_seconds == pytest.approx(
        expected["itl_per_token_mean_seconds"], rel=1e-12
    )
    assert sum(evaluation.position_rates) == pytest.approx(evaluation.value("mean_acceptance_length") - 1)


def test_a_vllm_restart_mid_window_keeps_the_values_and_the_verdict():
    fake = FakeVllm()
    lines = []
    t = run_phase(fake, 8, 0.0, lines)
    fake.restart()  # counters back to 0, new _created timestamps
    run_phase(fake, 8, t, lines)
    # Hardware and model stated (the same as the defaults): no learning moves the verdict, and the
    # prior's interval at the fake server's 2.0x is clear of 1, so the verdict is keep throughout.
    out = evaluations(lines, {**CONFIG, "hardware": {"preset": "h100-sxm"}, "model": {"preset": "llama-3.1-8b"}})
    expected = expected_for(PATTERN, 8)
    spanning = [r for r in out if r["window"] == "1m" and 45 <= r["t"] <= 90]
    assert spanning
    for record in spanning:
        assert_close(record, expected)
    verdicts = [r["verdict"] for r in out if r["window"] == "1m" and r["t"] >= 20]
    assert set(verdicts) == {"keep"}, verdicts
    pipeline = Pipeline(from_mapping(CONFIG))
    list(replay(from_mapping(CONFIG), lines, pipeline))
    assert pipeline.state().targets[0].resets == 1


def test_two_dp_engines_with_different_alpha_are_summed_and_batch_is_per_engine():
    fake = FakeVllm(engines=2)
    lines = []
    t = 0.0
    for _ in range(10):
        for _ in range(10):
            fake.step(0, batch=4, accepted_per_request=[4], itl_seconds=0.02)  # alpha 1.0
            fake.step(1, batch=12, accepted_per_request=[0], itl_seconds=0.02)  # alpha 0.0
        t += POLL
        lines.append(json.dumps({"t": t, "target": "vllm", "text": fake.text()}))
    last = next(r for r in evaluations(lines) if r["t"] == t and r["window"] == "30s")
    assert last["acceptance_rate"] == pytest.approx(16 / 64)  # tokens, not the mean of two ratios
    assert last["batch_size"] == pytest.approx(8.0)  # each engine runs its own batch
    assert last["mean_acceptance_length"] == pytest.approx(1 + 16 / 16)


def test_legacy_itl_schema_gives_the_same_values():
    lines = []
    run_phase(FakeVllm(schema="v1-legacy-itl"), 8, 0.0, lines)
    pipeline = Pipeline(from_mapping(CONFIG))
    out = list(replay(from_mapping(CONFIG), lines, pipeline))
    assert_close([r for r in out if r["window"] == "30s"][-1], expected_for(PATTERN, 8))
    assert pipeline.state().routes[0].schema == "v1-legacy-itl"


def test_a_target_that_loses_the_spec_families_is_judged_spec_off():
    lines = []
    t = run_phase(FakeVllm(), 8, 0.0, lines)
    off = FakeVllm(schema="nospec")  # restarted without speculative_config
    run_phase(off, 10, t, lines)
    out = evaluations(lines)
    assert [r for r in out if r["window"] == "30s"][-1]["verdict"] == "spec_off"
    assert [r for r in out if r["window"] == "30s"][-1]["acceptance_rate"] is None


def v0_payload(rate, efficiency, generation, itl_count):
    return f"""# HELP vllm:spec_decode_draft_acceptance_rate Speulative token acceptance rate.
# TYPE vllm:spec_decode_draft_acceptance_rate gauge
vllm:spec_decode_draft_acceptance_rate{{model_name="m"}} {rate}
# HELP vllm:spec_decode_efficiency Speculative decoding system efficiency.
# TYPE vllm:spec_decode_efficiency gauge
vllm:spec_decode_efficiency{{model_name="m"}} {efficiency}
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {generation * 7.0}
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{model_name="m"}} {generation}
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m"}} 6.0
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{{le="0.01",model_name="m"}} 0.0
vllm:time_per_output_token_seconds_bucket{{le="0.025",model_name="m"}} {itl_count}
vllm:time_per_output_token_seconds_bucket{{le="+Inf",model_name="m"}} {itl_count}
vllm:time_per_output_token_seconds_count{{model_name="m"}} {itl_count}
vllm:time_per_output_token_seconds_sum{{model_name="m"}} {itl_count * 0.02}
"""


def test_v0_schema_uses_the_lifetime_gauges_converted_to_v1_semantics_not_the_buggy_counters():
    a, k = 0.8, 4
    efficiency = (1 - a ** (k + 1)) / (1 - a) / (k + 1)
    lines = [
        json.dumps({"t": 5.0 * i, "target": "vllm", "text": v0_payload(a, efficiency, 100.0 * i, 50.0 * i)})
        for i in range(1, 9)
    ]
    pipeline = Pipeline(from_mapping(CONFIG))
    out = list(replay(from_mapping(CONFIG), lines, pipeline))
    last = [r for r in out if r["window"] == "30s"][-1]
    # V1 alpha = emitted prefix / draft tokens = a(1 - a^K) / (K (1 - a)) under V0's per-position rate a.
    assert last["acceptance_rate"] == pytest.approx(a * (1 - a**k) / (k * (1 - a)))
    assert last["draft_length"] == k
    assert last["batch_size"] == pytest.approx(6.0)
    assert last["itl_p50_seconds"] == pytest.approx(0.0175)
    assert pipeline.state().routes[0].schema == "v0"


def test_replay_cli_prints_one_json_line_per_evaluation_with_the_documented_keys(tmp_path):
    lines = []
    run_phase(FakeVllm(), 6, 0.0, lines)
    recording = tmp_path / "rec.jsonl"
    recording.write_text("\n".join(lines) + "\n")
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(CONFIG))
    proc = run_cli("replay", "--config", str(config), str(recording), timeout=60)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(records) == 2 * 5  # two windows, evaluations from the second poll on
    keys = {
        "t",
        "route",
        "engine",
        "window",
        "acceptance_rate",
        "mean_acceptance_length",
        "draft_length",
        "batch_size",
        "itl_p50_seconds",
        "itl_p99_seconds",
        "breakeven_acceptance_rate",
        "expected_speedup",
        "expected_speedup_lower",
        "expected_speedup_upper",
        "loss_probability",
        "recommended_draft_length",
        "verdict",
        "drafts",
        "measurement",
        "controller_gain",
        "speculation_cannot_pay",
        "recommended_config",
        "merge_into_your_speculative_config",
        "recommended_action",
        "notes",
    }
    assert all(set(r) == keys for r in records)
    assert math.isclose(records[-1]["acceptance_rate"], 19 / 32)


def test_auto_method_is_inferred_as_ngram_when_drafts_are_shorter_than_k_as_on_the_real_ngram_server():
    from support.paths import fixture_path

    files = sorted(fixture_path("vllm-cpu-real").glob("0[23]*.prom"))
    lines = [json.dumps({"t": 2.0 * i, "target": "vllm", "text": p.read_text()}) for i, p in enumerate(files)]
    config = {"poll_interval": "1s", "windows": ["10s"], "decision": {"min_drafts": 50}}
    pipeline = Pipeline(from_mapping(config))
    list(replay(from_mapping(config), lines, pipeline))
    assert pipeline.state().routes[0].method == "auto:ngram"  # n-gram proposed ~3.4 of K=4
    fixed = FakeVllm()
    lines = []
    run_phase(fixed, 4, 0.0, lines)
    pipeline = Pipeline(from_mapping(CONFIG))
    list(replay(from_mapping(CONFIG), lines, pipeline))
    assert pipeline.state().routes[0].method == "auto:eagle3"  # full-length drafts: a model-based drafter
    assert Pipeline(from_mapping({**CONFIG, "draft": {"method": "ngram"}})).config.draft.method == "ngram"


def test_replay_without_a_config_learns_the_target_names_from_the_recording(tmp_path):
    lines = []
    run_phase(FakeVllm(), 6, 0.0, lines)
    recording = tmp_path / "rec.jsonl"
    recording.write_text("\n".join(line.replace('"target": "vllm"', '"target": "pod-a"') for line in lines) + "\n")
    proc = run_cli("replay", str(recording), timeout=60)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    assert records and {r["route"] for r in records} == {"m"}
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(CONFIG))
    strict = run_cli("replay", "--config", str(config), str(recording), timeout=60)
    assert strict.returncode == 2 and "pod-a" in strict.stderr


def test_a_route_that_vanishes_while_its_target_stays_up_stops_being_served():
    from prometheus_client import generate_latest

    from specwatch.export.collector import registry_for

    a, b = FakeVllm(model_name="a"), FakeVllm(model_name="b")
    pipeline = Pipeline(from_mapping(CONFIG))
    for i in range(1, 8):
        for fake in (a, b):
            for _ in range(10):
                fake.step(0, batch=8, accepted_per_request=PATTERN, itl_seconds=0.02)
        text = a.text() + (b.text() if i < 6 else "")  # model b leaves after the 5th poll
        pipeline.ingest("vllm", 5.0 * i, text)
        pipeline.evaluate(5.0 * i)
        exposition = generate_latest(registry_for(pipeline.view)).decode()
        assert ('specwatch_acceptance_ratio{route="b"' in exposition) == (3 <= i < 6), (
            i
        )  # from the first window over the guard
        assert 'specwatch_acceptance_ratio{route="a"' in exposition or i < 3


def test_a_model_joining_a_route_matched_on_engine_adds_its_new_drafts_not_its_lifetime():
    """Route `match: {engine: "0"}` spans every model on engine 0: a model that appears with a
    long history must count from its first sighting (Prometheus's rule per series, then sum)."""
    old_timer = FakeVllm(model_name="b")
    for _ in range(1000):
        old_timer.step(0, batch=8, accepted_per_request=[0], itl_seconds=0.02)  # 8000 drafts of history
    config = {**CONFIG, "routes": [{"name": "engine0", "match": {"engine": "0"}}]}
    a = FakeVllm(model_name="a")
    lines = []
    for i in range(1, 12):
        for fake in (a, old_timer):
            for _ in range(10):
                fake.step(0, batch=8, accepted_per_request=PATTERN, itl_seconds=0.02)
        text = a.text() + (old_timer.text() if i >= 6 else "")
        lines.append(json.dumps({"t": 5.0 * i, "target": "vllm", "text": text}))
    last = [r for r in evaluations(lines, config) if r["window"] == "30s"][-1]
    assert last["drafts"] == 6 * 10 * 8 + 5 * 10 * 8  # a: six polls in the window; b: five since it appeared
    assert last["acceptance_rate"] == pytest.approx(19 / 32)
