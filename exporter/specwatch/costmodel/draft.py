"""Drafters: method names, the size of EAGLE/EAGLE-3/MTP/Medusa heads and how drafting is costed.

``DraftCost`` only describes the drafter; ``CostModel.draft_time`` (roofline.py) turns it into
seconds on the configured hardware. Defaults and their sources: docs/costmodel.md ("Draft cost").
"""

from __future__ import annotations

from dataclasses import dataclass

from specwatch.costmodel.errors import CostModelError
from specwatch.costmodel.model_presets import MODEL_PRESETS
from specwatch.costmodel.models import ModelSpec

DRAFT_METHODS = ("auto", "ngram", "eagle", "eagle3", "mtp", "draft_model", "medusa", "suffix")
#: vLLM method names that cost like another: ngram_gpu (0.20+) is n-gram lookup on the GPU.
METHOD_ALIASES = {"ngram_gpu": "ngram"}

#: Fixed cost of one EAGLE/MTP/Medusa proposal round beyond its head's weight reads:
#: SpecDecode-Bench's EAGLE draft fit is 2.135 ms + tiny per-token terms on H100 for K≈3;
#: three reads of an 8B EAGLE head (~1.55 GB) explain ~1.6 ms of it.
DEFAULT_DRAFT_FIXED_SECONDS = 0.4e-3
#: n-gram / suffix drafting runs on the CPU: 0.59 % of verify time (SpecDecode-Bench).
NGRAM_FRACTION_OF_VERIFY = 0.0059
#: EAGLE-3 heads predict over a reduced draft vocabulary (32k for the Llama-3 heads).
EAGLE3_DRAFT_VOCAB = 32000
#: The draft model assumed for ``draft_model`` when none is given.
DEFAULT_DRAFT_MODEL = "llama-3.2-1b"


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
        return float(0.78e9 * (target.dense_params / 8.03e9) ** 0.44)
    vocab = target.vocab_size or 32000
    attn = target.attention_params_per_layer or 4.0 * h * h
    mlp = target.mlp_params_per_layer or (target.expert_params * max(target.experts_per_token, 1))
    if method == "eagle3":
        kv_dim = (target.kv_heads or 8) * (target.head_dim or h // 32)
        q_dim = (target.num_attention_heads or 32) * (target.head_dim or h // 32)
        attn3 = 2 * h * q_dim + 2 * (2 * h * kv_dim) + q_dim * h
        return attn3 + mlp + 3 * h * h + h * (draft_vocab or min(vocab, EAGLE3_DRAFT_VOCAB))
    if method == "medusa":
        return float(max(k, 1) * h * h + h * vocab)
    return attn + mlp + 2 * h * h + h * vocab  # eagle, mtp


def draft_head_kv_bytes_per_token(target: ModelSpec) -> float:
    """KV of a one-layer head: the KV of one of the target's full-attention layers."""
    kv_layers = target.kv_layers if target.kv_layers else target.layers
    return target.kv_bytes_per_token_bf16 / max(kv_layers, 1)


@dataclass(frozen=True)
class DraftCost:
    """How drafting time is computed for one method (see CostModel.draft_time)."""

    method: str = "eagle3"
    cost_per_token: float | None = None  # fraction of a plain target step per drafted token
    head_params: float = 0.0  # EAGLE/MTP/Medusa: params streamed per draft step
    head_kv_bytes_per_token: float = 0.0
    head_steps_per_token: bool = True  # Medusa evaluates all heads in one pass
    fixed_seconds: float = DEFAULT_DRAFT_FIXED_SECONDS
    draft_model: ModelSpec | None = None  # draft_model: a full small model, K forwards (draft.model)
    draft_dtype: str = "bf16"
    reference_k: int = 3  # K over which the per-proposal fixed cost is spread


def canonical_method(method: str | None) -> str:
    """vLLM's method name as the cost class it drafts like; ``auto`` is EAGLE-3 (the common head)."""
    m = (method or "auto").lower()
    m = METHOD_ALIASES.get(m, m)
    return "eagle3" if m in ("auto", "") else m


def draft_cost_for(
    method: str,
    target: ModelSpec,
    cost_per_token: float | None = None,
    k: int = 3,
    draft_model: ModelSpec | None = None,
    draft_dtype: str = "bf16",
) -> DraftCost:
    """Default draft cost for a method. ``auto`` is treated as EAGLE-3 (the common production head)."""
    m = canonical_method(method)
    if m not in DRAFT_METHODS:
        raise CostModelError(
            "draft.method", f"draft.method: unknown method '{method}' (one of {', '.join(DRAFT_METHODS)})"
        )
    if cost_per_token is not None:
        if not (0 <= cost_per_token < 10):
            raise CostModelError("draft.cost_per_token", "draft.cost_per_token must be in [0, 10)")
        return DraftCost(method=m, cost_per_token=float(cost_per_token), draft_model=draft_model)
    if m in ("ngram", "suffix"):
        return DraftCost(method=m, fixed_seconds=0.0, draft_model=draft_model, draft_dtype=draft_dtype)
    if m == "draft_model":
        dm = draft_model or MODEL_PRESETS[DEFAULT_DRAFT_MODEL]
        return DraftCost(method=m, draft_model=dm, fixed_seconds=0.0, draft_dtype=draft_dtype)
    return DraftCost(
        draft_model=draft_model,  # kept for a later with_method("draft_model")
        draft_dtype=draft_dtype,
        method=m,
        reference_k=max(int(k), 1),
        head_params=draft_head_params(target, m, k),
        head_kv_bytes_per_token=draft_head_kv_bytes_per_token(target) if m != "medusa" else 0.0,
        head_steps_per_token=(m != "medusa"),
    )
