"""What the verdicts rest on: config in, assumptions out; and the pipeline's routes through it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from specwatch.config import from_mapping
from specwatch.costmodel.engine_priors import GENERIC
from specwatch.costmodel.uncertainty import ASSUMED_SETUP_LOG_ERROR, z_for
from specwatch.export.assumptions import ASSUMED, CONFIGURED, PRESET, RouteFacts, assumptions, view_assumptions
from specwatch.export.status import status_document
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from support.views import view_of

RECORDING = Path(__file__).resolve().parents[2] / "fixtures" / "vllm-0.32-cpu" / "ngram-recording.jsonl"

SETUPS = {
    # raw config -> (hardware, model, dtype, tp) origins, setup assumed, step-time source
    "nothing configured": ({}, (ASSUMED, ASSUMED, ASSUMED, ASSUMED), True, "default"),
    "hardware and model presets": (
        {"hardware": "h200", "model": {"preset": "llama-3.1-70b"}, "tensor_parallel": 4},
        (PRESET, PRESET, ASSUMED, CONFIGURED),
        False,
        "preset",
    ),
    "the default hardware stated is no assumption": (
        {"hardware": {"preset": "h100-sxm"}, "model": {"preset": "llama-3.1-8b"}, "tensor_parallel": 1},
        (PRESET, PRESET, ASSUMED, CONFIGURED),
        False,
        "preset",
    ),
    "own bandwidth and flops, a parameter count, fp8": (
        {
            "hardware": {"preset": None, "bandwidth_bytes_per_second": 2e12, "flops": 5e14},
            "model": {"params": 7e9, "dtype": "fp8"},
        },
        (CONFIGURED, CONFIGURED, CONFIGURED, ASSUMED),
        False,
        "preset",
    ),
    "the hardware alone leaves the model assumed": (
        {"hardware": "h200"},
        (PRESET, ASSUMED, ASSUMED, ASSUMED),
        False,
        "preset",
    ),
}


@pytest.mark.parametrize("case", SETUPS, ids=list(SETUPS))
def test_each_setting_says_whether_it_was_configured_a_preset_or_assumed(case):
    raw, origins, setup_assumed, step_time = SETUPS[case]
    a = assumptions(from_mapping(raw, environ={}))
    assert (a.hardware.origin, a.model.origin, a.dtype.origin, a.tensor_parallel.origin) == origins
    assert a.setup_assumed is setup_assumed
    assert a.step_time == step_time
    assert a.as_dict()["setup"]["assumed"] is setup_assumed


def test_nothing_configured_is_the_default_h100_and_llama_with_the_assumed_setups_error():
    a = assumptions(from_mapping({}, environ={}))
    assert (a.hardware.value, a.model.value) == ("h100-sxm", "llama-3.1-8b")
    assert a.prior is GENERIC and not a.engine_configured and a.learning
    assert a.model_log_error == pytest.approx(math.hypot(GENERIC.log_error, ASSUMED_SETUP_LOG_ERROR))
    lines = a.config_lines()
    assert "hardware: h100-sxm (ASSUMED)" in lines and "model: llama-3.1-8b (ASSUMED)" in lines
    assert any(
        line.startswith("engine prior per route: generic while hardware and model are assumed") for line in lines
    )


def test_a_profile_is_the_step_time_source_and_no_assumed_setup(tmp_path):
    (tmp_path / "profile.yaml").write_text("points: [[1, 0.01], [64, 0.02]]\n")
    a = assumptions(from_mapping({"profile": "profile.yaml"}, base_dir=str(tmp_path), environ={}))
    assert a.step_time == "profile" and not a.setup_assumed and not a.learning
    assert a.model_log_error == pytest.approx(GENERIC.log_error)


def _route(engine: str, schema: str = "v1", **kw: object) -> RouteFacts:
    base: dict[str, object] = {
        "route": "r",
        "target": "vllm",
        "engine": engine,
        "schema": schema,
        "step_time": "preset",
        "baseline": "none",
        "model_log_error": 0.3,
    }
    return RouteFacts(**{**base, **kw})


ENGINES = {
    # case: (engine:, detected engine, schema, configured prior, detected engine's prior,
    #        the route's prior with hardware stated, with nothing stated, mismatch)
    "unconfigured vLLM: its own prior": (None, "vllm", "v1", "generic", "vllm-v1", "vllm-v1", "generic", False),
    "unconfigured SGLang": (None, "sglang", "v1", "generic", "sglang", "sglang", "generic", False),
    "vLLM under Ray Serve": (None, "ray-vllm", "v1", "generic", "vllm-v1", "vllm-v1", "generic", False),
    "vLLM V0: the pooled fit": (None, "vllm", "v0", "generic", "vllm-v0", "vllm-v0", "generic", False),
    "llama.cpp: the pooled fit": (None, "llamacpp", "v1", "generic", "llamacpp", "llamacpp", "generic", False),
    "an engine without a prior": (None, "lmdeploy", "v1", "generic", "generic", "generic", "generic", False),
    "engine pinned to the detected one": (
        {"name": "vllm", "version": "0.10"},
        "vllm",
        "v1",
        "vllm-v1",
        "vllm-v1",
        "vllm-v1",
        "vllm-v1",
        False,
    ),
    "engine pinned to another than detected": (
        {"name": "sglang"},
        "vllm",
        "v1",
        "sglang",
        "vllm-v1",
        "sglang",
        "sglang",
        True,
    ),
}


@pytest.mark.parametrize("case", ENGINES, ids=list(ENGINES))
def test_each_route_uses_its_detected_engines_prior_unless_engine_is_configured_or_the_setup_assumed(case):
    engine, detected, schema, configured, detected_prior, with_setup, assumed, mismatch = ENGINES[case]
    for raw, want in (({"model": {"preset": "llama-3.1-70b"}}, with_setup), ({}, assumed)):
        raw = {**raw, "engine": engine} if engine else raw
        a = assumptions(from_mapping(raw, environ={}), [_route(detected, schema)])
        (route,) = a.routes
        assert a.prior.engine == configured and a.engine_configured is (engine is not None)
        assert route.detected_prior.engine == detected_prior
        assert route.prior.engine == want, (case, raw)
        assert route.mismatch is mismatch
        entry = a.as_dict()["routes"][0]
        assert entry["engine_mismatch"] is mismatch and entry["engine_prior"] == want
        chosen = "configured" if engine else ("detected" if want == detected_prior else "generic_setup_assumed")
        assert entry["engine_prior_chosen"] == chosen, (case, raw)
        assert f"prior {want} (" in a.route_lines()[0]


def test_a_learned_curve_without_spec_off_steps_keeps_the_priors_split():
    a = assumptions(from_mapping({}, environ={}), [_route("vllm", step_time="learned", baseline="none")])
    assert a.routes[0].keeps_prior_split
    assert "the split is the prior's" in a.route_lines()[0]
    b = assumptions(from_mapping({}, environ={}), [_route("vllm", step_time="learned", baseline="history")])
    assert not b.routes[0].keeps_prior_split


def test_the_pipelines_routes_carry_their_learned_source_and_the_sigma_parts_of_their_interval():
    config = from_mapping({}, environ={})
    pipeline = Pipeline(config)
    records = list(replay(config, RECORDING.read_text().splitlines(), pipeline, learn_targets=True))
    state = pipeline.state()
    a = view_assumptions(view_of(state, config))
    (route,) = a.routes
    assert route.facts.engine == "vllm" and route.facts.step_time == "learned"
    assert route.facts.baseline == "none" and route.keeps_prior_split  # the recording never has spec off
    # The learned curve's residual on top of the prior's and the assumed setup's errors.
    assert route.facts.model_log_error is not None
    assert route.facts.model_log_error >= math.hypot(GENERIC.log_error, ASSUMED_SETUP_LOG_ERROR)
    # The two parts rebuild the last records' intervals.
    last = {r["window"]: r for r in records}
    z = z_for(config.decision.confidence)
    assert route.facts.sampling_log_errors
    for window, sampling in route.facts.sampling_log_errors.items():
        r = last[window]
        half = z * math.hypot(route.facts.model_log_error, sampling)
        assert r["expected_speedup_lower"] == pytest.approx(r["expected_speedup"] * math.exp(-half))
        assert r["expected_speedup_upper"] == pytest.approx(r["expected_speedup"] * math.exp(half))
    block = status_document(view_of(state, config))["assumptions"]
    assert block["setup"]["hardware"] == {"value": "h100-sxm", "origin": ASSUMED}
    assert block["routes"][0]["step_time"] == "learned"
    # nothing configured: the generic constants stand, and the route says why
    assert block["routes"][0]["engine_prior"] == "generic"
    assert block["routes"][0]["engine_prior_chosen"] == "generic_setup_assumed"
