"""SGLang's and TensorRT-LLM's load sequences (eagle3-load.prom) through `specwatch replay` and the
exports: each value the engine supports, worked out here from the fixture with prometheus_client's
own parser, and none it cannot support. SGLang exports acceptance as gauges (window values are
their means over active polls); TensorRT-LLM as per-position counters (ratios of their increases);
neither has a per-token ITL histogram."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.config import Config, from_mapping
from specwatch.export.collector import registry_for
from specwatch.export.page import render_page
from specwatch.export.page_history import PageHistory
from specwatch.export.status import status_document
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from specwatch.view.targets import State
from support.cli import run_cli
from support.engine_fixtures import fixture, polls, recording
from support.views import view_of

WIDTH = 30.0  # the one window, "30s"


def _config(engine: str) -> dict[str, Any]:
    """One target of the engine (named after it), 5 s polls, the 30 s window."""
    return {
        "targets": [{"name": engine, "url": LOADS[engine].url, "engine": engine}],
        "poll_interval": "5s",
        "windows": ["30s"],
        "decision": {"min_drafts": 100, "hold": 1},
    }


def _fixture(engine: str) -> Path:
    return fixture(engine, "eagle3-load.prom")


def records(engine: str) -> dict[float, dict[str, Any]]:
    return {r["t"]: r for r in replay(from_mapping(_config(engine)), recording(_fixture(engine), engine))}


def _state(engine: str, upto: int) -> tuple[Config, State]:
    """The live path's state after the fixture's first `upto` polls."""
    config = from_mapping(_config(engine))
    pipeline = Pipeline(config)
    for t, text in polls(_fixture(engine))[:upto]:
        pipeline.ingest(engine, t, text)
        list(pipeline.evaluate(t))
    return config, pipeline.state()


def _served(engine: str, upto: int) -> tuple[str, dict]:
    """/metrics and the status document after the fixture's first `upto` polls."""
    config, state = _state(engine, upto)
    return generate_latest(registry_for(lambda: view_of(state))).decode(), status_document(view_of(state, config))


def _sample_names(metrics: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in metrics.splitlines() if not line.startswith("#")}


# -- SGLang: acceptance from gauges ----------------------------------------------------------------
SGLANG_GAUGES = ("sglang:spec_accept_rate", "sglang:spec_accept_length", "sglang:spec_num_steps")
SGLANG_COUNTERS = ("sglang:spec_verify_calls", "sglang:generation_tokens", "sglang:prompt_tokens")


def _sglang_readings() -> list[tuple[float, dict[str, float]]]:
    """Each poll's gauges and counters, as prometheus_client reads the exposition."""
    out = []
    for t, text in polls(_fixture("sglang")):
        values = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if family.name in SGLANG_GAUGES + ("sglang:num_running_reqs",) or (
                    family.name in SGLANG_COUNTERS and sample.name.endswith("_total")
                ):
                    values[family.name] = sample.value
        out.append((t, values))
    return out


def sglang_expected(t: float) -> dict[str, Any]:
    """The window ending at t: gauge means over polls that followed activity (a counter moved, a
    gauge changed), the verify calls' increase from the window's first poll."""
    window = [(pt, v) for pt, v in _sglang_readings() if t - WIDTH <= pt <= t]
    active = [
        now
        for (_, before), (_, now) in pairwise(window)
        if any(now.get(c, 0) > before.get(c, now.get(c, 0)) for c in SGLANG_COUNTERS)
        or any(now.get(g) != before.get(g) for g in SGLANG_GAUGES)
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


# -- TensorRT-LLM: acceptance from per-position counters -------------------------------------------
DRAFTED, ACCEPTED = "trtllm_spec_decode_drafted_tokens", "trtllm_spec_decode_accepted_tokens"


def _trtllm_readings() -> list[tuple[float, dict[tuple[str, str], float]]]:
    """Each poll's per-position counters ((family, position) -> value) and running gauge."""
    out = []
    for t, text in polls(_fixture("trtllm")):
        values = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if family.name in (DRAFTED, ACCEPTED) and sample.name.endswith("_total"):
                    values[(family.name, sample.labels["token_position"])] = sample.value
                elif family.name == "trtllm_num_requests_running":
                    values[("running", "")] = sample.value
        out.append((t, values))
    return out


def trtllm_expected(t: float) -> dict[str, Any]:
    window = [v for pt, v in _trtllm_readings() if t - WIDTH <= pt <= t]

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


# -- the table ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadSequence:
    url: str
    expected: Callable[[float], dict[str, Any]]  # the window ending at t, worked out from the fixture
    loaded: tuple[float, ...]  # window ends inside the load


LOADS = {
    "sglang": LoadSequence("http://127.0.0.1:30000/metrics", sglang_expected, (1035.0, 1050.0)),
    "trtllm": LoadSequence("http://127.0.0.1:8000/prometheus/metrics", trtllm_expected, (1020.0, 1030.0)),
}
WINDOW_VALUES = ("acceptance_rate", "mean_acceptance_length", "draft_length", "batch_size", "drafts")


@pytest.mark.parametrize(("engine", "t"), [(e, t) for e, load in LOADS.items() for t in load.loaded])
def test_window_values_are_the_ones_worked_out_from_the_engines_fixture(engine, t):
    record, want = records(engine)[t], LOADS[engine].expected(t)
    for key in WINDOW_VALUES:
        assert record[key] == pytest.approx(want[key], rel=1e-12), key
    # nothing configured: the assumed setup's interval may span 1 (undecided)
    assert record["verdict"] in ("undecided", "keep", "shorten", "disable")


@pytest.mark.parametrize("engine", sorted(LOADS))
def test_an_engine_without_a_per_token_itl_histogram_has_no_itl(engine):
    assert all(r["itl_p50_seconds"] is None and r["itl_p99_seconds"] is None for r in records(engine).values())
    metrics, _ = _served(engine, 7)
    assert not {"specwatch_itl_seconds_bucket", "specwatch_itl_per_token_mean_seconds"} & _sample_names(metrics)


# -- SGLang only ----------------------------------------------------------------------------------
def test_sglang_idle_window_has_no_acceptance_and_no_batch():
    record = records("sglang")[1075.0]  # every poll of the window after the load stopped: gauges held
    assert sglang_expected(1075.0)["acceptance_rate"] is None
    for key in ("acceptance_rate", "mean_acceptance_length", "draft_length", "batch_size"):
        assert record[key] is None, key
    assert record["drafts"] == 0.0
    _, status = _served("sglang", 16)
    assert status["routes"][0]["windows"]["30s"]["candidate_verdict"] == "insufficient_data"


NOT_COMPUTABLE = (
    "specwatch_draft_tokens_total",
    "specwatch_accepted_tokens_total",
    "specwatch_accepted_tokens_by_position_total",
    "specwatch_position_acceptance_ratio",
    "specwatch_itl_seconds_bucket",
    "specwatch_itl_p50_seconds",
    "specwatch_itl_p99_seconds",
    "specwatch_itl_per_token_mean_seconds",
    "specwatch_step_time_observed_seconds",
)


def test_gauge_only_engine_exports_nothing_it_cannot_compute():
    metrics, status = _served("sglang", 8)  # the load's last poll: every supported value is there
    samples = _sample_names(metrics)
    for name in ("specwatch_acceptance_ratio", "specwatch_mean_acceptance_length_tokens", "specwatch_drafts_total"):
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
    metrics, _ = _served("sglang", 8)
    assert (
        'specwatch_acceptance_basis_info{basis="engine_gauge_mean",route="qwen3-8b",target="sglang",window="30s"} 1.0'
        in metrics
    )


def test_specwatch_replay_of_a_sglang_recording_says_its_values_are_gauge_means(tmp_path):
    recorded = tmp_path / "sglang.jsonl"
    recorded.write_text("\n".join(recording(_fixture("sglang"), "sglang")) + "\n")
    config = tmp_path / "specwatch.yaml"
    config.write_text(json.dumps(_config("sglang")))  # JSON is YAML
    proc = run_cli("replay", "--config", str(config), str(recorded), timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = {r["t"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert lines[1035.0]["acceptance_basis"] == "engine_gauge_mean"
    assert lines[1035.0]["acceptance_rate"] == pytest.approx(sglang_expected(1035.0)["acceptance_rate"], rel=1e-12)
    assert lines[1075.0]["acceptance_rate"] is None


def test_the_page_marks_a_gauge_mean_acceptance_as_such():
    config, state = _state("sglang", 8)
    assert "(gauge mean)" in render_page(view_of(state, config), PageHistory()).decode()


# -- TensorRT-LLM only ----------------------------------------------------------------------------
def test_trtllm_position_rates_use_its_drafted_tokens_per_position():
    metrics, status = _served("trtllm", 7)  # t = 1030
    (route,) = status["routes"]
    rates = route["windows"]["30s"]["position_acceptance_rates"]
    assert rates == pytest.approx(trtllm_expected(1030.0)["position_acceptance_rates"], rel=1e-12)
    assert route["configured_k"] == 3
    assert route["schema"] == "trtllm"
    assert "specwatch_accepted_tokens_by_position_total" in _sample_names(metrics)
