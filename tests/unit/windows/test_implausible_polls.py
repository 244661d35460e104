"""Implausible values are rejected as `invalid` and counted: a poll whose values no engine
can hold at one moment (tau above K + 1, per-position acceptance rising with the position or above
1, an engine's gauges contradicting each other) is a failed poll before any window takes it; the
windows keep the last good poll and nothing implausible is served. The attacks of the issue:
SGLang's acceptance rate 0.95 with acceptance length 1.0 (served as keep 2.70x), tau 900, and
TensorRT-LLM's per-position rates 0.8, 0.9, 1.1."""

from __future__ import annotations

import re

import pytest

from specwatch.config import from_mapping
from specwatch.engines.series import Counter, Gauge, RouteSnapshot, SeriesKey
from specwatch.sidecar.pipeline import Pipeline
from specwatch.windows.window import implausible
from support.builders import route_snapshot
from support.engine_fixtures import fixture, polls

CONFIG = {
    "targets": [{"name": "llm", "url": "http://127.0.0.1:30000/metrics"}],
    "poll_interval": "5s",
    "windows": ["30s"],
    "decision": {"min_drafts": 100, "hold": 1},
}
SGLANG = polls(fixture("sglang", "eagle3-load.prom"))
TRTLLM = polls(fixture("trtllm", "eagle3-load.prom"))


def _gauged(**gauges: float) -> RouteSnapshot:
    return route_snapshot(0.0, {}, schema="sglang", target="llm", gauges=gauges)


def _counted(counters: dict[SeriesKey, float]) -> RouteSnapshot:
    return route_snapshot(0.0, counters, target="llm")


def test_gauges_that_contradict_each_other_or_exceed_k_plus_one_are_implausible():
    rate, length, k = Gauge.ACCEPTANCE_RATE, Gauge.ACCEPTANCE_LENGTH, Gauge.DRAFT_LENGTH
    assert implausible(_gauged(**{rate: 0.95, length: 1.0, k: 3.0})) is not None
    assert implausible(_gauged(**{rate: 0.6, length: 900.0, k: 4.0})) is not None
    assert implausible(_gauged(**{rate: 0.6, length: 900.0}), stated_k=4) is not None
    # The fixture's own readings, SGLang's unset zeros and a rate of 0 are all plausible.
    assert implausible(_gauged(**{rate: 0.566667, length: 2.7, k: 3.0})) is None
    assert implausible(_gauged(**{rate: 0.0, length: 0.0, k: 3.0})) is None
    assert implausible(_gauged(**{rate: 0.0, length: 1.0, k: 3.0})) is None


def test_per_position_counts_rising_with_the_position_or_above_the_drafted_are_implausible():
    def pos(i: int) -> SeriesKey:
        return SeriesKey(Counter.POS, "0", i)

    def drafted(i: int) -> SeriesKey:
        return SeriesKey(Counter.POS_DRAFTS, "0", i)

    base = {SeriesKey(Counter.DRAFTS, "0"): 10_000.0, SeriesKey(Counter.ACCEPTED, "0"): 24_000.0}
    good = base | {pos(0): 8000.0, pos(1): 7000.0, pos(2): 5000.0}
    assert implausible(_counted(good)) is None
    rising = base | {pos(0): 8000.0, pos(1): 9000.0, pos(2): 11_000.0}
    assert implausible(_counted(rising)) is not None
    above = base | {pos(0): 8000.0, pos(1): 7000.0, pos(2): 5000.0, drafted(2): 3000.0}
    assert implausible(_counted(above)) is not None
    tau_900 = {SeriesKey(Counter.DRAFTS, "0"): 100.0, SeriesKey(Counter.ACCEPTED, "0"): 89_900.0, pos(0): 100.0}
    assert implausible(_counted(tau_900)) is not None


def _sglang_contradicting(text: str) -> str:
    text = re.sub(r"(sglang:spec_accept_rate\{[^}]*\}) \S+", r"\1 0.95", text)
    return re.sub(r"(sglang:spec_accept_length\{[^}]*\}) \S+", r"\1 1.0", text)


def _trtllm_rising(text: str) -> str:
    """Accepted at positions 0, 1, 2 as 0.8, 0.9, 1.1 of the tokens drafted there."""
    drafted = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'trtllm_spec_decode_drafted_tokens_total\{[^}]*token_position="(\d+)"\} (\S+)', text)
    }
    rates = {"0": 0.8, "1": 0.9, "2": 1.1}

    def accepted(m: re.Match[str]) -> str:
        return f"{m.group(1)} {rates.get(m.group(2), 0.5) * drafted.get(m.group(2), 0.0):.1f}"

    return re.sub(r'(trtllm_spec_decode_accepted_tokens_total\{[^}]*token_position="(\d+)"\}) \S+', accepted, text)


@pytest.mark.parametrize(
    ("recorded", "hostile"),
    [(SGLANG, _sglang_contradicting), (TRTLLM, _trtllm_rising)],
    ids=["sglang-rate-0.95-length-1.0", "trtllm-rates-0.8-0.9-1.1"],
)
def test_a_poll_with_implausible_values_is_a_failed_poll_counted_invalid_and_serves_nothing_new(recorded, hostile):
    pipeline = Pipeline(from_mapping(CONFIG))
    good = recorded[: len(recorded) // 2]
    for t, text in good:
        assert pipeline.ingest("llm", t, text).ok
    t_last = good[-1][0]
    before = [e.stats for e in pipeline.evaluate(t_last)]
    rejected = 0
    for t, text in recorded[len(good) :]:
        result = pipeline.ingest("llm", t, hostile(text))
        if not result.ok:
            assert result.reason == "invalid"
            rejected += 1
    assert rejected >= len(recorded) - len(good) - 1, "every hostile poll with data is rejected"
    (target,) = pipeline.state().targets
    assert target.errors["invalid"] == rejected
    after = [e.stats for e in pipeline.evaluate(t_last)]
    assert [s.acceptance_rate for s in after] == [s.acceptance_rate for s in before], "the last good poll is kept"
