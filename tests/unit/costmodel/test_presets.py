"""Hardware and model presets: the shapes reproduce the vendors' published parameter counts, the
config.json parser handles each family's keys, and `memory` says when a configuration does not fit.

Published totals (each model card on the Hugging Face hub; the URLs are in MODEL_SOURCES and in
docs/costmodel.md). Vendors differ on whether "active" counts the input embedding, so each row
says which convention its figure uses.
"""

from __future__ import annotations

import argparse
import io
import json

import pytest

from specwatch import costmodel as cmod
from specwatch import lesson
from specwatch.costmodel import HARDWARE_PRESETS, MODEL_HF_CONFIGS, MODEL_PRESETS, MODEL_SOURCES

# name: (published total, published active, active counts the embedding, relative tolerance)
PUBLISHED = {
    "deepseek-v3": (671e9, 37e9, False, 0.02),  # 671B total (MTP's 14B apart), 37B activated
    "deepseek-r1": (671e9, 37e9, False, 0.02),
    "gpt-oss-120b": (116.8e9, 5.1e9, False, 0.02),  # OpenAI model card: 116.8B total, 5.1B active
    "gpt-oss-20b": (20.9e9, 3.6e9, False, 0.02),  # 20.9B total, 3.6B active
    "qwen3-235b-a22b": (235e9, 22e9, True, 0.02),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, True, 0.03),
    # Qwen3-Next: the safetensors total is 79,674,391,296; active 3,874,929,408 (embedding included)
    "qwen3-next-80b-a3b": (79.674e9, 3.875e9, True, 0.02),
    "llama-4-scout-17b-16e": (109e9, 17e9, True, 0.02),  # Meta's 109B includes the vision encoder
    "llama-4-maverick-17b-128e": (400e9, 17e9, True, 0.02),
    # GLM-4.5: "355B total, 32B active"; the rounded 32B sits 2.7 % under the exact sum of the shapes
    "glm-4.5": (355e9, 32e9, False, 0.03),
    "glm-4.5-air": (106e9, None, False, 0.02),  # the card's 12B active is a rounded 12.8B
    "qwen3-8b": (8.19e9, None, False, 0.01),
    "qwen3-32b": (32.8e9, None, False, 0.01),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_total_and_active_params_match_the_published_counts(name):
    total, active, with_embedding, tol = PUBLISHED[name]
    spec = MODEL_PRESETS[name]
    assert spec.total_params == pytest.approx(total, rel=tol)
    if active is not None:
        measured = spec.active_params + (spec.embedding_params if with_embedding else 0.0)
        assert measured == pytest.approx(active, rel=tol)


def test_every_model_and_hardware_preset_names_its_source():
    assert set(MODEL_SOURCES) == set(MODEL_PRESETS) == set(MODEL_HF_CONFIGS)
    assert all(
        url.startswith("https://huggingface.co/") and url.endswith("config.json") for url in MODEL_SOURCES.values()
    )
    for name in ("b200", "h20", "mi325x", "l4"):
        hw = HARDWARE_PRESETS[name]
        assert hw.source and hw.memory_bytes and hw.flops["bf16"] < hw.flops["fp8"]


def test_new_hardware_presets_have_the_published_bandwidth_memory_and_dense_flops():
    expected = {  # name: (B/s, bf16 dense FLOP/s, bytes)
        "b200": (7.7e12, 2.25e15, 180e9),
        "h20": (4.0e12, 1.48e14, 96e9),
        "mi325x": (6.0e12, 1.3074e15, 256e9),
        "l4": (3.0e11, 1.21e14, 24e9),
    }
    for name, (bw, flops, memory) in expected.items():
        hw = HARDWARE_PRESETS[name]
        assert (hw.bandwidth_bytes_per_second, hw.flops["bf16"], hw.memory_bytes) == pytest.approx((bw, flops, memory))
    # The H20's knee (~37 tokens per step in bf16) is the lowest of all presets: speculation loses early.
    knees = {n: hw.flops["bf16"] / hw.bandwidth_bytes_per_second for n, hw in HARDWARE_PRESETS.items()}
    assert min(knees, key=knees.__getitem__) == "h20" and knees["h20"] == pytest.approx(37, abs=1)


def test_deepseek_mla_kv_cache_is_the_compressed_latent_and_mtp_is_counted_apart():
    ds = MODEL_PRESETS["deepseek-v3"]
    assert ds.kv_bytes_per_token_bf16 == 61 * (512 + 64) * 2  # kv_lora_rank + rope dim per layer
    assert (ds.moe_layers, ds.num_experts, ds.experts_per_token, ds.mtp_layers) == (58, 256, 8, 1)


def test_gpt_oss_sliding_window_layers_hold_no_per_token_kv():
    oss = MODEL_PRESETS["gpt-oss-120b"]
    assert oss.kv_layers == 18  # every other layer is sliding-window (128 tokens)
    assert oss.kv_bytes_per_token_bf16 == 18 * 2 * 8 * 64 * 2
    assert cmod.draft_head_kv_bytes_per_token(oss) == 2 * 8 * 64 * 2


def test_qwen3_next_linear_attention_layers_stream_weights_but_hold_no_per_token_kv():
    nxt = MODEL_PRESETS["qwen3-next-80b-a3b"]
    assert nxt.kv_layers == 12 and nxt.kv_bytes_per_token_bf16 == 12 * 2 * 2 * 256 * 2
    # layer_types spells the same pattern as full_attention_interval
    cfg = dict(MODEL_HF_CONFIGS["qwen3-next-80b-a3b"])
    cfg["layer_types"] = (["linear_attention"] * 3 + ["full_attention"]) * 12
    del cfg["full_attention_interval"]
    assert cmod.model_spec_from_hf_config(cfg).total_params == nxt.total_params
    del cfg["linear_num_value_heads"]
    with pytest.raises(cmod.CostModelError, match="linear_num_value_heads"):
        cmod.model_spec_from_hf_config(cfg)


def test_llama4_interleaved_moe_has_dense_layers_with_the_mlp_size_and_one_shared_expert():
    scout, maverick = MODEL_PRESETS["llama-4-scout-17b-16e"], MODEL_PRESETS["llama-4-maverick-17b-128e"]
    assert (scout.moe_layers, maverick.moe_layers) == (48, 24)
    assert maverick.intermediate_size == 16384 and maverick.expert_params == 3 * 5120 * 8192
    # Same active path (attention + shared + one routed expert per MoE layer, dense MLP elsewhere)
    assert scout.active_params == pytest.approx(maverick.active_params, rel=0.01)


def test_an_explicit_moe_layers_list_wins_over_the_interleave_step():
    cfg = json.loads(json.dumps(MODEL_HF_CONFIGS["llama-4-maverick-17b-128e"]))
    cfg["text_config"]["moe_layers"] = list(range(1, 48, 2))
    assert cmod.model_spec_from_hf_config(cfg).moe_layers == 24


# ---- memory: does the configuration fit? -----------------------------------------------------------


def run_memory(argv: list[str]) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="specwatch")
    lesson.add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["memory", *argv])
    out = io.StringIO()
    return args.func(args, out=out), out.getvalue()


def test_memory_says_deepseek_v3_fp8_does_not_fit_eight_h100s_and_exits_1():
    rc, out = run_memory(["--model", "deepseek-v3", "--dtype", "fp8", "--tp", "8", "--hardware", "h100-sxm"])
    assert rc == 1
    assert "target alone: DOES NOT FIT: needs 682.09 GB of 576.00 GB" in out


def test_memory_says_deepseek_v3_fp8_fits_eight_h200s_and_exits_0():
    rc, out = run_memory(
        ["--model", "deepseek-v3", "--dtype", "fp8", "--tp", "8", "--hardware", "h200", "--format", "json"]
    )
    rep = json.loads(out)
    assert rc == 0
    assert all(row["fits"] for row in rep["fit"]["configurations"].values())
    assert rep["fit"]["budget_gb"] == pytest.approx(141 * 8 * 0.9)


def test_memory_flags_only_the_draft_model_when_the_head_fits_and_the_draft_model_does_not():
    # Llama-3.1-8B bf16 on one L4 (24 GB x 0.9 = 21.6 GB): 16.06 GB weights + 4 x 2048 x 128 KiB KV.
    rc, out = run_memory(
        [
            "--model",
            "llama-3.1-8b",
            "--dtype",
            "bf16",
            "--tp",
            "1",
            "--hardware",
            "l4",
            "--concurrency",
            "4",
            "--draft-model",
            "llama-3.2-3b",
            "--format",
            "json",
        ]
    )
    rows = json.loads(out)["fit"]["configurations"]
    assert rc == 1
    assert rows["target_alone"]["fits"] and rows["with_eagle3_head"]["fits"]
    assert not rows["with_draft_model"]["fits"]


def test_memory_with_custom_hardware_of_unknown_memory_does_not_claim_a_fit():
    rc, out = run_memory(["--model", "llama-3.1-8b", "--bandwidth", "2e12", "--flops", "3e14", "--format", "json"])
    assert rc == 0 and json.loads(out)["fit"] is None
