"""An engine flipping each poll is a mismatch, not a restart: a detected target (no
`targets[].engine`) that has spoken SGLang and answers one poll in two with a vLLM payload keeps its
SGLang windows; each vLLM poll is a failed poll named engine_mismatch (counted, its engine named),
no restart is counted and the acceptance served is SGLang's own. A target that really changed
engine is taken as the new one after ENGINE_SWITCH_POLLS payloads of it in a row."""

from __future__ import annotations

import pytest

from specwatch.config import from_mapping
from specwatch.engines.grouping import ENGINE_SWITCH_POLLS
from specwatch.sidecar.pipeline import Pipeline
from support.engine_fixtures import fixture, polls
from support.paths import FIXTURES

TARGET = "llm"
CONFIG = {
    "targets": [{"name": TARGET, "url": "http://127.0.0.1:30000/metrics"}],
    "poll_interval": "5s",
    "windows": ["30s"],
    "decision": {"min_drafts": 100, "hold": 1},
}
VLLM_PAYLOAD = (FIXTURES / "engines" / "vllm-per-pos-drafts" / "after.prom").read_text()
SGLANG_POLLS = polls(fixture("sglang", "eagle3-load.prom"))


def _alpha(pipeline: Pipeline, t: float) -> float | None:
    (evaluation,) = [e for e in pipeline.evaluate(t) if e.stats.window == "30s"]
    return evaluation.stats.acceptance_rate


def test_a_target_flipping_between_engines_each_poll_keeps_the_first_engine_and_counts_mismatches():
    plain, flipping = Pipeline(from_mapping(CONFIG)), Pipeline(from_mapping(CONFIG))
    flips = 0
    for n, (t, text) in enumerate(SGLANG_POLLS):
        assert plain.ingest(TARGET, t, text).ok
        assert flipping.ingest(TARGET, t, text).ok, "the engine it speaks is read as ever"
        if n == 0:
            continue  # the fixture's first poll is an engine not serving yet: nothing spoken
        result = flipping.ingest(TARGET, t + 2.5, VLLM_PAYLOAD)
        assert not result.ok and result.reason == "engine_mismatch"
        flips += 1
    t_last = SGLANG_POLLS[-1][0]
    (target,) = flipping.state().targets
    assert target.errors["engine_mismatch"] == flips
    assert target.resets == 0, "a flip is no restart"
    assert target.payload_engine == "vllm"
    assert _alpha(flipping, t_last) == pytest.approx(_alpha(plain, t_last)), "SGLang's acceptance, not a mix"


def test_a_target_that_changed_engine_is_read_as_the_new_one_after_a_few_polls_in_a_row():
    pipeline = Pipeline(from_mapping(CONFIG))
    t0, text = SGLANG_POLLS[1]
    assert pipeline.ingest(TARGET, t0, text).ok
    results = [pipeline.ingest(TARGET, t0 + 5.0 * (n + 1), VLLM_PAYLOAD) for n in range(ENGINE_SWITCH_POLLS)]
    assert [r.ok for r in results] == [False] * (ENGINE_SWITCH_POLLS - 1) + [True]
    assert results[-1].engine == "vllm"


def test_the_first_payload_of_a_detected_target_sets_its_engine_at_once():
    pipeline = Pipeline(from_mapping(CONFIG))
    result = pipeline.ingest(TARGET, 1000.0, VLLM_PAYLOAD)
    assert result.ok and result.engine == "vllm"
