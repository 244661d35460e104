"""A loaded Config as a CostModel: the config is the only package that knows both (the cost model
takes named parameters and never reads a Config)."""

from __future__ import annotations

from specwatch.config.result import Config, HardwareConfig
from specwatch.costmodel import CostModel
from specwatch.costmodel.build import DEFAULT_DRAFT_K, build_cost_model
from specwatch.costmodel.engine_priors import EnginePrior, prior_for
from specwatch.engines.advice import VLLM_ENGINES
from specwatch.engines.vllm import SCHEMA_V0

#: Asked every poll (learning auto): built once, not a HardwareConfig per question.
_DEFAULT_HARDWARE_PRESET = HardwareConfig().preset


def config_is_default(config: Config) -> bool:
    """True when neither hardware nor model was configured: the verdict rests on assumed defaults."""
    hw, m = config.hardware, config.model
    hardware_default = (
        hw.preset == _DEFAULT_HARDWARE_PRESET and hw.bandwidth_bytes_per_second is None and hw.flops is None
    )
    model_default = m.preset is None and m.hf_config is None and m.params is None
    return hardware_default and model_default


def cost_model_from_config(cfg: Config) -> CostModel:
    """The sidecar's CostModel: ``build_cost_model`` with the values of a loaded Config."""
    hw, m, d = cfg.hardware, cfg.model, cfg.draft
    return build_cost_model(
        hardware=hw.preset,
        bandwidth_bytes_per_second=hw.bandwidth_bytes_per_second,
        flops=hw.flops,
        mbu=hw.mbu,
        mfu=hw.mfu,
        overhead_seconds=hw.overhead_seconds,
        tensor_parallel=cfg.tensor_parallel or 1,
        model=m.preset,
        model_config=m.hf_config,
        model_params=m.params,
        model_layers=m.layers,
        model_kv_heads=m.kv_heads,
        model_head_dim=m.head_dim,
        dtype=m.dtype or "bf16",
        context_tokens=m.context_tokens,
        draft_method=d.method or "auto",
        draft_cost_per_token=d.cost_per_token,
        draft_k=d.k or DEFAULT_DRAFT_K,
        profile=cfg.profile,
        draft_model=d.model if d.model_hf_config is None else None,
        draft_model_config=d.model_hf_config,
        engine=cfg.engine.name,
        engine_version=cfg.engine.version,
        # A measured profile is the target's own step time, not a guess.
        setup_assumed=cfg.profile is None and config_is_default(cfg),
    )


def learning_enabled(config: Config) -> bool:
    """learning.enabled, auto (None) meaning: when the verdict would rest on defaults. A measured
    profile always wins."""
    if config.profile is not None:
        return False
    enabled = config.learning.enabled
    return config_is_default(config) if enabled is None else enabled


def prior_source(config: Config) -> str:
    """default | preset | profile: what the verdicts rest on before (or without) a learned curve."""
    if config.profile is not None:
        return "profile"
    return "default" if config_is_default(config) else "preset"


def detected_prior(engine: str, schema: str | None) -> EnginePrior:
    """The prior of the engine a payload was read as (engines.registry name; vLLM's V0 schema: its
    V0 prior). An engine with no prior of its own gets the generic constants."""
    if engine in VLLM_ENGINES:
        return prior_for("vllm", "0" if schema == SCHEMA_V0 else None)
    return prior_for(engine)


def uses_detected_prior(config: Config) -> bool:
    """Whether routes are priced with the prior of the engine their payload shows: when ``engine:``
    is not configured and the setup is (hardware or model stated, or a profile). The priors' fixed
    costs are seconds fitted on datacenter GPUs; on a guessed setup the generic constants stand
    (the assumed setup's error dominates the interval either way)."""
    return config.engine.name is None and (config.profile is not None or not config_is_default(config))


def route_prior(config: Config, engine: str, schema: str | None) -> EnginePrior:
    """The prior a route's verdicts use: ``engine:`` when configured, else the detected engine's
    (generic on an assumed setup: ``uses_detected_prior``)."""
    if uses_detected_prior(config):
        return detected_prior(engine, schema)
    return prior_for(config.engine.name, config.engine.version)


def route_cost_model(cost_model: CostModel, config: Config, engine: str, schema: str | None) -> CostModel:
    """``cost_model`` (built from ``config``) with the route's prior (``route_prior``)."""
    if not uses_detected_prior(config):
        return cost_model
    return cost_model.with_prior(detected_prior(engine, schema))
