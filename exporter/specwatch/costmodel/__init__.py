"""Step-time cost model, break-even acceptance, best draft length and V1 schedules.

Pure functions only: no I/O, and no import of ``specwatch.config`` at run time (the config
package validates names against the presets defined here). Modules, in the order they build on each other:

- ``errors``     CostModelError (carries the config key at fault)
- ``hardware``   HardwareSpec, HARDWARE_PRESETS, hardware_from
- ``models``     ModelSpec, Hugging Face config.json parsing, weight bytes
- ``model_presets``  MODEL_HF_CONFIGS, MODEL_SOURCES, MODEL_PRESETS, model_from
- ``draft``      draft methods, head sizes, DraftCost, draft_cost_for
- ``profile``    measured step-time curves (Profile, parse_profile, the StepTimeCurve seam)
- ``roofline``   CostModel: step time of the target, draft time, spec step time
- ``search``     the one bisection
- ``breakeven``  break-even, expected speedup, best K, max speculative batch, schedules, config
- ``build``      build_cost_model (named parameters; specwatch.config.cost_model builds one from a Config)
- ``uncertainty``  the interval of a predicted speedup (model error, alpha's noise) and canary length

The model and its calibration are documented in docs/costmodel.md.
"""

from __future__ import annotations

from specwatch.costmodel.breakeven import (
    MAX_BATCH_LIMIT,
    ZERO_K_BAND_SLOWDOWN_POINTS,
    OverheadBreakdown,
    best_draft_length,
    breakeven_acceptance_rate,
    expected_speedup,
    expected_speedup_for_positions,
    max_speculative_batch_size,
    overhead_breakdown,
    per_token_rate_from_alpha,
    position_rates_from_alpha,
    recommend_schedule,
    zero_k_band_slowdown,
    zero_k_band_speedup,
)
from specwatch.costmodel.build import DEFAULT_DRAFT_K, build_cost_model
from specwatch.costmodel.draft import (
    DEFAULT_DRAFT_FIXED_SECONDS,
    DEFAULT_DRAFT_MODEL,
    DRAFT_METHODS,
    EAGLE3_DRAFT_VOCAB,
    METHOD_ALIASES,
    NGRAM_FRACTION_OF_VERIFY,
    DraftCost,
    canonical_method,
    draft_cost_for,
    draft_head_kv_bytes_per_token,
    draft_head_params,
)
from specwatch.costmodel.engine_priors import ENGINE_NAMES, ENGINE_PRIORS, EnginePrior, prior_for
from specwatch.costmodel.errors import CostModelError
from specwatch.costmodel.hardware import COMPUTE_DTYPE, DEFAULT_HARDWARE, HARDWARE_PRESETS, HardwareSpec, hardware_from
from specwatch.costmodel.model_presets import DEFAULT_MODEL, MODEL_HF_CONFIGS, MODEL_PRESETS, MODEL_SOURCES, model_from
from specwatch.costmodel.models import (
    DTYPE_BYTES,
    ModelSpec,
    model_spec_from_hf_config,
    model_spec_from_params,
    model_total_weight_bytes,
    model_weight_bytes,
)
from specwatch.costmodel.profile import Profile, StepTimeCurve, parse_profile
from specwatch.costmodel.roofline import (
    DEFAULT_ALLREDUCE_SECONDS_PER_LAYER,
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_MBU,
    DEFAULT_MFU,
    DEFAULT_OVERHEAD_SECONDS,
    CostModel,
    draft_coverage,
    max_concurrency_by_memory,
)
from specwatch.costmodel.search import last_true, solve_increasing

__all__ = [
    "COMPUTE_DTYPE",
    "DEFAULT_ALLREDUCE_SECONDS_PER_LAYER",
    "DEFAULT_CONTEXT_TOKENS",
    "DEFAULT_DRAFT_FIXED_SECONDS",
    "DEFAULT_DRAFT_K",
    "DEFAULT_DRAFT_MODEL",
    "DEFAULT_HARDWARE",
    "DEFAULT_MBU",
    "DEFAULT_MFU",
    "DEFAULT_MODEL",
    "DEFAULT_OVERHEAD_SECONDS",
    "DRAFT_METHODS",
    "DTYPE_BYTES",
    "EAGLE3_DRAFT_VOCAB",
    "ENGINE_NAMES",
    "ENGINE_PRIORS",
    "HARDWARE_PRESETS",
    "MAX_BATCH_LIMIT",
    "METHOD_ALIASES",
    "MODEL_HF_CONFIGS",
    "MODEL_PRESETS",
    "MODEL_SOURCES",
    "NGRAM_FRACTION_OF_VERIFY",
    "ZERO_K_BAND_SLOWDOWN_POINTS",
    "CostModel",
    "CostModelError",
    "DraftCost",
    "EnginePrior",
    "HardwareSpec",
    "ModelSpec",
    "OverheadBreakdown",
    "Profile",
    "StepTimeCurve",
    "best_draft_length",
    "breakeven_acceptance_rate",
    "build_cost_model",
    "canonical_method",
    "draft_cost_for",
    "draft_coverage",
    "draft_head_kv_bytes_per_token",
    "draft_head_params",
    "expected_speedup",
    "expected_speedup_for_positions",
    "hardware_from",
    "last_true",
    "max_concurrency_by_memory",
    "max_speculative_batch_size",
    "model_from",
    "model_spec_from_hf_config",
    "model_spec_from_params",
    "model_total_weight_bytes",
    "model_weight_bytes",
    "overhead_breakdown",
    "parse_profile",
    "per_token_rate_from_alpha",
    "position_rates_from_alpha",
    "prior_for",
    "recommend_schedule",
    "solve_increasing",
    "zero_k_band_slowdown",
    "zero_k_band_speedup",
]
