"""One default world: the lesson's calculators price the sidecar's default target (config/result.py)
with today's vLLM engine prior, say so in their header and JSON, and a partial override never
inherits another model's tensor parallel or dtype: what the flags leave out is printed as assumed."""

from __future__ import annotations

import json

import pytest

from specwatch import costmodel as cmod
from specwatch.config import Config
from specwatch.config.cost_model import cost_model_from_config
from specwatch.lesson.options import DEFAULT_TARGET
from tests.unit.lesson.test_lesson import run

BREAKEVEN = ["breakeven", "--k", "3", "--batch", "1,64"]


def test_the_calculators_default_target_is_the_sidecars():
    sidecar = cost_model_from_config(Config())
    assert (DEFAULT_TARGET.model, DEFAULT_TARGET.dtype, DEFAULT_TARGET.tensor_parallel) == (
        sidecar.model.name,
        sidecar.dtype,
        sidecar.tensor_parallel,
    )
    assert (DEFAULT_TARGET.hardware, DEFAULT_TARGET.context_tokens) == (
        sidecar.hardware.name,
        int(sidecar.context_tokens),
    )
    doc = json.loads(run([*BREAKEVEN, "--format", "json"])[1])
    assert doc["target"]["model"] == sidecar.model.name and doc["target"]["tensor_parallel"] == 1
    # Nothing given is the sidecar's assumed setup: the same widened interval (config_is_default).
    assert doc["target"]["setup_assumed"] is sidecar.setup_assumed is True


def test_the_calculators_default_to_the_vllm_v1_engine_prior_and_keep_generic_on_request():
    vllm = cmod.prior_for("vllm")
    doc = json.loads(run([*BREAKEVEN, "--format", "json"])[1])
    assert doc["target"]["engine_prior"] == vllm.engine == "vllm-v1"
    assert doc["assumptions"]["spec_step_fixed_ms"] == round(vllm.verify_overhead_seconds * 1e3, 4)
    generic = json.loads(run([*BREAKEVEN, "--engine", "generic", "--format", "json"])[1])
    assert generic["target"]["engine_prior"] == "generic" and "engine_prior" not in generic["target"]["assumed"]
    assert generic["assumptions"]["spec_step_fixed_ms"] == round(cmod.prior_for(None).verify_overhead_seconds * 1e3, 4)


@pytest.mark.parametrize(
    "command",
    [
        ["breakeven", "--k", "3", "--batch", "1,64"],
        ["simulate", "--alphas", "0.5", "--k", "3", "--batch", "1", "--tokens", "16", "--requests", "2"],
        ["plan"],
        ["memory"],
    ],
    ids=["breakeven", "simulate", "plan", "memory"],
)
def test_every_calculator_states_the_target_and_the_engine_prior_in_its_header(command):
    rc, out = run(command)
    assert rc in (0, 1)  # memory exits 1 when a configuration does not fit
    header = "\n".join(out.splitlines()[:4])
    assert "llama-3.1-8b" in header and "vllm-v1" in header
    assert "assumed" in header and "tensor_parallel" in header.replace("TP1", "tensor_parallel")


@pytest.mark.parametrize(
    "override",
    [["--model", "llama-3.3-70b"], ["--params", "70e9"], ["--hardware", "h200"], ["--model-config", "CONFIG"]],
    ids=["model", "params", "hardware", "model-config"],
)
def test_a_partial_override_prices_tp_1_and_bf16_and_says_they_are_assumed(override, tmp_path):
    if override[-1] == "CONFIG":
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps(cmod.MODEL_HF_CONFIGS["llama-3.3-70b"]))
        override = [override[0], str(cfg)]
    _rc, table = run([*BREAKEVEN, *override])
    assert "tensor_parallel 1 (assumed)" in table and "dtype bf16 (assumed)" in table
    doc = json.loads(run([*BREAKEVEN, *override, "--format", "json"])[1])
    assert doc["target"]["tensor_parallel"] == 1 and doc["target"]["dtype"] == "bf16"
    assert {"tensor_parallel", "dtype", "engine_prior"} <= set(doc["target"]["assumed"])
    # Something was given: not the sidecar's assumed setup, so no widened interval.
    assert doc["target"]["setup_assumed"] is False


def test_the_issue_example_prices_tp_1_for_llama_31_8b():
    _rc, table = run(["breakeven", "--model", "llama-3.1-8b", "--k", "3", "--batch", "1,64"])
    assert "TP1" in table.splitlines()[0] and "tensor_parallel 1 (assumed)" in table
    assert "model llama-3.1-8b," in table  # given: not marked assumed
