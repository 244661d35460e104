"""The one way to build a CostModel from user-facing settings.

``build_cost_model`` takes every setting as a named parameter; the sidecar reaches it through
``specwatch.config.cost_model`` and the lesson commands and the simulator call it directly, so all of
them get the same numbers for the same inputs. Bad inputs raise CostModelError naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping

from specwatch.costmodel.draft import draft_cost_for
from specwatch.costmodel.engine_priors import prior_for
from specwatch.costmodel.errors import CostModelError
from specwatch.costmodel.hardware import DEFAULT_HARDWARE, hardware_from
from specwatch.costmodel.model_presets import model_from
from specwatch.costmodel.models import HF_CONFIG_KEY
from specwatch.costmodel.profile import StepTimeCurve
from specwatch.costmodel.roofline import (
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_MBU,
    DEFAULT_MFU,
    DEFAULT_OVERHEAD_SECONDS,
    CostModel,
)

#: Draft length assumed when none is configured (spreads the per-proposal draft cost).
DEFAULT_DRAFT_K = 3


def build_cost_model(
    *,
    hardware: str | None = DEFAULT_HARDWARE,
    bandwidth_bytes_per_second: float | None = None,
    flops: float | None = None,
    mbu: float | None = None,
    mfu: float | None = None,
    overhead_seconds: float | None = None,
    tensor_parallel: int = 1,
    model: str | None = None,
    model_config: Mapping[str, object] | None = None,
    model_params: float | None = None,
    model_layers: int | None = None,
    model_kv_heads: int | None = None,
    model_head_dim: int | None = None,
    dtype: str = "bf16",
    context_tokens: float = DEFAULT_CONTEXT_TOKENS,
    draft_method: str = "auto",
    draft_cost_per_token: float | None = None,
    draft_k: int = DEFAULT_DRAFT_K,
    profile: StepTimeCurve | None = None,
    draft_model: str | None = None,
    draft_model_config: Mapping[str, object] | None = None,
    engine: str | None = None,
    engine_version: str | None = None,
    setup_assumed: bool = False,
) -> CostModel:
    """A CostModel for one target on one GPU set.

    hardware: preset name, or None with ``bandwidth_bytes_per_second`` and ``flops`` (bf16);
      with a preset those two override it. ``mbu``/``mfu``/``overhead_seconds``: None = default.
    model: preset name; ``model_config`` (a Hugging Face config.json dict) wins over it; a bare
      ``model_params`` count (with optional KV geometry) is used when neither is given; nothing
      at all means llama-3.1-8b.
    dtype: weight dtype. context_tokens: KV tokens per request.
    draft_method: vLLM method (``auto`` costs like EAGLE-3); ``draft_cost_per_token`` overrides the
      modelled cost; ``draft_k`` spreads the per-proposal fixed cost.
    profile: a measured step-time curve replacing the roofline (profile.py); the drafter is still
      priced by the roofline, relative to the target's roofline step (docs/costmodel.md, "Draft cost").
    draft_model / draft_model_config: the drafter of ``draft_method: draft_model`` (preset name, or a
      Hugging Face config.json dict); neither = llama-3.2-1b.
    engine / engine_version: the serving engine, whose fixed costs of speculation (per verify step,
      per request, per drafting pass) come from engine_priors.prior_for; None: the generic constants
      (the sidecar passes the engine it detects when none is configured). The prior's calibration
      error becomes the model's (``calibration_log_error``, ``calibration_batch_range``).
    setup_assumed: neither hardware nor model was given, so both are defaults (the speedup's
      interval widens until a learned curve replaces the guess; costmodel/uncertainty.py).

    Raises CostModelError whose ``key`` is the config key at fault.
    """
    hw = hardware_from(hardware, bandwidth_bytes_per_second, flops)
    try:
        spec = model_from(model, model_config, model_params, model_layers, model_kv_heads, model_head_dim)
    except CostModelError:
        raise
    except (ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
        # A config.json with values of the wrong type or shape: report it under its key.
        if model_config is None:
            raise
        raise CostModelError(HF_CONFIG_KEY, str(exc)) from exc
    drafter = None
    if draft_model is not None or draft_model_config is not None:
        try:
            drafter = model_from(None if draft_model_config is not None else draft_model, draft_model_config)
        except (ValueError, KeyError, TypeError, ZeroDivisionError) as exc:
            raise CostModelError("draft.model", str(exc)) from exc
    draft = draft_cost_for(draft_method, spec, draft_cost_per_token, draft_k, draft_model=drafter)
    # Built with the generic fixed costs (the model's defaults), then given the engine's prior the
    # one way every caller gives it (CostModel.with_prior: the per-pass cost only for a draft head).
    generic = CostModel(
        hardware=hw,
        model=spec,
        dtype=dtype,
        tensor_parallel=int(tensor_parallel),
        mbu=DEFAULT_MBU if mbu is None else float(mbu),
        mfu=DEFAULT_MFU if mfu is None else float(mfu),
        overhead_seconds=DEFAULT_OVERHEAD_SECONDS if overhead_seconds is None else float(overhead_seconds),
        context_tokens=float(context_tokens),
        draft=draft,
        profile=profile,
        setup_assumed=setup_assumed,
    )
    return generic.with_prior(prior_for(engine, engine_version))
