"""TensorRT-LLM's metric names (`trtllm-serve`, `/prometheus/metrics`), as an EngineSchema.

trtllm-serve registers its Prometheus endpoint only with `return_perf_metrics: true`. Its
speculative counters come in two kinds: per iteration (`..._num_draft_tokens`, `..._num_accepted_tokens`,
with no count of drafts) and per finished request, per draft position (`..._drafted_tokens` and
`..._accepted_tokens` with a `token_position` label). specwatch reads the per-position pair alone,
so every value of a window comes from the same requests: the drafts are the drafted tokens at
position 0 (each draft step proposes one), the draft tokens and accepted tokens their sums over the
positions, and p_i's denominator is exact. Both are counted when a request finishes, so a window
holds the requests that finished in it. No inter-token-latency histogram exists (its TPOT histogram
has one observation per request), so ITL is absent. docs/engines.md has the table.
"""

from __future__ import annotations

from collections.abc import Collection

from specwatch.engines.schema import CounterSource, EngineSchema, KeyOf, per_position, plain
from specwatch.engines.series import Counter

DRAFTED_PER_POS = "trtllm_spec_decode_drafted_tokens"
ACCEPTED_PER_POS = "trtllm_spec_decode_accepted_tokens"
GENERATION = "trtllm_generation_tokens"
PROMPT = "trtllm_prompt_tokens"
RUNNING = "trtllm_num_requests_running"
POSITION_LABEL = "token_position"

SCHEMA = "trtllm"


def _schema(families: Collection[str]) -> str:
    return SCHEMA


def _spec(
    families: tuple[str, ...], key_of: KeyOf, counter: str, select: tuple[tuple[str, str], ...] = ()
) -> CounterSource:
    return CounterSource(families, key_of, shows_speculation=True, names_engines=True, counter=counter, select=select)


TRTLLM = EngineSchema(
    name="trtllm",
    counters=(
        # Every draft step of a request proposes a token at position 0: those are its drafts.
        _spec((DRAFTED_PER_POS,), plain(Counter.DRAFTS), Counter.DRAFTS, ((POSITION_LABEL, "0"),)),
        _spec((DRAFTED_PER_POS,), plain(Counter.DRAFT_TOKENS), Counter.DRAFT_TOKENS),
        _spec((ACCEPTED_PER_POS,), plain(Counter.ACCEPTED), Counter.ACCEPTED),
        _spec((ACCEPTED_PER_POS,), per_position(Counter.POS, POSITION_LABEL), Counter.POS),
        _spec((DRAFTED_PER_POS,), per_position(Counter.POS_DRAFTS, POSITION_LABEL), Counter.POS_DRAFTS),
        CounterSource((GENERATION,), plain(Counter.GEN), False, True, counter=Counter.GEN),
        CounterSource((PROMPT,), plain(Counter.PROMPT), False, True, counter=Counter.PROMPT),
    ),
    running=RUNNING,
    schema_of=_schema,
    position_label=POSITION_LABEL,
    summary="TensorRT-LLM `trtllm-serve` `/prometheus/metrics` (return_perf_metrics)",
)
