"""llama.cpp server's metric names (`llama-server --metrics`), as an EngineSchema.

vLLM's spec-decode counters under the `llamacpp:` prefix, rendered by the server's metrics task
(tools/server/server-task.cpp, server_task_result_metrics::to_metrics). Its quirks: the counters
move when a request *finishes* (a window sees a long generation at its end, all at once); the
per-position counter is absent until the first speculative request completed; no labels (one
series, no model name: the route is `default` unless configured); no ITL histogram and no
per-step count, so ITL quantiles and the measured batch are absent (the batch falls back to the
processing-requests gauge).
"""

from __future__ import annotations

from specwatch.engines.schema import CounterSource, EngineSchema, per_position, plain
from specwatch.engines.series import Counter

DRAFTS = "llamacpp:spec_decode_num_drafts"  # verification steps
DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "llamacpp:spec_decode_num_accepted_tokens_per_pos"
GENERATION = "llamacpp:tokens_predicted"  # generated tokens
RUNNING = "llamacpp:requests_processing"  # slots processing a request

LLAMACPP = EngineSchema(
    name="llamacpp",
    counters=(
        CounterSource((DRAFTS,), plain(Counter.DRAFTS), True, True, counter=Counter.DRAFTS),
        CounterSource((DRAFT_TOKENS,), plain(Counter.DRAFT_TOKENS), True, True, counter=Counter.DRAFT_TOKENS),
        CounterSource((ACCEPTED,), plain(Counter.ACCEPTED), True, True, counter=Counter.ACCEPTED),
        CounterSource((GENERATION,), plain(Counter.GEN), False, True, counter=Counter.GEN),
        CounterSource((ACCEPTED_PER_POS,), per_position(Counter.POS), True, False, counter=Counter.POS),
    ),
    running=RUNNING,
    drafts_vary_in_length=True,
    summary="llama.cpp `llama-server --metrics`",
)
