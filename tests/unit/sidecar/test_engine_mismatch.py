"""A target pinned to one engine (`targets[].engine`) whose payload speaks another: each such poll
is a failed poll with reason engine_mismatch, the status names the engine the payload looks like,
and the windows keep the last good state."""

from __future__ import annotations

from prometheus_client import generate_latest

from specwatch.config import from_mapping
from specwatch.export.collector import registry_for
from specwatch.export.status import status_document
from specwatch.sidecar.pipeline import Pipeline
from support.engine_fixtures import fixture, polls
from support.paths import FIXTURES
from support.views import view_of

TARGET = "sglang"
CONFIG = {
    "targets": [{"name": TARGET, "url": "http://127.0.0.1:30000/metrics", "engine": "sglang"}],
    "poll_interval": "5s",
    "windows": ["30s"],
    "decision": {"min_drafts": 100, "hold": 1},
}
VLLM_PAYLOAD = (FIXTURES / "engines" / "vllm-per-pos-drafts" / "after.prom").read_text()
SGLANG_POLLS = polls(fixture("sglang", "eagle3-load.prom"))


def _loaded(upto: int) -> Pipeline:
    pipeline = Pipeline(from_mapping(CONFIG))
    for t, text in SGLANG_POLLS[:upto]:
        assert pipeline.ingest(TARGET, t, text).ok
    list(pipeline.evaluate(SGLANG_POLLS[upto - 1][0]))
    return pipeline


def _target(pipeline: Pipeline) -> dict:
    (target,) = status_document(view_of(pipeline.state(), from_mapping(CONFIG)))["targets"]
    return target


def test_a_vllm_payload_on_a_target_pinned_to_sglang_is_a_failed_poll_named_engine_mismatch():
    pipeline = Pipeline(from_mapping(CONFIG))
    result = pipeline.ingest(TARGET, 1000.0, VLLM_PAYLOAD)
    assert not result.ok
    assert result.reason == "engine_mismatch"
    assert "vllm" in (result.message or "")
    target = _target(pipeline)
    assert target["up"] is False
    assert target["errors"]["engine_mismatch"] == 1
    assert target["payload_engine"] == "vllm"
    metrics = generate_latest(registry_for(pipeline.view)).decode()
    assert 'specwatch_scrape_errors_total{reason="engine_mismatch",target="sglang"} 1.0' in metrics


def test_a_mismatched_payload_keeps_the_windows_of_the_last_good_poll():
    pipeline = _loaded(8)
    t_last = SGLANG_POLLS[7][0]
    before = {e.stats.window: e.stats for e in pipeline.evaluate(t_last)}
    assert before["30s"].acceptance_rate is not None
    assert not pipeline.ingest(TARGET, t_last + 5.0, VLLM_PAYLOAD).ok
    after = {e.stats.window: e.stats for e in pipeline.evaluate(t_last)}
    assert after["30s"].acceptance_rate == before["30s"].acceptance_rate
    assert after["30s"].drafts == before["30s"].drafts
    assert [r.engine for r in pipeline.state().routes] == ["sglang"]


def test_the_pinned_engine_speaking_again_clears_the_mismatch_but_not_its_count():
    pipeline = _loaded(2)
    assert not pipeline.ingest(TARGET, 1010.0, VLLM_PAYLOAD).ok
    t, text = SGLANG_POLLS[2]
    assert pipeline.ingest(TARGET, t, text).ok
    target = _target(pipeline)
    assert target["payload_engine"] is None
    assert target["errors"]["engine_mismatch"] == 1
    assert target["up"] is True


def test_a_payload_of_no_known_engine_is_no_mismatch():
    pipeline = Pipeline(from_mapping(CONFIG))
    result = pipeline.ingest(
        TARGET, 1000.0, "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.0\n"
    )
    assert result.ok
    assert _target(pipeline)["payload_engine"] is None
