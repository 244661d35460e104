"""Draft coverage: vLLM counts a draft only when a request proposed tokens, so with n-gram lookup
part of the request-steps carry no draft. Tokens per step are then 1 + coverage·K·alpha, not tau."""

import json

import pytest

from specwatch import costmodel
from specwatch.config import from_mapping
from specwatch.config.cost_model import cost_model_from_config
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from support.paths import fixture_path

CM = cost_model_from_config(from_mapping({"draft": {"method": "ngram"}}, environ={}))


def test_undrafted_steps_gain_nothing_and_cost_nothing():
    for batch in (1, 16, 128):
        assert costmodel.expected_speedup(CM, batch, 4, 0.8, 0.7) < costmodel.expected_speedup(CM, batch, 4, 0.8)
        assert CM.spec_step_time(batch, 4, 0.7) <= CM.spec_step_time(batch, 4)
        # A speculative step pays its fixed costs whether or not every request drafted, so fewer
        # drafted requests must each be accepted more: the bar rises, by at most 1/coverage.
        full_be = costmodel.breakeven_acceptance_rate(CM, batch, 4)
        partial_be = costmodel.breakeven_acceptance_rate(CM, batch, 4, 0.7)
        assert full_be < partial_be <= full_be / 0.7 + 1e-9
        s = costmodel.expected_speedup(CM, batch, 4, partial_be, 0.7)
        assert s == pytest.approx(1.0, abs=1e-9)


def test_coverage_of_a_model_drafter_is_one_and_changes_nothing():
    for unknown in (None, 0.0, -1.0, float("nan")):
        assert costmodel.draft_coverage(unknown) == 1.0
    assert costmodel.draft_coverage(1.7) == costmodel.draft_coverage(float("inf")) == 1.0
    assert costmodel.draft_coverage(0.7) == 0.7
    assert costmodel.expected_speedup(CM, 8, 4, 0.6, 1.0) == costmodel.expected_speedup(CM, 8, 4, 0.6)
    for outside in (0.0, -0.5, 1.5, float("nan")):
        with pytest.raises(costmodel.CostModelError):
            CM.spec_step_time(8, 4, outside)


def test_coverage_on_the_real_ngram_server_is_drafts_over_request_steps():
    files = sorted(fixture_path("vllm-cpu-real").glob("0[23]*.prom"))
    lines = [json.dumps({"t": 2.0 * i, "target": "vllm", "text": p.read_text()}) for i, p in enumerate(files)]
    config = from_mapping({"poll_interval": "1s", "windows": ["1m"], "decision": {"min_drafts": 50}}, environ={})
    pipeline = Pipeline(config)
    list(replay(config, lines, pipeline))
    stats = pipeline.evaluate(2.0 * (len(files) - 1))[0].stats
    first, last = files[0].read_text(), files[-1].read_text()

    def value(text, name):
        line = next(ln for ln in text.splitlines() if ln.startswith(name + "{"))
        return float(line.rsplit(" ", 1)[1])

    drafts = value(last, "vllm:spec_decode_num_drafts_total") - value(first, "vllm:spec_decode_num_drafts_total")
    steps = value(last, "vllm:inter_token_latency_seconds_count") - value(
        first, "vllm:inter_token_latency_seconds_count"
    )
    assert stats.draft_coverage == pytest.approx(drafts / steps, rel=1e-12)
    assert 0.5 < stats.draft_coverage < 0.95  # n-gram lookup misses on a share of the steps
