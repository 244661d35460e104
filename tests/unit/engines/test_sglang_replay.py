"""SGLang's fixture through `specwatch replay` and the exports: each value SGLang supports, worked
out here from the fixture with prometheus_client's own parser, and none it cannot support."""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import pairwise

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.config import from_mapping
from specwatch.export.collector import registry_for
from specwatch.export.history import PageHistory
from specwatch.export.page import render_page
from specwatch.export.status import status_document
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from support.engine_fixtures import fixture, polls, recording

FIXTURE = fixture("sglang", "eagle3-load.prom")
TARGET = "sglang"
CONFIG = {
    "targets": [{"name": TARGET, "url": "http://127.0.0.1:30000/metrics", "engine": "sglang"}],
    "poll_interval": "5s",
    "windows": ["30s"],
    "decision": {"min_drafts": 100, "hold": 1},
}
WIDTH = 30.0
GAUGES = ("sglang:spec_accept_rate", "sglang:spec_accept_length", "sglang:spec_num_steps")
COUNTERS = ("sglang:spec_verify_calls", "sglang:generation_tokens", "sglang:prompt_tokens")


def readings() -> list[tuple[float, dict[str, float]]]:
    """Each poll's gauges and counters, as prometheus_client reads the exposition."""
    out = []
    for t, text in polls(FIXTURE):
        values = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if family.name in GAUGES + ("sglang:num_running_reqs",) or (
                    family.name in COUNTERS and sample.name.endswith("_total")
                ):
                    values[family.name] = sample.value
        out.append((t, values))
    return out


def expected(t: float) -> dict[str, float | None]:
    """The window ending at t: gauge means over polls that followed activity (a counter moved, a
    gauge changed), the verify calls' increase from the window's first poll."""
    window = [(pt, v) for pt, v in readings() if t - WIDTH <= pt <= t]
    active = [
        now
        for (_, before), (_, now) in pairwise(window)
        if any(now.get(c, 0) > before.get(c, now.get(c, 0)) for c in COUNTERS)
        or any(now.get(g) != before.get(g) for g in GAUGES)
    ]

    def mean(name: str) -> float | None:
        values = [v[name] for v in active if name in v]
        return sum(values) / len(values) if values else None

    verify = [v["sglang:spec_verify_calls"] for _, v in window if "sglang:spec_verify_calls" in v]
    return {
        "acceptance_rate": mean("sglang:spec_accept_rate"),
        "mean_acceptance_length": mean("sglang:spec_accept_length"),
        "draft_length": mean("sglang:spec_num_steps"),
        "batch_size": mean("sglang:num_running_reqs"),
        "drafts": verify[-1] - verify[0] if verify else 0.0,  # a series born inside counts from its first poll
    }


def records() -> dict[float, dict[str, object]]:
    return {r["t"]: r for r in replay(from_mapping(CONFIG), recording(FIXTURE, TARGET))}


@pytest.mark.parametrize("t", [1035.0, 1050.0])
def test_sglang_window_values_are_the_engine_gauges_mean_over_active_polls(t):
    record, want = records()[t], expected(t)
    for key in ("acceptance_rate", "mean_acceptance_length", "draft_length", "batch_size", "drafts"):
        assert record[key] == pytest.approx(want[key], rel=1e-12), key
    # nothing configured: the assumed setup's interval may span 1 (undecided)
    assert record["verdict"] in ("undecided", "keep", "shorten", "disable")


def test_sglang_idle_window_has_no_acceptance_and_no_batch():
    record = records()[1075.0]  # every poll of the window after the load stopped: gauges held
    assert expected(1075.0)["acceptance_rate"] is None
    for key in ("acceptance_rate", "mean_acceptance_length", "draft_length", "batch_size"):
        assert record[key] is None, key
    assert record["drafts"] == 0.0
    _, status = _served(16)
    assert status["routes"][0]["windows"]["30s"]["candidate_verdict"] == "insufficient_data"


def test_sglang_has_no_itl_from_its_per_token_histogram():
    assert all(r["itl_p50_seconds"] is None and r["itl_p99_seconds"] is None for r in records().values())


def _state(upto: int):
    config = from_mapping(CONFIG)
    pipeline = Pipeline(config)
    for t, text in polls(FIXTURE)[:upto]:
        pipeline.ingest(TARGET, t, text)
        list(pipeline.evaluate(t))
    return config, pipeline.state()


def _served(upto: int) -> tuple[str, dict]:
    config, state = _state(upto)
    return generate_latest(registry_for(lambda: state)).decode(), status_document(state, config)


NOT_COMPUTABLE = (
    "specwatch_draft_tokens_total",
    "specwatch_accepted_tokens_total",
    "specwatch_accepted_tokens_by_position_total",
    "specwatch_position_acceptance_rate",
    "specwatch_itl_seconds_bucket",
    "specwatch_itl_p50_seconds",
    "specwatch_itl_p99_seconds",
    "specwatch_itl_per_token_mean_seconds",
    "specwatch_step_time_observed_seconds",
)


def test_gauge_only_engine_exports_nothing_it_cannot_compute():
    metrics, status = _served(8)  # the load's last poll: every supported value is there
    samples = [line.split("{")[0].split(" ")[0] for line in metrics.splitlines() if not line.startswith("#")]
    for name in ("specwatch_acceptance_rate", "specwatch_mean_acceptance_length", "specwatch_drafts_total"):
        assert name in samples, name
    for name in NOT_COMPUTABLE:
        assert name not in samples, name
    (route,) = status["routes"]
    window = route["windows"]["30s"]
    assert window["acceptance_rate"] is not None
    assert window["acceptance_basis"] == "engine_gauge_mean"
    assert window["position_acceptance_rates"] is None
    assert window["itl_per_token_mean_seconds"] is None


def test_gauge_only_engine_labels_its_window_values_as_gauge_means_on_metrics():
    metrics, _ = _served(8)
    assert (
        'specwatch_acceptance_basis_info{basis="engine_gauge_mean",route="qwen3-8b",target="sglang",window="30s"} 1.0'
        in metrics
    )


def test_specwatch_replay_of_a_sglang_recording_says_its_values_are_gauge_means(tmp_path):
    recorded = tmp_path / "sglang.jsonl"
    recorded.write_text("\n".join(recording(FIXTURE, TARGET)) + "\n")
    config = tmp_path / "specwatch.yaml"
    config.write_text(json.dumps(CONFIG))  # JSON is YAML
    proc = subprocess.run(
        [sys.executable, "-m", "specwatch.cli", "replay", "--config", str(config), str(recorded)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    lines = {r["t"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert lines[1035.0]["acceptance_basis"] == "engine_gauge_mean"
    assert lines[1035.0]["acceptance_rate"] == pytest.approx(expected(1035.0)["acceptance_rate"], rel=1e-12)
    assert lines[1075.0]["acceptance_rate"] is None


def test_the_page_marks_a_gauge_mean_acceptance_as_such():
    config, state = _state(8)
    assert "(gauge mean)" in render_page(state, None, config, PageHistory()).decode()
