"""Target and draft model shapes: ModelSpec, the presets, Hugging Face config.json parsing and
the bytes of weights a forward streams. Formulas and the preset list: docs/costmodel.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import CostModelError

#: Bytes per element of each weight / KV dtype.
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

#: Config key that a bad Hugging Face config.json is reported under.
HF_CONFIG_KEY = "model.config_json"


@dataclass(frozen=True)
class ModelSpec:
    """Parameter counts and KV size of a transformer, independent of dtype.

    ``dense_params``: parameters every token reads (attention, dense MLPs, shared experts,
    routers, LM head). ``expert_params``: parameters of ONE routed expert in ONE MoE layer;
    ``moe_layers`` × ``num_experts`` of them exist, ``experts_per_token`` are used per token.
    """

    name: str
    dense_params: float
    layers: int
    kv_bytes_per_token_bf16: float  # all layers, K and V, at 2 bytes per element
    hidden_size: int | None = None
    intermediate_size: int | None = None
    vocab_size: int | None = None
    num_attention_heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    lm_head_params: float = 0.0  # included in dense_params; kept bf16 in quantised checkpoints
    embedding_params: float = 0.0  # not streamed per step (only B rows are gathered)
    moe_layers: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    expert_params: float = 0.0
    attention_params_per_layer: float = 0.0
    mlp_params_per_layer: float = 0.0  # dense MLP of a dense layer
    # Layers whose KV cache grows with the context (full attention); None: all ``layers``.
    # Sliding-window and linear-attention layers hold a bounded state per request instead.
    kv_layers: int | None = None
    mtp_layers: int = 0  # multi-token-prediction layers shipped with the checkpoint (not in the totals)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.moe_layers > 0

    @property
    def active_params(self) -> float:
        """Parameters one token multiplies through (for FLOPs)."""
        return self.dense_params + self.moe_layers * self.experts_per_token * self.expert_params

    @property
    def total_params(self) -> float:
        return self.dense_params + self.moe_layers * self.num_experts * self.expert_params + self.embedding_params

    def experts_touched(self, tokens: float) -> float:
        """Expected distinct experts per MoE layer hit by ``tokens`` tokens (uniform routing)."""
        if not self.is_moe:
            return 0.0
        e, k = self.num_experts, self.experts_per_token
        return float(e * (1.0 - (1.0 - k / e) ** max(tokens, 1.0)))

    def streamed_params(self, tokens: float) -> float:
        """Weights read from HBM by one forward over ``tokens`` tokens."""
        return self.dense_params + self.moe_layers * self.experts_touched(tokens) * self.expert_params


def _first(hf: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    """The first of ``keys`` present and not null (config.json spellings differ by family)."""
    for k in keys:
        if k in hf and hf[k] is not None:
            return hf[k]
    return default


def _invalid(message: str) -> CostModelError:
    return CostModelError(HF_CONFIG_KEY, message)


def _layer_kinds(hf: Mapping[str, Any], layers: int) -> list[str]:
    """Attention kind of each layer: "full", "sliding" (KV bounded by a window) or "linear"
    (a recurrent state per request, no per-token KV: Gated DeltaNet in Qwen3-Next)."""
    types = hf.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        kinds = []
        for t in types:
            text = str(t)
            kinds.append("linear" if "linear" in text else "sliding" if ("sliding" in text or "chunk" in text)
                         else "full")
        return kinds
    interval = hf.get("full_attention_interval")
    if isinstance(interval, int) and interval > 1 and hf.get("linear_num_value_heads"):
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
    return ["full"] * layers


def _linear_attention_params(hf: Mapping[str, Any], h: int) -> float:
    """One Gated DeltaNet layer (Qwen3-Next): in_proj_qkvz, in_proj_ba, the causal conv over q/k/v,
    out_proj. Norms, A_log and dt_bias are a few thousand parameters and left out."""
    nk = int(_first(hf, "linear_num_key_heads", default=0) or 0)
    nv = int(_first(hf, "linear_num_value_heads", default=0) or 0)
    dk = int(_first(hf, "linear_key_head_dim", default=0) or 0)
    dv = int(_first(hf, "linear_value_head_dim", default=0) or 0)
    if not (nk and nv and dk and dv):
        raise _invalid("model config: linear_attention layers need 'linear_num_key_heads', "
                       "'linear_num_value_heads', 'linear_key_head_dim' and 'linear_value_head_dim'")
    kernel = int(_first(hf, "linear_conv_kernel_dim", default=4) or 4)
    key_dim, value_dim = nk * dk, nv * dv
    return float(h * (2 * key_dim + 2 * value_dim) + h * 2 * nv + (2 * key_dim + value_dim) * kernel + value_dim * h)


def _moe_layer_indices(hf: Mapping[str, Any], layers: int) -> list[int]:
    """Which layers carry routed experts, from whichever key the family uses:
    DeepSeek/GLM ``first_k_dense_replace`` + ``moe_layer_freq``; Qwen ``decoder_sparse_step`` +
    ``mlp_only_layers``; Llama 4 ``interleave_moe_layer_step`` (or an explicit ``moe_layers``)."""
    explicit = hf.get("moe_layers")
    if isinstance(explicit, list) and explicit and all(isinstance(i, int) for i in explicit):
        return sorted({i for i in explicit if 0 <= i < layers})
    first_dense = int(_first(hf, "first_k_dense_replace", default=0) or 0)
    freq = int(_first(hf, "moe_layer_freq", default=1) or 1)
    step = int(_first(hf, "interleave_moe_layer_step", "decoder_sparse_step", default=1) or 1)
    mlp_only = set(hf.get("mlp_only_layers") or [])
    return [i for i in range(layers)
            if i >= first_dense and (i - first_dense) % freq == 0 and (i + 1) % step == 0 and i not in mlp_only]


def model_spec_from_hf_config(hf: Mapping[str, Any], name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face ``config.json`` dict.

    Shapes handled (formulas and assumptions in docs/costmodel.md, "Model presets"): dense GQA;
    MLA (DeepSeek-V2/V3: ``kv_lora_rank``, ``q_lora_rank``); routed experts under every family's
    keys (``n_routed_experts`` / ``num_local_experts`` / ``num_experts``, top-k as
    ``num_experts_per_tok`` or ``experts_per_token``), shared experts (``n_shared_experts``,
    ``shared_expert_intermediate_size``, Llama 4's implicit one), dense leading or interleaved
    layers; sliding-window layers (gpt-oss ``layer_types``) and Gated DeltaNet linear-attention
    layers (Qwen3-Next ``full_attention_interval``) whose KV does not grow with the context;
    multimodal wrappers (``text_config``). MTP layers (``num_nextn_predict_layers``) are counted
    apart, as vendors leave them out of the published totals.

    Raises CostModelError (key ``model.config_json``) naming the missing config.json key.
    """
    if not isinstance(hf, Mapping):
        raise _invalid("model config must be a JSON object (HF config.json)")
    if "text_config" in hf and isinstance(hf["text_config"], Mapping) and "hidden_size" not in hf:
        hf = hf["text_config"]  # multimodal wrappers (Llama 4, Qwen-VL) nest the LM
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        if not isinstance(hf.get(key), (int, float)) or hf[key] <= 0:
            raise _invalid(f"model config: missing or invalid '{key}'")
    h = int(hf["hidden_size"])
    layers = int(hf["num_hidden_layers"])
    vocab = int(hf["vocab_size"])
    heads = int(_first(hf, "num_attention_heads", default=0) or 0)
    if heads <= 0:
        raise _invalid("model config: missing or invalid 'num_attention_heads'")
    kv_heads = int(_first(hf, "num_key_value_heads", default=heads))
    head_dim = int(_first(hf, "head_dim", default=h // heads) or h // heads)
    llama4 = "intermediate_size_mlp" in hf  # Llama 4: intermediate_size is the expert's, _mlp the dense layers'
    inter = _first(hf, "intermediate_size_mlp", "intermediate_size", "ffn_dim")
    tied = bool(hf.get("tie_word_embeddings", False))
    kinds = _layer_kinds(hf, layers)
    full_layers = sum(1 for k in kinds if k != "linear")
    kv_layers = sum(1 for k in kinds if k == "full")

    # Attention. MLA (DeepSeek-V2/V3 family) has low-rank projections and a compressed KV cache.
    attn: float
    if hf.get("kv_lora_rank"):
        r_kv = int(hf["kv_lora_rank"])
        rope = int(_first(hf, "qk_rope_head_dim", default=64))
        nope = int(_first(hf, "qk_nope_head_dim", default=128))
        v_dim = int(_first(hf, "v_head_dim", default=128))
        q_lora = hf.get("q_lora_rank")
        q = (h * q_lora + q_lora * heads * (nope + rope)) if q_lora else h * heads * (nope + rope)
        attn = q + h * (r_kv + rope) + r_kv * heads * (nope + v_dim) + heads * v_dim * h
        kv_per_layer = (r_kv + rope) * 2.0
    else:
        # Gated attention (Qwen3-Next) projects a sigmoid gate beside q: q_proj is twice as wide.
        gate = 2 if (hf.get("attn_output_gate") or hf.get("model_type") == "qwen3_next") else 1
        attn = gate * h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h
        kv_per_layer = 2 * kv_heads * head_dim * 2.0
    kv_per_token = kv_layers * kv_per_layer
    linear_attn = _linear_attention_params(hf, h) if full_layers < layers else 0.0
    attention_total = full_layers * attn + (layers - full_layers) * linear_attn

    n_experts = int(_first(hf, "n_routed_experts", "num_local_experts", "num_experts", default=0) or 0)
    top_k = int(_first(hf, "num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_topk",
                       default=0) or 0)
    moe_layers = 0
    expert_params = 0.0
    dense_mlp_total = 0.0
    mlp_dense_layer = 3.0 * h * inter if inter else 0.0
    if n_experts > 0 and top_k > 0:
        moe_inter = _first(hf, "moe_intermediate_size") or (hf.get("intermediate_size") if llama4 else inter)
        if not moe_inter:
            raise _invalid("model config: MoE model without 'moe_intermediate_size' or 'intermediate_size'")
        expert_params = 3.0 * h * float(moe_inter)
        moe_layers = len(_moe_layer_indices(hf, layers))
        dense_layers = layers - moe_layers
        if dense_layers and not inter:
            raise _invalid("model config: dense layers present but 'intermediate_size' missing")
        dense_mlp_total = dense_layers * mlp_dense_layer
        shared = 0.0
        if hf.get("n_shared_experts"):
            shared = float(hf["n_shared_experts"]) * expert_params
        elif hf.get("shared_expert_intermediate_size"):
            shared = 3.0 * h * float(hf["shared_expert_intermediate_size"])
        elif llama4:
            shared = expert_params  # every Llama 4 MoE layer has one shared expert of the expert's size
        router = h * n_experts
        dense_mlp_total += moe_layers * (shared + router)
    else:
        if not inter:
            raise _invalid("model config: missing or invalid 'intermediate_size'")
        n_experts = top_k = 0
        dense_mlp_total = layers * mlp_dense_layer

    lm_head = float(vocab * h)
    dense = attention_total + dense_mlp_total + lm_head
    return ModelSpec(
        name=name or str(hf.get("_name_or_path") or hf.get("model_type") or "model"),
        dense_params=dense,
        layers=layers,
        kv_bytes_per_token_bf16=kv_per_token,
        hidden_size=h,
        intermediate_size=int(inter) if inter else None,
        vocab_size=vocab,
        num_attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        lm_head_params=lm_head,
        embedding_params=0.0 if tied else float(vocab * h),
        moe_layers=moe_layers,
        num_experts=n_experts,
        experts_per_token=top_k,
        expert_params=expert_params,
        attention_params_per_layer=float(attn),
        mlp_params_per_layer=mlp_dense_layer,
        kv_layers=kv_layers,
        mtp_layers=int(_first(hf, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0) or 0),
    )


#: Reference 8B: KV bytes/token and params of Llama-3.1-8B, used to guess KV size from params alone.
_KV_REF_BYTES, _KV_REF_PARAMS, _KV_EXPONENT = 131072.0, 8.03e9, 0.43


def model_spec_from_params(
    params: float,
    layers: int | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    name: str = "custom",
) -> ModelSpec:
    """A dense model known only by its parameter count (and optionally its KV geometry).

    Without layers × kv_heads × head_dim the KV size is guessed as 131072 B·(P/8.03e9)^0.43,
    a power law through Llama-3.1-8B (131072 B) and Llama-3.1-70B (327680 B).
    """
    if not params or params <= 0:
        raise CostModelError("model.params", "model.params must be > 0")
    if layers and kv_heads and head_dim:
        kv = layers * 2 * kv_heads * head_dim * 2.0
    else:
        kv = _KV_REF_BYTES * (params / _KV_REF_PARAMS) ** _KV_EXPONENT
    # Layer count guess (for the TP all-reduce term): 32 at 8B, 80 at 70B, as in Llama-3.1.
    guess_layers = max(1, round(32 * (params / _KV_REF_PARAMS) ** 0.42))
    return ModelSpec(name=name, dense_params=float(params), layers=int(layers or guess_layers),
                     kv_bytes_per_token_bf16=kv, kv_heads=kv_heads, head_dim=head_dim)


def _llama(h: int, inter: int, layers: int, heads: int, kv: int, vocab: int, tied: bool = False,
           head_dim: int | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"hidden_size": h, "intermediate_size": inter, "num_hidden_layers": layers,
                         "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
                         "tie_word_embeddings": tied}
    if head_dim:
        d["head_dim"] = head_dim
    return d


def _alternating(layers: int, first: str, second: str) -> list[str]:
    return [first if i % 2 == 0 else second for i in range(layers)]


#: HF config.json excerpts (the keys the model reads) of common targets and drafts. Values as
#: published in each model's config.json on the Hugging Face hub; MODEL_SOURCES names each one.
MODEL_HF_CONFIGS: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": _llama(4096, 14336, 32, 32, 8, 128256),
    "llama-3.1-70b": _llama(8192, 28672, 80, 64, 8, 128256),
    "llama-3.3-70b": _llama(8192, 28672, 80, 64, 8, 128256),
    "llama-3.2-1b": _llama(2048, 8192, 16, 32, 8, 128256, tied=True, head_dim=64),
    "llama-3.2-3b": _llama(3072, 8192, 28, 24, 8, 128256, tied=True, head_dim=128),
    "qwen2.5-7b": _llama(3584, 18944, 28, 28, 4, 152064),
    "qwen2.5-72b": _llama(8192, 29568, 80, 64, 8, 152064),
    "qwen3-8b": _llama(4096, 12288, 36, 32, 8, 151936, head_dim=128),
    "qwen3-32b": _llama(5120, 25600, 64, 64, 8, 151936, head_dim=128),
    "qwen3-30b-a3b": {**_llama(2048, 6144, 48, 32, 4, 151936, head_dim=128),
                      "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768},
    "qwen3-235b-a22b": {**_llama(4096, 12288, 94, 64, 4, 151936, head_dim=128),
                        "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1536},
    "qwen3-next-80b-a3b": {
        **_llama(2048, 5120, 48, 16, 2, 151936, head_dim=256), "model_type": "qwen3_next",
        "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512},
    "deepseek-v3": {
        **_llama(7168, 18432, 61, 128, 128, 129280), "model_type": "deepseek_v3",
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
        "v_head_dim": 128, "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
        "n_shared_experts": 1, "first_k_dense_replace": 3, "moe_layer_freq": 1, "num_nextn_predict_layers": 1},
    "gpt-oss-20b": {
        **_llama(2880, 2880, 24, 64, 8, 201088, head_dim=64), "model_type": "gpt_oss",
        "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4, "sliding_window": 128,
        "layer_types": _alternating(24, "sliding_attention", "full_attention")},
    "gpt-oss-120b": {
        **_llama(2880, 2880, 36, 64, 8, 201088, head_dim=64), "model_type": "gpt_oss",
        "num_local_experts": 128, "num_experts_per_tok": 4, "experts_per_token": 4, "sliding_window": 128,
        "layer_types": _alternating(36, "sliding_attention", "full_attention")},
    "llama-4-scout-17b-16e": {"text_config": {
        **_llama(5120, 8192, 48, 40, 8, 202048, head_dim=128), "model_type": "llama4_text",
        "intermediate_size_mlp": 16384, "num_local_experts": 16, "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1}},
    "llama-4-maverick-17b-128e": {"text_config": {
        **_llama(5120, 8192, 48, 40, 8, 202048, head_dim=128), "model_type": "llama4_text",
        "intermediate_size_mlp": 16384, "num_local_experts": 128, "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 2}},
    "glm-4.5": {
        **_llama(5120, 12288, 92, 96, 8, 151552, head_dim=128), "model_type": "glm4_moe",
        "n_routed_experts": 160, "num_experts_per_tok": 8, "moe_intermediate_size": 1536, "n_shared_experts": 1,
        "first_k_dense_replace": 3, "num_nextn_predict_layers": 1},
    "glm-4.5-air": {
        **_llama(4096, 10944, 46, 96, 8, 151552, head_dim=128), "model_type": "glm4_moe",
        "n_routed_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 1408, "n_shared_experts": 1,
        "first_k_dense_replace": 1, "num_nextn_predict_layers": 1},
    "mixtral-8x7b": {**_llama(4096, 14336, 32, 32, 8, 32000),
                     "num_local_experts": 8, "num_experts_per_tok": 2},
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


def model_from(preset: str | None = None, hf_config: Mapping[str, Any] | None = None, params: float | None = None,
               layers: int | None = None, kv_heads: int | None = None, head_dim: int | None = None) -> ModelSpec:
    """The target: a config.json wins over a preset, a preset over a bare parameter count."""
    if hf_config is not None:
        return model_spec_from_hf_config(hf_config)
    if preset:
        if preset not in MODEL_PRESETS:
            raise CostModelError(
                "model.preset", f"model: unknown preset '{preset}' (one of {', '.join(MODEL_PRESETS)})")
        return MODEL_PRESETS[preset]
    if params:
        return model_spec_from_params(params, layers, kv_heads, head_dim)
    return MODEL_PRESETS[DEFAULT_MODEL]


def model_weight_bytes(spec: ModelSpec, dtype: str, tokens: float = 1.0) -> float:
    """Bytes of weights streamed for a forward over ``tokens`` tokens.

    The LM head stays bf16 in fp8/int8/int4 checkpoints (quantisation recipes skip it)."""
    b = DTYPE_BYTES[dtype]
    lm = spec.lm_head_params
    return (spec.streamed_params(tokens) - lm) * b + lm * DTYPE_BYTES["bf16"]


def model_total_weight_bytes(spec: ModelSpec, dtype: str) -> float:
    """All weights resident in GPU memory (every expert, embeddings)."""
    b = DTYPE_BYTES[dtype]
    lm = spec.lm_head_params
    resident = spec.total_params - spec.embedding_params - lm
    return resident * b + (lm + spec.embedding_params) * DTYPE_BYTES["bf16"]
