"""Target and draft model shapes: ModelSpec, Hugging Face config.json parsing and the bytes of
weights a forward streams. Formulas: docs/costmodel.md; the presets are in model_presets.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specwatch.costmodel.errors import CostModelError

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


def _first(hf: Mapping[str, object], *keys: str, default: object = None) -> object:
    """The first of ``keys`` present and not null (config.json spellings differ by family)."""
    for k in keys:
        if k in hf and hf[k] is not None:
            return hf[k]
    return default


# config.json values arrive untyped: these narrow them as int()/float()/arithmetic would use them,
# raising TypeError (reported under model.config_json) for a value of the wrong JSON type.
def _number(value: object) -> int | float:
    if isinstance(value, (int, float)):
        return value
    raise TypeError(f"expected a number, got {type(value).__name__} {value!r:.40}")


def _as_int(value: object) -> int:
    return int(value if isinstance(value, str) else _number(value))


def _as_float(value: object) -> float:
    return float(value if isinstance(value, str) else _number(value))


def _as_list(value: object) -> list[object]:
    if isinstance(value, list):
        return value
    raise TypeError(f"expected a list, got {type(value).__name__} {value!r:.40}")


def _invalid(message: str) -> CostModelError:
    return CostModelError(HF_CONFIG_KEY, message)


def _layer_kinds(hf: Mapping[str, object], layers: int) -> list[str]:
    """Attention kind of each layer: "full", "sliding" (KV bounded by a window) or "linear"
    (a recurrent state per request, no per-token KV: Gated DeltaNet in Qwen3-Next)."""
    types = hf.get("layer_types")
    if isinstance(types, list) and len(types) == layers:
        kinds = []
        for t in types:
            text = str(t)
            kinds.append(
                "linear" if "linear" in text else "sliding" if ("sliding" in text or "chunk" in text) else "full"
            )
        return kinds
    interval = hf.get("full_attention_interval")
    if isinstance(interval, int) and interval > 1 and hf.get("linear_num_value_heads"):
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
    return ["full"] * layers


def _linear_attention_params(hf: Mapping[str, object], h: int) -> float:
    """One Gated DeltaNet layer (Qwen3-Next): in_proj_qkvz, in_proj_ba, the causal conv over q/k/v,
    out_proj. Norms, A_log and dt_bias are a few thousand parameters and left out."""
    nk = _as_int(_first(hf, "linear_num_key_heads", default=0) or 0)
    nv = _as_int(_first(hf, "linear_num_value_heads", default=0) or 0)
    dk = _as_int(_first(hf, "linear_key_head_dim", default=0) or 0)
    dv = _as_int(_first(hf, "linear_value_head_dim", default=0) or 0)
    if not (nk and nv and dk and dv):
        raise _invalid(
            "model config: linear_attention layers need 'linear_num_key_heads', "
            "'linear_num_value_heads', 'linear_key_head_dim' and 'linear_value_head_dim'"
        )
    kernel = _as_int(_first(hf, "linear_conv_kernel_dim", default=4) or 4)
    key_dim, value_dim = nk * dk, nv * dv
    return float(h * (2 * key_dim + 2 * value_dim) + h * 2 * nv + (2 * key_dim + value_dim) * kernel + value_dim * h)


def _moe_layer_indices(hf: Mapping[str, object], layers: int) -> list[int]:
    """Which layers carry routed experts, from whichever key the family uses:
    DeepSeek/GLM ``first_k_dense_replace`` + ``moe_layer_freq``; Qwen ``decoder_sparse_step`` +
    ``mlp_only_layers``; Llama 4 ``interleave_moe_layer_step`` (or an explicit ``moe_layers``)."""
    explicit = hf.get("moe_layers")
    indices = [i for i in explicit if isinstance(i, int)] if isinstance(explicit, list) else []
    if indices and len(indices) == len(_as_list(explicit)):
        return sorted({i for i in indices if 0 <= i < layers})
    first_dense = _as_int(_first(hf, "first_k_dense_replace", default=0) or 0)
    freq = _as_int(_first(hf, "moe_layer_freq", default=1) or 1)
    step = _as_int(_first(hf, "interleave_moe_layer_step", "decoder_sparse_step", default=1) or 1)
    mlp_only = set(_as_list(hf.get("mlp_only_layers") or []))
    return [
        i
        for i in range(layers)
        if i >= first_dense and (i - first_dense) % freq == 0 and (i + 1) % step == 0 and i not in mlp_only
    ]


def model_spec_from_hf_config(hf: Mapping[str, object], name: str | None = None) -> ModelSpec:
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
    text_config = hf.get("text_config")
    if isinstance(text_config, Mapping) and "hidden_size" not in hf:
        hf = text_config  # multimodal wrappers (Llama 4, Qwen-VL) nest the LM
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        value = hf.get(key)
        if not isinstance(value, (int, float)) or value <= 0:
            raise _invalid(f"model config: missing or invalid '{key}'")
    h = _as_int(hf["hidden_size"])
    layers = _as_int(hf["num_hidden_layers"])
    vocab = _as_int(hf["vocab_size"])
    heads = _as_int(_first(hf, "num_attention_heads", default=0) or 0)
    if heads <= 0:
        raise _invalid("model config: missing or invalid 'num_attention_heads'")
    kv_heads = _as_int(_first(hf, "num_key_value_heads", default=heads))
    head_dim = _as_int(_first(hf, "head_dim", default=h // heads) or h // heads)
    llama4 = "intermediate_size_mlp" in hf  # Llama 4: intermediate_size is the expert's, _mlp the dense layers'
    inter_value = _first(hf, "intermediate_size_mlp", "intermediate_size", "ffn_dim")
    inter = _number(inter_value) if inter_value else None
    tied = bool(hf.get("tie_word_embeddings", False))
    kinds = _layer_kinds(hf, layers)
    full_layers = sum(1 for k in kinds if k != "linear")
    kv_layers = sum(1 for k in kinds if k == "full")

    # Attention. MLA (DeepSeek-V2/V3 family) has low-rank projections and a compressed KV cache.
    attn: float
    if hf.get("kv_lora_rank"):
        r_kv = _as_int(hf["kv_lora_rank"])
        rope = _as_int(_first(hf, "qk_rope_head_dim", default=64))
        nope = _as_int(_first(hf, "qk_nope_head_dim", default=128))
        v_dim = _as_int(_first(hf, "v_head_dim", default=128))
        q_lora_value = hf.get("q_lora_rank")
        q_lora = _number(q_lora_value) if q_lora_value else None
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

    n_experts = _as_int(_first(hf, "n_routed_experts", "num_local_experts", "num_experts", default=0) or 0)
    top_k = _as_int(
        _first(hf, "num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_topk", default=0) or 0
    )
    moe_layers = 0
    expert_params = 0.0
    dense_mlp_total = 0.0
    mlp_dense_layer = 3.0 * h * inter if inter else 0.0
    if n_experts > 0 and top_k > 0:
        moe_inter = _first(hf, "moe_intermediate_size") or (hf.get("intermediate_size") if llama4 else inter)
        if not moe_inter:
            raise _invalid("model config: MoE model without 'moe_intermediate_size' or 'intermediate_size'")
        expert_params = 3.0 * h * _as_float(moe_inter)
        moe_layers = len(_moe_layer_indices(hf, layers))
        dense_layers = layers - moe_layers
        if dense_layers and not inter:
            raise _invalid("model config: dense layers present but 'intermediate_size' missing")
        dense_mlp_total = dense_layers * mlp_dense_layer
        shared = 0.0
        if hf.get("n_shared_experts"):
            shared = _as_float(hf["n_shared_experts"]) * expert_params
        elif hf.get("shared_expert_intermediate_size"):
            shared = 3.0 * h * _as_float(hf["shared_expert_intermediate_size"])
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
        mtp_layers=_as_int(_first(hf, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0) or 0),
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
    return ModelSpec(
        name=name,
        dense_params=float(params),
        layers=int(layers or guess_layers),
        kv_bytes_per_token_bf16=kv,
        kv_heads=kv_heads,
        head_dim=head_dim,
    )


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
