"""LMDeploy's metric names (`lmdeploy serve api_server --enable-metrics`), as an EngineSchema.

vLLM-shaped spec-decode counters under the `lmdeploy:` prefix (lmdeploy/metrics/loggers.py,
PrometheusStatLogger), labels `model_name` and `engine` (the data-parallel rank). Its quirks: no
`_created` series (disabled at start-up); `lmdeploy:iteration_tokens_total` is observed once per
request output, not once per engine step, so it is not read as steps (the measured batch is
absent, the running gauge gives it); `lmdeploy:iter_token_latency` is the per-output inter-token
latency histogram (one observation per request per engine step, as vLLM's). Its lifetime ratio
gauges (`spec_decode_mean_accept_rate`, ...) are not read: the counters give the window's values.
"""

from __future__ import annotations

from specwatch.engines.schema import CounterSource, EngineSchema, itl_part, per_position, plain
from specwatch.engines.series import Counter

DRAFTS = "lmdeploy:spec_decode_num_drafts"
DRAFT_TOKENS = "lmdeploy:spec_decode_num_draft_tokens"
ACCEPTED = "lmdeploy:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "lmdeploy:spec_decode_num_accepted_tokens_per_pos"
GENERATION = "lmdeploy:generation_tokens"
PROMPT = "lmdeploy:prompt_tokens"
ITL = "lmdeploy:iter_token_latency"
RUNNING = "lmdeploy:num_requests_running"

LMDEPLOY = EngineSchema(
    name="lmdeploy",
    counters=(
        CounterSource((DRAFTS,), plain(Counter.DRAFTS), True, True, counter=Counter.DRAFTS),
        CounterSource((DRAFT_TOKENS,), plain(Counter.DRAFT_TOKENS), True, True, counter=Counter.DRAFT_TOKENS),
        CounterSource((ACCEPTED,), plain(Counter.ACCEPTED), True, True, counter=Counter.ACCEPTED),
        CounterSource((GENERATION,), plain(Counter.GEN), False, True, counter=Counter.GEN),
        CounterSource((PROMPT,), plain(Counter.PROMPT), False, True, counter=Counter.PROMPT),
        CounterSource((ACCEPTED_PER_POS,), per_position(Counter.POS), True, False, counter=Counter.POS),
        CounterSource((ITL,), itl_part, False, True, kind="histogram", unmatched_labels=("le",), counter=Counter.ITL),
    ),
    running=RUNNING,
    summary="LMDeploy `api_server --enable-metrics`",
)
