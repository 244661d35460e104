"""The config sections of the cost model: `hardware`, `model`, `draft` and `learning` (the
step-time curve learned online). Part of the config schema table (config/schema.py holds its root).

The choices (hardware and model presets, weight dtypes, drafting methods) are the cost model's own
lists, imported when first asked for so that loading a config does not import the cost model."""

from __future__ import annotations

from specwatch.config import result
from specwatch.config.file_kinds import JsonFile, ModelRef
from specwatch.config.kinds import FRACTION, POSITIVE, Choice, Duration, Flag, Name, Number
from specwatch.config.mapping_kinds import SpeculativeConfig
from specwatch.config.nodes import Key, Section
from specwatch.costmodel import DRAFT_METHODS, DTYPE_BYTES, HARDWARE_PRESETS, METHOD_ALIASES, MODEL_PRESETS
from specwatch.costmodel.engine_priors import ENGINE_NAMES


def hardware_presets() -> tuple[str, ...]:
    return tuple(HARDWARE_PRESETS)


def model_presets() -> tuple[str, ...]:
    return tuple(MODEL_PRESETS)


def weight_dtypes() -> tuple[str, ...]:
    return tuple(DTYPE_BYTES)


def draft_methods() -> tuple[str, ...]:
    return (*DRAFT_METHODS, *METHOD_ALIASES)


HARDWARE = Section(
    "hardware",
    result.HardwareConfig,
    shorthand="preset",
    doc="a preset name, or a mapping with a preset and/or measured figures",
    keys=(
        Key(
            "preset",
            Choice(hardware_presets, noun="preset"),
            "GPU preset of the cost model",
            example="h200",
            nullable=True,
            default=None,
        ),
        Key("bandwidth_bytes_per_second", POSITIVE, "HBM bandwidth per GPU", example=3.35e12, nullable=True),
        Key("flops", POSITIVE, "dense peak FLOP/s per GPU", example=989e12, nullable=True),
        Key("mbu", FRACTION, "achieved fraction of the bandwidth", example=0.7, nullable=True),
        Key("mfu", FRACTION, "achieved fraction of the FLOP/s", example=0.5, nullable=True),
        Key("overhead_seconds", Number(minimum=0), "fixed cost per engine step", example=0.002, nullable=True),
    ),
)

MODEL = Section(
    "model",
    result.ModelConfig,
    doc="the target model: a preset, a config.json, or a parameter count",
    keys=(
        Key(
            "preset",
            Choice(model_presets, noun="preset"),
            "model preset of the cost model",
            example="llama-3.1-8b",
            nullable=True,
        ),
        Key(
            "config_json",
            JsonFile(),
            "path of the model's Hugging Face config.json (relative to this file)",
            example="/models/llama/config.json",
            nullable=True,
            fields=("config_json", "hf_config"),
        ),
        Key(
            "params",
            Number(minimum=0, exclusive_minimum=True, numeric_strings=True),
            "parameter count",
            example=8e9,
            nullable=True,
        ),
        Key("dtype", Choice(weight_dtypes), "weight dtype", example="fp8"),
        Key("layers", Number(minimum=1, integer=True), "decoder layers (with params)", example=32, nullable=True),
        Key("kv_heads", Number(minimum=1, integer=True), "KV heads (with params)", example=8, nullable=True),
        Key("head_dim", Number(minimum=1, integer=True), "head dimension (with params)", example=128, nullable=True),
        Key("context_tokens", Number(minimum=0, integer=True), "mean context per request", example=4096, nullable=True),
    ),
)

DRAFT = Section(
    "draft",
    result.DraftConfig,
    doc="the speculative method (vLLM does not export it)",
    keys=(
        Key(
            "method",
            Choice(draft_methods),
            "drafter; auto infers n-gram vs model-based from the drafts",
            example="eagle3",
        ),
        Key(
            "cost_per_token",
            Number(minimum=0, maximum=10, exclusive_maximum=True),
            "fraction of a plain target step per drafted token; null: the method's default",
            example=0.05,
            nullable=True,
        ),
        Key(
            "k",
            Number(minimum=1, maximum=64, integer=True),
            "configured num_speculative_tokens; null: read from the metrics",
            example=4,
            nullable=True,
        ),
        Key(
            "model",
            ModelRef(model_presets),
            "draft model of method draft_model: a model preset or its config.json path; null: llama-3.2-1b",
            example="llama-3.2-1b",
            nullable=True,
            fields=("model", "model_hf_config"),
        ),
        Key(
            "config",
            SpeculativeConfig(),
            "the --speculative-config vLLM runs with (mapping or JSON string); the observed draft "
            "length is checked against its K (and num_speculative_tokens_per_batch_size schedule)",
            example='{"method":"eagle3","num_speculative_tokens":4,'
            '"num_speculative_tokens_per_batch_size":[[1,16,4],[17,512,2]]}',
            nullable=True,
        ),
    ),
)


ENGINE = Section(
    "engine",
    result.EngineConfig,
    shorthand="name",
    doc="the serving engine, whose fixed costs of speculation the cost model charges (docs/costmodel.md)",
    keys=(
        Key(
            "name",
            Choice(lambda: ENGINE_NAMES),
            "engine family; null: the generic fixed costs (the per-engine fits are not yet validated out of sample)",
            example="vllm",
            nullable=True,
        ),
        Key(
            "version",
            Name(),
            "engine version (vLLM below 0.8 is the V0 engine); null: the current one",
            example="0.11.0",
            nullable=True,
        ),
    ),
)


LEARNING = Section(
    "learning",
    result.LearningConfig,
    doc="the step-time curve learned from the server's own metrics (docs/costmodel.md); a profile overrides it",
    keys=(
        Key(
            "enabled",
            Flag(),
            "learn the step-time curve online; null (auto): only when hardware and model are not configured",
            example=True,
            nullable=True,
        ),
        Key(
            "min_points",
            Number(minimum=1, maximum=10000, integer=True),
            "points (windows) before the learned curve replaces the prior",
            example=12,
        ),
        Key("half_life", Duration(), "age at which a point weighs half", example="24h"),
        Key("point_seconds", Duration(), "shortest span of one point", example="30s"),
    ),
)
