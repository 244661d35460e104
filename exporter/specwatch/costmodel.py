"""Step-time cost model, break-even acceptance, best draft length and V1 schedules.

Pure functions only: no I/O, no imports from modules that do I/O (DESIGN.md §1), and no
import of ``specwatch.config`` (config.py validates names against the presets defined here).

The model (DESIGN.md §4, COSTMODEL.md §1.5)::

    T(n, S) = max(W(n) / BW_eff, 2 · P_active · n / F_eff) + KV_bytes_per_token · S / BW_eff + c0

n = query tokens in the step (B for plain decode, B·(K+1) for a verify step), S = KV tokens in the
whole batch, W(n) = weight bytes streamed (for MoE: dense part + the experts the n tokens touch),
BW_eff = HBM bandwidth × MBU × TP, F_eff = peak FLOPS of the compute dtype × MFU × TP.
Formulas, defaults and their calibration are documented in docs/costmodel.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

# ---------------------------------------------------------------------------------------------
# Hardware presets (dense numbers, no 2:4 sparsity). COSTMODEL.md §1.5 hardware table.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    bandwidth_bytes_per_second: float
    flops: Mapping[str, float]  # compute dtype -> dense peak FLOP/s ("bf16", "fp8", "int8")
    memory_bytes: float | None = None
    source: str = ""

    def peak_flops(self, compute_dtype: str) -> float:
        # A GPU without FP8/INT8 tensor cores (A100 has no FP8) runs those weights through
        # bf16 math (weight-only kernels), so fall back to the bf16 peak.
        return self.flops.get(compute_dtype) or self.flops["bf16"]


_T = 1e12
_GB = 1e9

HARDWARE_PRESETS: dict[str, HardwareSpec] = {
    "h100-sxm": HardwareSpec(
        "h100-sxm", 3.35 * _T, {"bf16": 989.4 * _T, "fp8": 1979 * _T, "int8": 1979 * _T}, 80 * _GB,
        "NVIDIA H100 product page, SXM column (989.4 TFLOPS bf16 / 1979 fp8 dense, 3.35 TB/s); "
        "transcribed twice, COSTMODEL.md §1.5",
    ),
    "h100-pcie": HardwareSpec(
        "h100-pcie", 2.0 * _T, {"bf16": 756 * _T, "fp8": 1513 * _T, "int8": 1513 * _T}, 80 * _GB,
        "NVIDIA H100 datasheet, PCIe column (2.0 TB/s, ~756 bf16 / ~1513 fp8); not re-verified, "
        "COSTMODEL.md §1.5",
    ),
    "h200": HardwareSpec(
        "h200", 4.8 * _T, {"bf16": 989.4 * _T, "fp8": 1979 * _T, "int8": 1979 * _T}, 141 * _GB,
        "NVIDIA H200 page: 4.8 TB/s, same GH100 compute as H100 SXM; COSTMODEL.md §1.5",
    ),
    "a100-80gb": HardwareSpec(
        "a100-80gb", 2.039 * _T, {"bf16": 312 * _T, "int8": 624 * _T}, 80 * _GB,
        "NVIDIA A100 datasheet (2.039 TB/s, 312 TFLOPS bf16, 624 TOPS int8, no FP8); "
        "COSTMODEL.md §1.5",
    ),
    "a100-40gb": HardwareSpec(
        "a100-40gb", 1.555 * _T, {"bf16": 312 * _T, "int8": 624 * _T}, 40 * _GB,
        "NVIDIA A100 datasheet, 40GB column (1.555 TB/s); COSTMODEL.md §1.5",
    ),
    "l40s": HardwareSpec(
        "l40s", 0.864 * _T, {"bf16": 362.05 * _T, "fp8": 733 * _T, "int8": 733 * _T}, 48 * _GB,
        "NVIDIA L40S datasheet (864 GB/s GDDR6, 362 bf16 / 733 fp8); COSTMODEL.md §1.5",
    ),
    "mi300x": HardwareSpec(
        "mi300x", 5.3 * _T, {"bf16": 1307.4 * _T, "fp8": 2614.9 * _T, "int8": 2614.9 * _T}, 192 * _GB,
        "AMD Instinct MI300X spec page (5.3 TB/s, 1307.4 bf16 / 2614.9 fp8); COSTMODEL.md §1.5",
    ),
}

# ---------------------------------------------------------------------------------------------
# Efficiency defaults. Calibrated against the SpecDecode-Bench fitted step model for
# Llama-3.1-8B on H100 (COSTMODEL.md §1.3); docs/costmodel.md shows the derivation and
# tests/test_costmodel.py checks the calibration.
# ---------------------------------------------------------------------------------------------

#: Share of peak HBM bandwidth reached: between the 0.82 implied by the fitted weight-read
#: intercept and the 0.96 measured for KV streaming (adixg FINDINGS E6).
DEFAULT_MBU = 0.85
#: Share of peak tensor FLOPS reached by the decode/verify GEMMs. 0.5 puts the effective knee at
#: ~0.6 of the ideal F/BW knee, as COSTMODEL.md §1.5 reports for real systems (small-M GEMMs).
DEFAULT_MFU = 0.5
#: Fixed per-step overhead (launch, sampler, scheduler): the fitted model's 1.207 ms overhead
#: plus the part of its 5.886 ms intercept that the weight read at DEFAULT_MBU does not explain.
DEFAULT_OVERHEAD_SECONDS = 1.8e-3
#: Extra per-layer cost of tensor parallelism (two small all-reduces per layer on NVLink).
#: An assumption (COSTMODEL.md only says "all-reduce adds to c0"), applied only when TP > 1.
DEFAULT_ALLREDUCE_SECONDS_PER_LAYER = 10e-6
#: Fixed cost of one EAGLE/MTP/Medusa proposal round beyond its head's weight reads:
#: SpecDecode-Bench's EAGLE draft fit is 2.135 ms + tiny per-token terms on H100 for K≈3;
#: three reads of an 8B EAGLE head (~1.55 GB) explain ~1.6 ms of it.
DEFAULT_DRAFT_FIXED_SECONDS = 0.5e-3
#: n-gram / suffix drafting runs on the CPU: 0.59 % of verify time (SpecDecode-Bench).
NGRAM_FRACTION_OF_VERIFY = 0.0059
#: EAGLE-3 heads predict over a reduced draft vocabulary (32k for the Llama-3 heads).
EAGLE3_DRAFT_VOCAB = 32000

DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
#: Which tensor-core math a weight dtype uses: fp8 -> W8A8 fp8, int8 -> W8A8 int8,
#: int4 -> weight-only W4A16 (dequantised into bf16 GEMMs).
COMPUTE_DTYPE = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "int8": "int8", "int4": "bf16"}

DRAFT_METHODS = ("auto", "ngram", "eagle", "eagle3", "mtp", "draft_model", "medusa", "suffix")
#: vLLM method names that cost like another: ngram_gpu (0.20+) is n-gram lookup on the GPU.
METHOD_ALIASES = {"ngram_gpu": "ngram"}

# ---------------------------------------------------------------------------------------------
# Model specs
# ---------------------------------------------------------------------------------------------


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
        return e * (1.0 - (1.0 - k / e) ** max(tokens, 1.0))

    def streamed_params(self, tokens: float) -> float:
        """Weights read from HBM by one forward over ``tokens`` tokens."""
        return self.dense_params + self.moe_layers * self.experts_touched(tokens) * self.expert_params


def _get(cfg: Mapping[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            return cfg[k]
    return default


def model_spec_from_hf_config(hf: Mapping[str, Any], name: str | None = None) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face ``config.json`` dict (dense or MoE, GQA or MLA).

    Raises ValueError naming the missing key.
    """
    if not isinstance(hf, Mapping):
        raise ValueError("model config must be a JSON object (HF config.json)")
    if "text_config" in hf and isinstance(hf["text_config"], Mapping) and "hidden_size" not in hf:
        hf = hf["text_config"]  # multimodal wrappers (Llama 4, Qwen-VL) nest the LM
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        if not isinstance(hf.get(key), (int, float)) or hf[key] <= 0:
            raise ValueError(f"model config: missing or invalid '{key}'")
    h = int(hf["hidden_size"])
    layers = int(hf["num_hidden_layers"])
    vocab = int(hf["vocab_size"])
    heads = int(_get(hf, "num_attention_heads", default=0) or 0)
    if heads <= 0:
        raise ValueError("model config: missing or invalid 'num_attention_heads'")
    kv_heads = int(_get(hf, "num_key_value_heads", default=heads))
    head_dim = int(_get(hf, "head_dim", default=h // heads) or h // heads)
    inter = _get(hf, "intermediate_size", "ffn_dim")
    tied = bool(hf.get("tie_word_embeddings", False))

    # Attention. MLA (DeepSeek-V2/V3 family) has low-rank projections and a compressed KV cache.
    if hf.get("kv_lora_rank"):
        r_kv = int(hf["kv_lora_rank"])
        rope = int(_get(hf, "qk_rope_head_dim", default=64))
        nope = int(_get(hf, "qk_nope_head_dim", default=128))
        v_dim = int(_get(hf, "v_head_dim", default=128))
        q_lora = hf.get("q_lora_rank")
        q = (h * q_lora + q_lora * heads * (nope + rope)) if q_lora else h * heads * (nope + rope)
        attn = q + h * (r_kv + rope) + r_kv * heads * (nope + v_dim) + heads * v_dim * h
        kv_per_token = layers * (r_kv + rope) * 2.0
    else:
        attn = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h
        kv_per_token = layers * 2 * kv_heads * head_dim * 2.0

    n_experts = int(_get(hf, "num_experts", "num_local_experts", "n_routed_experts", default=0) or 0)
    top_k = int(_get(hf, "num_experts_per_tok", "num_experts_per_token", "moe_topk", default=0) or 0)
    moe_layers = 0
    expert_params = 0.0
    dense_mlp_total = 0.0
    mlp_dense_layer = 3.0 * h * inter if inter else 0.0
    if n_experts > 0 and top_k > 0:
        moe_inter = _get(hf, "moe_intermediate_size", default=inter)
        if not moe_inter:
            raise ValueError("model config: MoE model without 'moe_intermediate_size' or 'intermediate_size'")
        expert_params = 3.0 * h * float(moe_inter)
        first_dense = int(_get(hf, "first_k_dense_replace", default=0) or 0)
        step = int(_get(hf, "decoder_sparse_step", default=1) or 1)
        mlp_only = set(hf.get("mlp_only_layers") or [])
        sparse = [i for i in range(layers) if i >= first_dense and (i + 1) % step == 0 and i not in mlp_only]
        moe_layers = len(sparse)
        dense_layers = layers - moe_layers
        if dense_layers and not inter:
            raise ValueError("model config: dense layers present but 'intermediate_size' missing")
        dense_mlp_total = dense_layers * mlp_dense_layer
        shared = 0.0
        if hf.get("n_shared_experts"):
            shared = float(hf["n_shared_experts"]) * expert_params
        elif hf.get("shared_expert_intermediate_size"):
            shared = 3.0 * h * float(hf["shared_expert_intermediate_size"])
        router = h * n_experts
        dense_mlp_total += moe_layers * (shared + router)
    else:
        if not inter:
            raise ValueError("model config: missing or invalid 'intermediate_size'")
        n_experts = top_k = 0
        dense_mlp_total = layers * mlp_dense_layer

    lm_head = float(vocab * h)
    dense = layers * attn + dense_mlp_total + lm_head
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
        raise ValueError("model.params must be > 0")
    if layers and kv_heads and head_dim:
        kv = layers * 2 * kv_heads * head_dim * 2.0
    else:
        kv = _KV_REF_BYTES * (params / _KV_REF_PARAMS) ** _KV_EXPONENT
    # Layer count guess (for the TP all-reduce term): 32 at 8B, 80 at 70B, as in Llama-3.1.
    guess_layers = max(1, round(32 * (params / _KV_REF_PARAMS) ** 0.42))
    return ModelSpec(name=name, dense_params=float(params), layers=int(layers or guess_layers), kv_bytes_per_token_bf16=kv,
                     kv_heads=kv_heads, head_dim=head_dim)


def _llama(h, inter, layers, heads, kv, vocab, tied=False, head_dim=None):
    d = {"hidden_size": h, "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
         "num_key_value_heads": kv, "vocab_size": vocab, "tie_word_embeddings": tied}
    if head_dim:
        d["head_dim"] = head_dim
    return d


#: HF config.json excerpts (the keys the model reads) of common targets and drafts. Values as
#: published in each model's config.json on the Hugging Face hub.
MODEL_HF_CONFIGS: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": _llama(4096, 14336, 32, 32, 8, 128256),
    "llama-3.1-70b": _llama(8192, 28672, 80, 64, 8, 128256),
    "llama-3.3-70b": _llama(8192, 28672, 80, 64, 8, 128256),
    "llama-3.2-1b": _llama(2048, 8192, 16, 32, 8, 128256, tied=True, head_dim=64),
    "llama-3.2-3b": _llama(3072, 8192, 28, 24, 8, 128256, tied=True, head_dim=128),
    "qwen2.5-7b": _llama(3584, 18944, 28, 28, 4, 152064),
    "qwen2.5-72b": _llama(8192, 29568, 80, 64, 8, 152064),
    "qwen3-30b-a3b": {**_llama(2048, 6144, 48, 32, 4, 151936, head_dim=128),
                      "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768},
    "mixtral-8x7b": {**_llama(4096, 14336, 32, 32, 8, 32000),
                     "num_local_experts": 8, "num_experts_per_tok": 2},
}

MODEL_PRESETS: dict[str, ModelSpec] = {
    name: model_spec_from_hf_config(cfg, name=name) for name, cfg in MODEL_HF_CONFIGS.items()
}


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


# ---------------------------------------------------------------------------------------------
# Draft heads
# ---------------------------------------------------------------------------------------------


def draft_head_params(target: ModelSpec, method: str, k: int = 1, draft_vocab: int | None = None) -> float:
    """Parameters one drafting forward streams for EAGLE/EAGLE-3/MTP/Medusa heads.

    EAGLE/MTP: one target-shaped decoder layer + fc (2h->h) + the LM head (full vocabulary,
    shared with the target but still read). EAGLE-3: the layer's q/k/v read 2h inputs, fc fuses
    three hidden states (3h->h), LM head over a reduced draft vocabulary. Medusa: K heads of a
    residual block (h×h) + LM head, all evaluated in one pass.
    """
    h = target.hidden_size
    if not h:
        # Only a parameter count is known: power law through the Llama-3.1 8B (0.78B) and
        # 70B (2.04B) EAGLE heads (one layer + fc + full-vocabulary LM head).
        return 0.78e9 * (target.dense_params / 8.03e9) ** 0.44
    vocab = target.vocab_size or 32000
    attn = target.attention_params_per_layer or 4.0 * h * h
    mlp = target.mlp_params_per_layer or (target.expert_params * max(target.experts_per_token, 1))
    if method == "eagle3":
        kv_dim = (target.kv_heads or 8) * (target.head_dim or h // 32)
        q_dim = (target.num_attention_heads or 32) * (target.head_dim or h // 32)
        attn3 = 2 * h * q_dim + 2 * (2 * h * kv_dim) + q_dim * h
        return attn3 + mlp + 3 * h * h + h * (draft_vocab or min(vocab, EAGLE3_DRAFT_VOCAB))
    if method == "medusa":
        return max(k, 1) * h * h + h * vocab
    return attn + mlp + 2 * h * h + h * vocab  # eagle, mtp


def draft_head_kv_bytes_per_token(target: ModelSpec) -> float:
    """KV of a one-layer head: the target's per-layer KV."""
    return target.kv_bytes_per_token_bf16 / max(target.layers, 1)


@dataclass(frozen=True)
class DraftCost:
    """How drafting time is computed for one method (see CostModel.draft_time)."""

    method: str = "eagle3"
    cost_per_token: float | None = None  # fraction of a plain target step per drafted token
    head_params: float = 0.0             # EAGLE/MTP/Medusa: params streamed per draft step
    head_kv_bytes_per_token: float = 0.0
    head_steps_per_token: bool = True    # Medusa evaluates all heads in one pass
    fixed_seconds: float = DEFAULT_DRAFT_FIXED_SECONDS
    draft_model: ModelSpec | None = None  # draft_model: a full small model, K forwards
    draft_dtype: str = "bf16"
    reference_k: int = 3                 # K over which the per-proposal fixed cost is spread


def draft_cost_for(method: str, target: ModelSpec, cost_per_token: float | None = None, k: int = 3,
                   draft_model: ModelSpec | None = None, draft_dtype: str = "bf16") -> DraftCost:
    """Default draft cost for a method. ``auto`` is treated as EAGLE-3 (the common production head)."""
    m = (method or "auto").lower()
    m = METHOD_ALIASES.get(m, m)
    if m in ("auto", ""):
        m = "eagle3"
    if m not in DRAFT_METHODS:
        raise ValueError(f"draft.method: unknown method '{method}' (one of {', '.join(DRAFT_METHODS)})")
    if cost_per_token is not None:
        if not (0 <= cost_per_token < 10):
            raise ValueError("draft.cost_per_token must be in [0, 10)")
        return DraftCost(method=m, cost_per_token=float(cost_per_token))
    if m in ("ngram", "suffix"):
        return DraftCost(method=m, fixed_seconds=0.0)
    if m == "draft_model":
        dm = draft_model or MODEL_PRESETS["llama-3.2-1b"]
        return DraftCost(method=m, draft_model=dm, fixed_seconds=0.0, draft_dtype=draft_dtype)
    return DraftCost(
        method=m,
        reference_k=max(int(k), 1),
        head_params=draft_head_params(target, m, k),
        head_kv_bytes_per_token=draft_head_kv_bytes_per_token(target) if m != "medusa" else 0.0,
        head_steps_per_token=(m != "medusa"),
    )


# ---------------------------------------------------------------------------------------------
# Measured profile
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """Measured step time of the target (speculation off) vs query tokens in the step.

    ``points``: (tokens, seconds), tokens strictly increasing, seconds non-decreasing.
    ``context_tokens``: per-request context during the measurement (enables the KV correction).
    ``kv_seconds_per_token``: extra seconds per KV token; None = take it from the roofline.
    """

    points: tuple[tuple[float, float], ...]
    context_tokens: float | None = None
    kv_seconds_per_token: float | None = None
    source: str | None = None

    def interpolate(self, tokens: float) -> float:
        pts = self.points
        if tokens <= pts[0][0]:
            return pts[0][1]  # fewer tokens cannot be cheaper than the memory-bound floor
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if tokens <= x1:
                return y0 + (y1 - y0) * (tokens - x0) / (x1 - x0)
        (x0, y0), (x1, y1) = pts[-2], pts[-1]  # linear extrapolation past the last point
        return y1 + (y1 - y0) * (tokens - x1) / (x1 - x0)


def parse_profile(data: Any) -> Profile:
    """Validate a loaded YAML/JSON profile. Format (docs/costmodel.md)::

        context_tokens: 1024            # optional, per-request context while measuring
        kv_seconds_per_token: 3.9e-8    # optional
        source: "vllm bench serve, spec off, 2026-01-10"   # optional
        points:                         # >= 2 entries; [tokens, seconds] pairs also accepted
          - {tokens: 1, seconds: 0.0071}
          - {tokens: 64, seconds: 0.0079}
    """
    if isinstance(data, list):
        data = {"points": data}
    if not isinstance(data, Mapping):
        raise ValueError("profile: expected a mapping with 'points'")
    unknown = set(data) - {"points", "context_tokens", "kv_seconds_per_token", "source"}
    if unknown:
        raise ValueError(f"profile: unknown key(s) {sorted(unknown)}")
    raw = data.get("points")
    if not isinstance(raw, list) or len(raw) < 2:
        raise ValueError("profile.points: need at least 2 points")
    pts: list[tuple[float, float]] = []
    for i, p in enumerate(raw):
        if isinstance(p, Mapping):
            extra = set(p) - {"tokens", "seconds"}
            if extra:
                raise ValueError(f"profile.points[{i}]: unknown key(s) {sorted(extra)}")
            t, s = p.get("tokens"), p.get("seconds")
        elif isinstance(p, (list, tuple)) and len(p) == 2:
            t, s = p
        else:
            raise ValueError(f"profile.points[{i}]: expected {{tokens, seconds}} or [tokens, seconds]")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 1:
            raise ValueError(f"profile.points[{i}].tokens: must be a number >= 1")
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise ValueError(f"profile.points[{i}].seconds: must be a number > 0")
        if pts and t <= pts[-1][0]:
            raise ValueError(f"profile.points[{i}].tokens: must be strictly increasing")
        if pts and s < pts[-1][1]:
            raise ValueError(
                f"profile.points[{i}].seconds: step time decreases with more tokens "
                f"({s} < {pts[-1][1]}); smooth the measurement (e.g. running max) first")
        pts.append((float(t), float(s)))
    ctx = data.get("context_tokens")
    if ctx is not None and (isinstance(ctx, bool) or not isinstance(ctx, (int, float)) or ctx < 0):
        raise ValueError("profile.context_tokens: must be a number >= 0")
    kv = data.get("kv_seconds_per_token")
    if kv is not None and (isinstance(kv, bool) or not isinstance(kv, (int, float)) or kv < 0):
        raise ValueError("profile.kv_seconds_per_token: must be a number >= 0")
    src = data.get("source")
    return Profile(points=tuple(pts), context_tokens=None if ctx is None else float(ctx),
                   kv_seconds_per_token=None if kv is None else float(kv),
                   source=None if src is None else str(src))


# ---------------------------------------------------------------------------------------------
# The cost model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostModel:
    hardware: HardwareSpec
    model: ModelSpec
    dtype: str = "bf16"
    tensor_parallel: int = 1
    mbu: float = DEFAULT_MBU
    mfu: float = DEFAULT_MFU
    overhead_seconds: float = DEFAULT_OVERHEAD_SECONDS
    allreduce_seconds_per_layer: float = DEFAULT_ALLREDUCE_SECONDS_PER_LAYER
    kv_dtype: str = "bf16"
    context_tokens: float = 2048.0  # per request
    draft: DraftCost = field(default_factory=DraftCost)
    profile: Profile | None = None
    # Share of request-steps that carry a draft. vLLM counts a draft only when a request proposed
    # tokens: n-gram lookup misses leave ~28 % of steps undrafted on a real run, and those steps
    # neither verify extra tokens nor gain any. 1.0 for model-based drafters.
    draft_coverage: float = 1.0

    def __post_init__(self) -> None:
        # Step times are pure in (tokens, context): an assessment asks for the same ones hundreds
        # of times (best K per batch band). Not a dataclass field, so replace() starts a new memo.
        object.__setattr__(self, "_memo", {})
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)}")
        if self.tensor_parallel < 1:
            raise ValueError("tensor_parallel must be >= 1")
        for name in ("mbu", "mfu"):
            v = getattr(self, name)
            if not (0 < v <= 1):
                raise ValueError(f"{name} must be in (0, 1]")
        if self.overhead_seconds < 0:
            raise ValueError("overhead_seconds must be >= 0")
        if not (0 < self.draft_coverage <= 1):
            raise ValueError("draft_coverage must be in (0, 1]")

    # -- roofline pieces ---------------------------------------------------------------------
    @property
    def bandwidth_eff(self) -> float:
        return self.hardware.bandwidth_bytes_per_second * self.mbu * self.tensor_parallel

    @property
    def flops_eff(self) -> float:
        return self.hardware.peak_flops(COMPUTE_DTYPE[self.dtype]) * self.mfu * self.tensor_parallel

    @property
    def kv_bytes_per_token(self) -> float:
        return self.model.kv_bytes_per_token_bf16 * DTYPE_BYTES[self.kv_dtype] / 2.0

    @property
    def fixed_seconds(self) -> float:
        tp_extra = self.allreduce_seconds_per_layer * self.model.layers if self.tensor_parallel > 1 else 0.0
        return self.overhead_seconds + tp_extra

    @property
    def knee_tokens(self) -> float:
        """Query tokens where a dense step turns compute-bound (the effective roofline knee)."""
        w = model_weight_bytes(self.model, self.dtype)
        return w * self.flops_eff / (2.0 * self.model.active_params * self.bandwidth_eff)

    def _roofline(self, params_streamed_bytes: float, active_params: float, tokens: float,
                  kv_bytes: float, fixed: float) -> float:
        gemm = max(params_streamed_bytes / self.bandwidth_eff, 2.0 * active_params * tokens / self.flops_eff)
        return gemm + kv_bytes / self.bandwidth_eff + fixed

    def step_time(self, tokens: float, context_tokens: float) -> float:
        """Seconds of one target forward over ``tokens`` query tokens with ``context_tokens``
        KV tokens in the whole batch."""
        memo = self._memo
        key = (tokens, context_tokens)
        hit = memo.get(key)
        if hit is None:
            if len(memo) > 4096:  # bounded: a long-lived model sees ever new batch sizes
                memo.clear()
            hit = memo[key] = self._step_time(tokens, context_tokens)
        return hit

    def _step_time(self, tokens: float, context_tokens: float) -> float:
        tokens = max(float(tokens), 1.0)
        context_tokens = max(float(context_tokens), 0.0)
        kv_coef = self.kv_bytes_per_token / self.bandwidth_eff
        if self.profile is not None:
            t = self.profile.interpolate(tokens)
            if self.profile.context_tokens is not None:
                # The profile was measured with `tokens` requests at its own context; correct the
                # attention term to the real KV size (adixg's scalar correction, COSTMODEL §1.4).
                coef = self.profile.kv_seconds_per_token if self.profile.kv_seconds_per_token is not None else kv_coef
                t += coef * (context_tokens - tokens * self.profile.context_tokens)
            return max(t, 1e-6)
        return self._roofline(model_weight_bytes(self.model, self.dtype, tokens), self.model.active_params,
                              tokens, self.kv_bytes_per_token * context_tokens, self.fixed_seconds)

    def base_step_time(self, batch: float) -> float:
        """Plain decode step at batch B: B query tokens over B·context KV tokens."""
        batch = max(float(batch), 1.0)
        return self.step_time(batch, batch * self.context_tokens)

    def draft_cost_per_token(self) -> float:
        hit = self._memo.get("draft_cost_per_token")
        if hit is None:
            hit = self._memo["draft_cost_per_token"] = self._draft_cost_per_token()
        return hit

    def _draft_cost_per_token(self) -> float:
        """c: seconds to draft one token as a fraction of a plain target step.

        Configured, or computed once at batch 1 from the drafter's size on this hardware
        (EAGLE/MTP/Medusa head incl. LM head and per-proposal fixed cost spread over the
        reference K; a draft model's own roofline step). Applied at every batch as
        T_draft(B, K) = K·c·T(B) (DESIGN.md §4), so alpha* = c + (R − 1)/K (COSTMODEL.md §1.5)."""
        d = self.draft
        if d.cost_per_token is not None:
            return d.cost_per_token
        if d.method in ("ngram", "suffix"):
            return 0.0  # charged on verify time instead, see draft_time
        t1 = self.base_step_time(1.0)
        ctx = self.context_tokens
        kv_scale = DTYPE_BYTES[self.kv_dtype] / 2.0
        if d.method == "draft_model" and d.draft_model is not None:
            dm = d.draft_model
            step = self._roofline(model_weight_bytes(dm, d.draft_dtype, 1.0), dm.active_params, 1.0,
                                  dm.kv_bytes_per_token_bf16 * kv_scale * ctx, self.fixed_seconds)
            return step / t1
        head_step = self._roofline(d.head_params * DTYPE_BYTES["bf16"], d.head_params, 1.0,
                                   d.head_kv_bytes_per_token * kv_scale * ctx, 0.0)  # heads ship in bf16
        k_ref = max(d.reference_k, 1)
        per_round = d.fixed_seconds + (k_ref if d.head_steps_per_token else 1) * head_step
        return per_round / k_ref / t1

    def draft_time(self, batch: float, k: float) -> float:
        """Seconds to propose ``k`` draft tokens for each of ``batch`` requests."""
        if k <= 0:
            return 0.0
        batch = max(float(batch), 1.0)
        if self.draft.cost_per_token is None and self.draft.method in ("ngram", "suffix"):
            # CPU-side matching: 0.59 % of the verify step (SpecDecode-Bench).
            return NGRAM_FRACTION_OF_VERIFY * self.step_time(batch * (k + 1), batch * self.context_tokens)
        return k * self.draft_cost_per_token() * self.base_step_time(batch)

    def spec_step_time(self, batch: float, k: float) -> float:
        """Verify B·(K+1) tokens plus drafting K per request (B·(1 + coverage·K) and coverage·B
        drafting requests when only part of the request-steps carry a draft)."""
        batch = max(float(batch), 1.0)
        c = self.draft_coverage
        if c >= 1.0:
            return self.step_time(batch * (k + 1), batch * self.context_tokens) + self.draft_time(batch, k)
        return (self.step_time(batch * (1 + c * k), batch * self.context_tokens)
                + c * self.draft_time(batch, k))

    def tokens_per_step(self, k: float, alpha: float) -> float:
        """Tokens a request gains per step: 1 + coverage·K·alpha (vLLM V1's alpha, exact)."""
        return 1.0 + self.draft_coverage * k * alpha

    def with_coverage(self, coverage: float | None) -> "CostModel":
        """The same model with a measured draft coverage (Δdrafts / Δrequest-steps)."""
        if coverage is None or not (coverage > 0):
            return self
        return replace(self, draft_coverage=min(float(coverage), 1.0))

    def with_method(self, method: str | None) -> "CostModel":
        """The same model with the default draft cost of ``method`` (unless a cost was configured)."""
        if not method or method == "auto" or self.draft.cost_per_token is not None or method == self.draft.method:
            return self
        method = METHOD_ALIASES.get(method, method)
        if method not in DRAFT_METHODS or method == self.draft.method:
            return self
        return replace(self, draft=draft_cost_for(method, self.model))


def max_concurrency_by_memory(cm: "CostModel", gpu_memory_utilization: float = 0.9) -> int | None:
    """Requests of ``cm.context_tokens`` whose KV fits beside the weights (None: GPU memory unknown)."""
    mem = cm.hardware.memory_bytes
    if mem is None:
        return None
    free = mem * cm.tensor_parallel * gpu_memory_utilization - model_total_weight_bytes(cm.model, cm.dtype)
    per_request = cm.kv_bytes_per_token * max(cm.context_tokens, 1.0)
    return max(int(free // per_request), 0)


# ---------------------------------------------------------------------------------------------
# Construction from config (duck-typed: never imports specwatch.config)
# ---------------------------------------------------------------------------------------------


def hardware_from(preset: str | None = "h100-sxm", bandwidth_bytes_per_second: float | None = None,
                  flops: float | None = None) -> HardwareSpec:
    base = None
    if preset:
        if preset not in HARDWARE_PRESETS:
            raise ValueError(f"hardware: unknown preset '{preset}' (one of {', '.join(HARDWARE_PRESETS)})")
        base = HARDWARE_PRESETS[preset]
    if base is None:
        if not bandwidth_bytes_per_second or not flops:
            raise ValueError("hardware: give a preset or both bandwidth_bytes_per_second and flops")
        return HardwareSpec("custom", float(bandwidth_bytes_per_second), {"bf16": float(flops)}, None,
                            "user-supplied bandwidth and FLOPS")
    if bandwidth_bytes_per_second or flops:
        # Raw numbers override the preset; a FLOPS override applies to every compute dtype's ratio.
        bw = float(bandwidth_bytes_per_second or base.bandwidth_bytes_per_second)
        scale = float(flops) / base.flops["bf16"] if flops else 1.0
        return HardwareSpec(base.name + "+custom", bw, {k: v * scale for k, v in base.flops.items()},
                            base.memory_bytes, base.source + "; overridden by user")
    return base


def model_from(preset: str | None = None, hf_config: Mapping[str, Any] | None = None, params: float | None = None,
               layers: int | None = None, kv_heads: int | None = None, head_dim: int | None = None) -> ModelSpec:
    if hf_config is not None:
        return model_spec_from_hf_config(hf_config)
    if preset:
        if preset not in MODEL_PRESETS:
            raise ValueError(f"model: unknown preset '{preset}' (one of {', '.join(MODEL_PRESETS)})")
        return MODEL_PRESETS[preset]
    if params:
        return model_spec_from_params(params, layers, kv_heads, head_dim)
    return MODEL_PRESETS["llama-3.1-8b"]


def cost_model_from_config(cfg: Any) -> CostModel:
    """CostModel from a specwatch Config (duck-typed). Defaults: h100-sxm + llama-3.1-8b bf16."""
    hw_cfg = getattr(cfg, "hardware", None)
    hw = hardware_from(getattr(hw_cfg, "preset", "h100-sxm") if hw_cfg is not None else "h100-sxm",
                       getattr(hw_cfg, "bandwidth_bytes_per_second", None),
                       getattr(hw_cfg, "flops", None))
    m_cfg = getattr(cfg, "model", None)
    spec = model_from(getattr(m_cfg, "preset", None), getattr(m_cfg, "hf_config", None),
                      getattr(m_cfg, "params", None), getattr(m_cfg, "layers", None),
                      getattr(m_cfg, "kv_heads", None), getattr(m_cfg, "head_dim", None))
    dtype = getattr(m_cfg, "dtype", None) or "bf16"
    d_cfg = getattr(cfg, "draft", None)
    k = getattr(d_cfg, "k", None) or 3
    draft = draft_cost_for(getattr(d_cfg, "method", "auto") or "auto", spec,
                           getattr(d_cfg, "cost_per_token", None), k)
    kwargs: dict[str, Any] = {}
    for name in ("mbu", "mfu"):
        v = getattr(hw_cfg, name, None) if hw_cfg is not None else None
        if v is not None:
            kwargs[name] = float(v)
    ov = getattr(hw_cfg, "overhead_seconds", None) if hw_cfg is not None else None
    if ov is not None:
        kwargs["overhead_seconds"] = float(ov)
    return CostModel(hardware=hw, model=spec, dtype=dtype,
                     tensor_parallel=int(getattr(cfg, "tensor_parallel", 1) or 1),
                     context_tokens=float(2048 if getattr(m_cfg, "context_tokens", None) is None
                                          else getattr(m_cfg, "context_tokens")),
                     draft=draft, profile=getattr(cfg, "profile", None), **kwargs)


# ---------------------------------------------------------------------------------------------
# Break-even, speedup, best K, schedules
# ---------------------------------------------------------------------------------------------


def breakeven_acceptance_rate(cm: CostModel, batch: float, k: float) -> float:
    """alpha*(B, K) = (T_spec/T_base − 1)/K: the vLLM acceptance rate at which speedup is 1.
    Values >= 1 mean speculation cannot pay at this batch size."""
    if k <= 0:
        raise ValueError("k must be > 0")
    return (cm.spec_step_time(batch, k) / cm.base_step_time(batch) - 1.0) / (k * cm.draft_coverage)


def expected_speedup(cm: CostModel, batch: float, k: float, alpha: float) -> float:
    """Decode throughput with speculation over without: (1 + K·alpha)·T_base/T_spec. Exact for
    vLLM V1's alpha (tokens per spec step = 1 + K·alpha, no i.i.d. assumption)."""
    if k <= 0:
        return 1.0
    return cm.tokens_per_step(k, alpha) * cm.base_step_time(batch) / cm.spec_step_time(batch, k)


def expected_speedup_for_positions(cm: CostModel, batch: float, position_rates: Sequence[float]) -> float:
    """Speedup when drafting len(p) tokens with unconditional per-position rates p_i."""
    k = len(position_rates)
    if k == 0:
        return 1.0
    return (1.0 + cm.draft_coverage * float(sum(position_rates))) * cm.base_step_time(batch) / cm.spec_step_time(batch, k)


def best_draft_length(cm: CostModel, batch: float, position_rates: Sequence[float]) -> int:
    """Best K' in 0..len(p) (0 = disable). Truncating a chain draft keeps p_0..p_{K'-1}
    (COSTMODEL.md §4), so speedup(K') uses the first K' rates.

    Scan K' = 1, 2, ... and stop at the first drop (TurboSpec). The scan starts at K'=1 rather
    than comparing against K'=0 first: a fixed per-proposal draft cost can make K'=1 lose while
    K'=2 wins, so K'=0 is chosen only if the best scanned K' does not beat 1.
    """
    p = list(position_rates)
    if not p:
        return 0
    base = cm.base_step_time(batch)
    best_k, best_s = 0, 1.0
    prev = None
    tau = 1.0
    for kk in range(1, len(p) + 1):
        tau += cm.draft_coverage * float(p[kk - 1])
        s = tau * base / cm.spec_step_time(batch, kk)
        if prev is not None and s < prev:
            break
        if s > best_s:
            best_k, best_s = kk, s
        prev = s
    return best_k


def per_token_rate_from_alpha(alpha: float, k: float) -> float:
    """Solve alpha_V1·K = a(1−a^K)/(1−a) for the i.i.d. per-token rate a (bisection; monotone)."""
    target = max(0.0, min(float(alpha), 1.0)) * k
    if target <= 0:
        return 0.0
    if target >= k:
        return 1.0

    def f(a: float) -> float:
        return sum(a ** (i + 1) for i in range(int(round(k)))) if k == int(k) else a * (1 - a ** k) / (1 - a)

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def position_rates_from_alpha(alpha: float, k: int, extend_to: int | None = None) -> tuple[float, ...]:
    """p_i = a^(i+1) from vLLM's alpha and K under an i.i.d. per-token assumption."""
    a = per_token_rate_from_alpha(alpha, k)
    return tuple(a ** (i + 1) for i in range(extend_to or k))


#: Largest batch max_speculative_batch_size looks at (vLLM's max_num_seqs is 256-1024 in practice).
MAX_BATCH_LIMIT = 1024


def max_speculative_batch_size(cm: CostModel, k: float, alpha: float, limit: int = MAX_BATCH_LIMIT) -> int | None:
    """Largest integer batch at which (k, alpha) still gives speedup > 1.

    0 when it does not pay even at batch 1; ``limit`` when it still pays at ``limit``;
    None when not computable (k <= 0). Doubling then bisection (speedup falls with batch
    once verification leaves the memory-bound regime)."""
    if k is None or alpha is None or k <= 0:
        return None

    def pays(b: int) -> bool:
        return expected_speedup(cm, b, k, alpha) > 1.0

    if not pays(1):
        return 0
    lo = 1
    hi = 2
    while hi <= limit and pays(hi):
        lo, hi = hi, hi * 2
    if hi > limit:
        return limit if pays(limit) else _bisect_last(pays, lo, limit)
    return _bisect_last(pays, lo, hi)


def _bisect_last(pays, lo: int, hi: int) -> int:
    """Largest b in [lo, hi) with pays(b), given pays(lo) and not pays(hi)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pays(mid):
            lo = mid
        else:
            hi = mid
    return lo


def recommend_schedule(cm: CostModel, position_rates: Sequence[float], max_batch: int = 512) -> list[list[int]]:
    """V1 ``num_speculative_tokens_per_batch_size``: ``[[lo, hi, K], ...]`` covering 1..max_batch,
    inclusive ranges, first range starting at 1, K non-increasing in batch, K = 0 disables."""
    if max_batch < 1:
        raise ValueError("max_batch must be >= 1")
    p = tuple(position_rates)
    cache: dict[int, int] = {}

    def best(b: int) -> int:
        if b not in cache:
            cache[b] = best_draft_length(cm, b, p)
        return cache[b]

    # best K' falls with batch (verification cost rises), so evaluate the ends of a range and
    # split it only where they differ: O(bands · log max_batch) evaluations instead of max_batch.
    ks = [0] * (int(max_batch) + 1)

    def fill(lo: int, hi: int) -> None:
        k_lo, k_hi = best(lo), best(hi)
        if k_lo == k_hi or hi - lo <= 1:
            for b in range(lo, hi + 1):
                ks[b] = k_lo if b < hi else k_hi
            return
        mid = (lo + hi) // 2
        fill(lo, mid)
        fill(mid, hi)

    fill(1, int(max_batch))
    bands: list[list[int]] = []
    cap = len(p)
    for b in range(1, int(max_batch) + 1):
        kk = min(ks[b], cap)  # the schedule must never grow K with batch
        cap = kk
        if bands and bands[-1][2] == kk:
            bands[-1][1] = b
        else:
            bands.append([b, b, kk])
    return bands


def speculative_config(method: str | None, k: int, schedule: Sequence[Sequence[int]] | None = None) -> dict[str, Any]:
    """Keys to merge into ``--speculative-config`` (keep your drafter's ``model`` path).

    Never emits ``disable_by_batch_size``: vLLM V1 ignores it (removed by PR #35060). A schedule
    that is one band with K equal to ``k`` is left out (it is the same as no schedule)."""
    if k is None or int(k) < 1:
        raise ValueError("num_speculative_tokens must be >= 1 (to disable, remove --speculative-config)")
    out: dict[str, Any] = {}
    if method and method != "auto":
        out["method"] = method
    out["num_speculative_tokens"] = int(k)
    if schedule:
        sched = [[int(lo), int(hi), int(kk)] for lo, hi, kk in schedule]
        if any(kk > int(k) for _, _, kk in sched):
            raise ValueError("every K in the schedule must be <= num_speculative_tokens")
        if not (len(sched) == 1 and sched[0][2] == int(k)):
            out["num_speculative_tokens_per_batch_size"] = sched
    return out
