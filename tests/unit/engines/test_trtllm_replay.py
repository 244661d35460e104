"""TensorRT-LLM's fixture through `specwatch replay` and the exports: each value it supports, worked
out here from the fixture with prometheus_client's own parser (the window's increases of the
per-position counters), and ITL, which it does not export, absent."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.config import from_mapping
from specwatch.export.collector import registry_for
from specwatch.export.status import status_document
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from support.engine_fixtures import fixture, polls, recording

FIXTURE = fixture("trtllm", "eagle3-load.prom")
TARGET = "trtllm"
CONFIG = {
    "targets": [{"name": TARGET, "url": "http://127.0.0.1:8000/prometheus/metrics", "engine": "trtllm"}],
    "poll_interval": "5s",
    "windows": ["30s"],
    "decision": {"min_drafts": 100, "hold": 1},
}
WIDTH = 30.0
DRAFTED, ACCEPTED = "trtllm_spec_decode_drafted_tokens", "trtllm_spec_decode_accepted_tokens"


def readings() -> list[tuple[float, dict[tuple[str, str], float]]]:
    """Each poll's per-position counters ((family, position) -> value) and running gauge."""
    out = []
    for t, text in polls(FIXTURE):
        values = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if family.name in (DRAFTED, ACCEPTED) and sample.name.endswith("_total"):
                    values[(family.name, sample.labels["token_position"])] = sample.value
                elif family.name == "trtllm_num_requests_running":
                    values[("running", "")] = sample.value
        out.append((t, values))
    return out


def expected(t: float) -> dict[str, object]:
    window = [v for pt, v in readings() if t - WIDTH <= pt <= t]

    def delta(family: str, position: int) -> float:
        seen = [v[(family, str(position))] for v in window if (family, str(position)) in v]
        return seen[-1] - seen[0] if seen else 0.0  # a series born inside the window counts from its first poll

    drafted = [delta(DRAFTED, i) for i in range(3)]
    accepted = [delta(ACCEPTED, i) for i in range(3)]
    running = [v[("running", "")] for v in window]
    return {
        "drafts": drafted[0],
        "acceptance_rate": sum(accepted) / sum(drafted),
        "mean_acceptance_length": 1 + sum(accepted) / drafted[0],
        "draft_length": sum(drafted) / drafted[0],
        "batch_size": sum(running) / len(running),
        "position_acceptance_rates": [a / d for a, d in zip(accepted, drafted, strict=True)],
    }


def records() -> dict[float, dict[str, object]]:
    return {r["t"]: r for r in replay(from_mapping(CONFIG), recording(FIXTURE, TARGET))}


def _status(upto: int) -> tuple[str, dict]:
    config = from_mapping(CONFIG)
    pipeline = Pipeline(config)
    for t, text in polls(FIXTURE)[:upto]:
        pipeline.ingest(TARGET, t, text)
        list(pipeline.evaluate(t))
    state = pipeline.state()
    return generate_latest(registry_for(lambda: state)).decode(), status_document(state, config)


@pytest.mark.parametrize("t", [1020.0, 1030.0])
def test_trtllm_window_values_are_ratios_of_its_per_position_counters(t):
    record, want = records()[t], expected(t)
    for key in ("drafts", "acceptance_rate", "mean_acceptance_length", "draft_length", "batch_size"):
        assert record[key] == pytest.approx(want[key], rel=1e-12), key
    # nothing configured: the assumed setup's interval may span 1 (undecided)
    assert record["verdict"] in ("undecided", "keep", "shorten", "disable")


def test_trtllm_position_rates_use_its_drafted_tokens_per_position():
    _, status = _status(7)  # t = 1030
    (route,) = status["routes"]
    rates = route["windows"]["30s"]["position_acceptance_rates"]
    assert rates == pytest.approx(expected(1030.0)["position_acceptance_rates"], rel=1e-12)
    assert route["configured_k"] == 3
    assert route["schema"] == "trtllm"


def test_trtllm_has_no_itl_from_its_per_request_tpot_histogram():
    metrics, _ = _status(7)
    assert all(r["itl_p50_seconds"] is None and r["itl_p99_seconds"] is None for r in records().values())
    samples = {line.split("{")[0].split(" ")[0] for line in metrics.splitlines() if not line.startswith("#")}
    assert not {"specwatch_itl_seconds_bucket", "specwatch_itl_per_token_mean_seconds"} & samples
    assert "specwatch_accepted_tokens_by_position_total" in samples
