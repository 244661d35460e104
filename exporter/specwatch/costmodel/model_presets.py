"""The model presets: Hugging Face config.json excerpts of common targets and drafts, where each
comes from, the ModelSpecs built from them, and model_from (config.json, preset or bare count).
The numbers are data, not code: the table is in docs/costmodel.md ("Model presets").
"""

from __future__ import annotations

from collections.abc import Mapping

from specwatch.costmodel.errors import CostModelError
from specwatch.costmodel.models import ModelSpec, model_spec_from_hf_config, model_spec_from_params


def _llama(
    h: int, inter: int, layers: int, heads: int, kv: int, vocab: int, tied: bool = False, head_dim: int | None = None
) -> dict[str, object]:
    d: dict[str, object] = {
        "hidden_size": h,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
    }
    if head_dim:
        d["head_dim"] = head_dim
    return d


def _alternating(layers: int, first: str, second: str) -> list[str]:
    return [first if i % 2 == 0 else second for i in range(layers)]


#: HF config.json excerpts (the keys the model reads) of common targets and drafts. Values as
#: published in each model's config.json on the Hugging Face hub; MODEL_SOURCES names each one.
MODEL_HF_CONFIGS: dict[str, dict[str, object]] = {
    "llama-3.1-8b": _llama(4096, 14336, 32, 32, 8, 128256),
    "llama-3.1-70b": _llama(8192, 28672, 80, 64, 8, 128256),
    "llama-3.3-70b": _llama(8192, 28672, 80, 64, 8, 128256),
    "llama-3.2-1b": _llama(2048, 8192, 16, 32, 8, 128256, tied=True, head_dim=64),
    "llama-3.2-3b": _llama(3072, 8192, 28, 24, 8, 128256, tied=True, head_dim=128),
    "qwen2.5-7b": _llama(3584, 18944, 28, 28, 4, 152064),
    "qwen2.5-72b": _llama(8192, 29568, 80, 64, 8, 152064),
    "qwen3-8b": _llama(4096, 12288, 36, 32, 8, 151936, head_dim=128),
    "qwen3-32b": _llama(5120, 25600, 64, 64, 8, 151936, head_dim=128),
    "qwen3-30b-a3b": {
        **_llama(2048, 6144, 48, 32, 4, 151936, head_dim=128),
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
    },
    "qwen3-235b-a22b": {
        **_llama(4096, 12288, 94, 64, 4, 151936, head_dim=128),
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 1536,
    },
    "qwen3-next-80b-a3b": {
        **_llama(2048, 5120, 48, 16, 2, 151936, head_dim=256),
        "model_type": "qwen3_next",
        "full_attention_interval": 4,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
    },
    "deepseek-v3": {
        **_llama(7168, 18432, 61, 128, 128, 129280),
        "model_type": "deepseek_v3",
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 2048,
        "n_shared_experts": 1,
        "first_k_dense_replace": 3,
        "moe_layer_freq": 1,
        "num_nextn_predict_layers": 1,
    },
    "gpt-oss-20b": {
        **_llama(2880, 2880, 24, 64, 8, 201088, head_dim=64),
        "model_type": "gpt_oss",
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "experts_per_token": 4,
        "sliding_window": 128,
        "layer_types": _alternating(24, "sliding_attention", "full_attention"),
    },
    "gpt-oss-120b": {
        **_llama(2880, 2880, 36, 64, 8, 201088, head_dim=64),
        "model_type": "gpt_oss",
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
        "experts_per_token": 4,
        "sliding_window": 128,
        "layer_types": _alternating(36, "sliding_attention", "full_attention"),
    },
    "llama-4-scout-17b-16e": {
        "text_config": {
            **_llama(5120, 8192, 48, 40, 8, 202048, head_dim=128),
            "model_type": "llama4_text",
            "intermediate_size_mlp": 16384,
            "num_local_experts": 16,
            "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 1,
        }
    },
    "llama-4-maverick-17b-128e": {
        "text_config": {
            **_llama(5120, 8192, 48, 40, 8, 202048, head_dim=128),
            "model_type": "llama4_text",
            "intermediate_size_mlp": 16384,
            "num_local_experts": 128,
            "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 2,
        }
    },
    "glm-4.5": {
        **_llama(5120, 12288, 92, 96, 8, 151552, head_dim=128),
        "model_type": "glm4_moe",
        "n_routed_experts": 160,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 1536,
        "n_shared_experts": 1,
        "first_k_dense_replace": 3,
        "num_nextn_predict_layers": 1,
    },
    "glm-4.5-air": {
        **_llama(4096, 10944, 46, 96, 8, 151552, head_dim=128),
        "model_type": "glm4_moe",
        "n_routed_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 1408,
        "n_shared_experts": 1,
        "first_k_dense_replace": 1,
        "num_nextn_predict_layers": 1,
    },
    "mixtral-8x7b": {**_llama(4096, 14336, 32, 32, 8, 32000), "num_local_experts": 8, "num_experts_per_tok": 2},
}
# DeepSeek-R1 is DeepSeek-V3's architecture with other weights: the same config.json shape.
MODEL_HF_CONFIGS["deepseek-r1"] = MODEL_HF_CONFIGS["deepseek-v3"]

_HF = "https://huggingface.co/"
#: Where each preset's shape comes from (the table in docs/costmodel.md repeats it).
MODEL_SOURCES: dict[str, str] = {
    "llama-3.1-8b": _HF + "meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json",
    "llama-3.1-70b": _HF + "meta-llama/Llama-3.1-70B-Instruct/blob/main/config.json",
    "llama-3.3-70b": _HF + "meta-llama/Llama-3.3-70B-Instruct/blob/main/config.json",
    "llama-3.2-1b": _HF + "meta-llama/Llama-3.2-1B-Instruct/blob/main/config.json",
    "llama-3.2-3b": _HF + "meta-llama/Llama-3.2-3B-Instruct/blob/main/config.json",
    "qwen2.5-7b": _HF + "Qwen/Qwen2.5-7B-Instruct/blob/main/config.json",
    "qwen2.5-72b": _HF + "Qwen/Qwen2.5-72B-Instruct/blob/main/config.json",
    "qwen3-8b": _HF + "Qwen/Qwen3-8B/blob/main/config.json",
    "qwen3-32b": _HF + "Qwen/Qwen3-32B/blob/main/config.json",
    "qwen3-30b-a3b": _HF + "Qwen/Qwen3-30B-A3B/blob/main/config.json",
    "qwen3-235b-a22b": _HF + "Qwen/Qwen3-235B-A22B/blob/main/config.json",
    "qwen3-next-80b-a3b": _HF + "Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json",
    "deepseek-v3": _HF + "deepseek-ai/DeepSeek-V3/blob/main/config.json",
    "deepseek-r1": _HF + "deepseek-ai/DeepSeek-R1/blob/main/config.json",
    "gpt-oss-20b": _HF + "openai/gpt-oss-20b/blob/main/config.json",
    "gpt-oss-120b": _HF + "openai/gpt-oss-120b/blob/main/config.json",
    "llama-4-scout-17b-16e": _HF + "meta-llama/Llama-4-Scout-17B-16E-Instruct/blob/main/config.json",
    "llama-4-maverick-17b-128e": _HF + "meta-llama/Llama-4-Maverick-17B-128E-Instruct/blob/main/config.json",
    "glm-4.5": _HF + "zai-org/GLM-4.5/blob/main/config.json",
    "glm-4.5-air": _HF + "zai-org/GLM-4.5-Air/blob/main/config.json",
    "mixtral-8x7b": _HF + "mistralai/Mixtral-8x7B-Instruct-v0.1/blob/main/config.json",
}

MODEL_PRESETS: dict[str, ModelSpec] = {
    name: model_spec_from_hf_config(cfg, name=name) for name, cfg in MODEL_HF_CONFIGS.items()
}

#: The model assumed when nothing names one.
DEFAULT_MODEL = "llama-3.1-8b"


def model_from(
    preset: str | None = None,
    hf_config: Mapping[str, object] | None = None,
    params: float | None = None,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
) -> ModelSpec:
    """The target: a config.json wins over a preset, a preset over a bare parameter count."""
    if hf_config is not None:
        return model_spec_from_hf_config(hf_config)
    if preset:
        if preset not in MODEL_PRESETS:
            raise CostModelError(
                "model.preset", f"model: unknown preset '{preset}' (one of {', '.join(MODEL_PRESETS)})"
            )
        return MODEL_PRESETS[preset]
    if params:
        return model_spec_from_params(params, layers, kv_heads, head_dim)
    return MODEL_PRESETS[DEFAULT_MODEL]
