"""vLLM's metric names and quirks, as an EngineSchema.

Reads the V1 names (0.8.3 .. 0.33), the pre-0.10.2 ITL name (`time_per_output_token_seconds`),
the per-position draft counter where vLLM exports it, and the V0 engine's gauges. Counters keep
one series per (engine[, position | le]) so the window can apply the Prometheus reset rule per
series before summing over engines. docs/architecture.md §5 lists each name per vLLM version.
"""

from __future__ import annotations

from collections.abc import Collection

from specwatch.engines.schema import CounterSource, EngineSchema, engine_steps, itl_part, per_position, plain
from specwatch.engines.series import Counter

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
# Draft tokens proposed per position: where exported, p_i's exact denominator (variable-length drafts).
DRAFT_TOKENS_PER_POS = "vllm:spec_decode_num_draft_tokens_per_pos"
RUNNING = "vllm:num_requests_running"
GENERATION = "vllm:generation_tokens"
PROMPT = "vllm:prompt_tokens"  # prefill tokens: the learned step-time curve counts them per step
ITL = "vllm:inter_token_latency_seconds"
ITL_LEGACY = "vllm:time_per_output_token_seconds"  # same observations; removed in 0.15
ITERATION_TOKENS = "vllm:iteration_tokens_total"  # a histogram despite the name: one obs per engine step
V0_ACCEPTANCE_RATE = "vllm:spec_decode_draft_acceptance_rate"  # lifetime ratio, V0 engine only
V0_EFFICIENCY = "vllm:spec_decode_efficiency"

SCHEMA_V1 = "v1"
SCHEMA_V1_LEGACY_ITL = "v1-legacy-itl"
SCHEMA_V0 = "v0"


def detect_schema(families: Collection[str], prefix: str = "vllm:") -> str:
    """The vLLM schema a payload speaks (`prefix`: the names' prefix, another for a re-export)."""
    if prefix + V0_ACCEPTANCE_RATE.removeprefix("vllm:") in families:
        return SCHEMA_V0
    if prefix + ITL.removeprefix("vllm:") in families:
        return SCHEMA_V1
    if prefix + ITL_LEGACY.removeprefix("vllm:") in families:
        return SCHEMA_V1_LEGACY_ITL
    return SCHEMA_V1


def vllm_shaped(
    name: str, prefix: str, *, series_labels: tuple[str, ...] = ("engine",), summary: str = ""
) -> EngineSchema:
    """vLLM's schema under another prefix (a server that re-exports vLLM's metrics renamed)."""

    def named(family: str) -> str:
        return prefix + family.removeprefix("vllm:")

    # V0's spec counters are sums of running totals (vLLM PR #15415): unusable, so skipped in V0.
    v0 = (SCHEMA_V0,)
    return EngineSchema(
        name=name,
        counters=(
            CounterSource((named(DRAFTS),), plain(Counter.DRAFTS), True, True, skip_in=v0, counter=Counter.DRAFTS),
            CounterSource(
                (named(DRAFT_TOKENS),),
                plain(Counter.DRAFT_TOKENS),
                True,
                True,
                skip_in=v0,
                counter=Counter.DRAFT_TOKENS,
            ),
            CounterSource(
                (named(ACCEPTED),), plain(Counter.ACCEPTED), True, True, skip_in=v0, counter=Counter.ACCEPTED
            ),
            CounterSource((named(GENERATION),), plain(Counter.GEN), False, True, counter=Counter.GEN),
            CounterSource((named(PROMPT),), plain(Counter.PROMPT), False, True, counter=Counter.PROMPT),
            CounterSource(
                (named(ACCEPTED_PER_POS),), per_position(Counter.POS), True, False, skip_in=v0, counter=Counter.POS
            ),
            CounterSource(
                (named(ITL), named(ITL_LEGACY)),
                itl_part,
                False,
                True,
                kind="histogram",
                unmatched_labels=("le",),
                counter=Counter.ITL,
            ),
            CounterSource(
                (named(ITERATION_TOKENS),), engine_steps, False, False, kind="histogram", counter=Counter.STEPS
            ),
            CounterSource(
                (named(DRAFT_TOKENS_PER_POS),),
                per_position(Counter.POS_DRAFTS),
                True,
                False,
                skip_in=v0,
                counter=Counter.POS_DRAFTS,
            ),
        ),
        running=named(RUNNING),
        lifetime_gauges={named(V0_ACCEPTANCE_RATE): "v0_acceptance_rate", named(V0_EFFICIENCY): "v0_efficiency"},
        schema_of=lambda families: detect_schema(families, prefix),
        series_labels=series_labels,
        summary=summary,
    )


VLLM = vllm_shaped("vllm", "vllm:", summary="vLLM V1 (0.8.3+) and V0 `/metrics`")
