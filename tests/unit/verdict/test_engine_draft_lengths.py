"""Where an engine's model drafts can be cut short (llama.cpp: by the tokens left to generate and
--spec-draft-p-min), p_i is over all drafts, as the engine itself reports it; a vLLM model drafter
drafts K tokens every step, so a shorter mean there is spread over the last positions. The
fixture is two polls of a real llama.cpp server with a draft model (K=4), before and after load."""

from __future__ import annotations

import json

from specwatch.config import from_mapping
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.windows.derive import position_rates
from support.paths import FIXTURES

CONFIG = {
    "poll_interval": "5s",
    "windows": ["1m"],
    "draft": {"method": "draft_model"},
    "decision": {"min_drafts": 10, "hold": 1},
}
REAL = FIXTURES / "engines" / "llamacpp-real"
# The real server's deltas between the two polls.
DRAFTS, DRAFT_TOKENS, ACCEPTED = 778, 2967, 1006
ACCEPTED_BY_POSITION = (402, 301, 176, 127)


def _evaluation() -> RouteEvaluation:
    lines = [
        json.dumps({"t": t, "target": "vllm", "text": (REAL / f"{name}.prom").read_text()})
        for t, name in ((1000.0, "before"), (1030.0, "after"))
    ]
    pipeline = Pipeline(from_mapping(CONFIG))
    list(replay(from_mapping(CONFIG), lines, pipeline))
    return pipeline.evaluate(1030.0)[0]


def test_llamacpp_drafts_cut_short_give_position_rates_over_all_drafts():
    evaluation = _evaluation()
    assert evaluation.stats.engine == "llamacpp"
    assert evaluation.stats.draft_length == DRAFT_TOKENS / DRAFTS < 4
    assert list(evaluation.position_rates or ()) == [a / DRAFTS for a in ACCEPTED_BY_POSITION]
    assert evaluation.acceptance_rate == ACCEPTED / DRAFT_TOKENS
    assert evaluation.mean_acceptance_length == 1 + ACCEPTED / DRAFTS


def test_a_fixed_length_drafter_reads_the_same_counters_with_a_smaller_last_denominator():
    fixed = position_rates(ACCEPTED_BY_POSITION, DRAFTS, DRAFT_TOKENS, variable_length=False)
    assert fixed[:3] == tuple(a / DRAFTS for a in ACCEPTED_BY_POSITION[:3])
    assert fixed[3] > ACCEPTED_BY_POSITION[3] / DRAFTS
