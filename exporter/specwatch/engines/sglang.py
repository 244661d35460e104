"""SGLang's metric names (`--enable-metrics`), as an EngineSchema: a gauge-only engine for acceptance.

SGLang exports its acceptance as gauges the scheduler sets at each decode log: the acceptance
rate and length it measured over the batches since its previous log, and the draft length it runs
with (`speculative_num_steps`, which `--speculative-adaptive` moves). There is no drafted-token or
accepted-token counter and no per-position series. specwatch reads the gauges at every poll and a
window's value is their mean over the polls that followed engine activity (windows/gauges.py;
fleet mode computes the same mean in PromQL): a time mean of SGLang's own running estimate, not a
ratio of window increases. The verify-call
counter (one per verify step of a request, counted when the request finishes) is the window's
drafts, the sample the guard counts. Its inter-token-latency histogram observes one value per
token (a chunk's interval over its tokens), not vLLM's one per engine step, so ITL is not read.
docs/engines.md has the table.
"""

from __future__ import annotations

from collections.abc import Collection

from specwatch.engines.schema import CounterSource, EngineSchema, plain
from specwatch.engines.series import Counter, Gauge

VERIFY_CALLS = "sglang:spec_verify_calls"
ACCEPT_RATE = "sglang:spec_accept_rate"
ACCEPT_LENGTH = "sglang:spec_accept_length"
NUM_STEPS = "sglang:spec_num_steps"  # the active draft length; absent before SGLang's adaptive tiers
GENERATION = "sglang:generation_tokens"
PROMPT = "sglang:prompt_tokens"
RUNNING = "sglang:num_running_reqs"

SCHEMA = "sglang"


def _schema(families: Collection[str]) -> str:
    return SCHEMA


SGLANG = EngineSchema(
    name="sglang",
    counters=(
        CounterSource((VERIFY_CALLS,), plain(Counter.DRAFTS), True, True, counter=Counter.DRAFTS),
        CounterSource((GENERATION,), plain(Counter.GEN), False, True, counter=Counter.GEN),
        CounterSource((PROMPT,), plain(Counter.PROMPT), False, True, counter=Counter.PROMPT),
    ),
    running=RUNNING,
    window_gauges={
        ACCEPT_RATE: Gauge.ACCEPTANCE_RATE,
        ACCEPT_LENGTH: Gauge.ACCEPTANCE_LENGTH,
        NUM_STEPS: Gauge.DRAFT_LENGTH,
    },
    schema_of=_schema,
    summary="SGLang `/metrics` (--enable-metrics): acceptance from gauges",
)
