"""Each engine's fixture exposition (two polls) through the live path: the engine is detected from
its families and every value it supports comes out exact; what it cannot give is absent."""

from __future__ import annotations

import json

import pytest

from specwatch.config import ConfigError, from_mapping
from specwatch.engines.grouping import SELECTOR, Grouping
from specwatch.engines.registry import ENGINE_NAMES
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from support.paths import FIXTURES

CONFIG = {"poll_interval": "5s", "windows": ["1m"], "decision": {"min_drafts": 10, "hold": 1}}
ENGINES = FIXTURES / "engines"

# Every fixture: Δdrafts 200, Δdraft tokens 600, Δaccepted 390, Δaccepted per position 170/130/90.
COUNTED = {"acceptance_rate": 0.65, "mean_acceptance_length": 2.95, "draft_length": 3.0, "batch_size": 4.0}
POSITION_RATES = [0.85, 0.65, 0.45]
ITL = {"itl_p50_seconds": 0.01 + 0.015 * 0.5, "itl_p99_seconds": 0.01 + 0.015 * 0.99}


def _lines(engine: str) -> list[str]:
    return [
        json.dumps({"t": t, "target": "vllm", "text": (ENGINES / engine / f"{name}.prom").read_text()})
        for t, name in ((1000.0, "before"), (1030.0, "after"))
    ]


def _last(engine: str) -> dict[str, object]:
    return list(replay(from_mapping(CONFIG), _lines(engine)))[-1]


def _pipeline(engine: str) -> Pipeline:
    pipeline = Pipeline(from_mapping(CONFIG))
    list(replay(from_mapping(CONFIG), _lines(engine), pipeline))
    return pipeline


@pytest.mark.parametrize(
    ("fixture", "engine"), [("llamacpp", "llamacpp"), ("lmdeploy", "lmdeploy"), ("ray-vllm", "ray-vllm")]
)
def test_the_engine_is_detected_from_the_families_its_payload_holds(fixture, engine):
    text = (ENGINES / fixture / "after.prom").read_text()
    snapshots = Grouping().snapshots(SELECTOR.parse(text), t=0.0, target="t")
    assert [s.engine for s in snapshots] == [engine]
    assert engine in ENGINE_NAMES


@pytest.mark.parametrize("engine", ["llamacpp", "lmdeploy", "ray-vllm"])
def test_alpha_tau_k_and_batch_are_exact_for_every_counter_engine(engine):
    last = _last(engine)
    for key, value in COUNTED.items():
        assert last[key] == pytest.approx(value, abs=1e-12), key
    assert last["drafts"] == 200


@pytest.mark.parametrize("engine", ["llamacpp", "lmdeploy", "ray-vllm"])
def test_per_position_rates_are_exact_for_every_counter_engine(engine):
    evaluation = _pipeline(engine).evaluate(1030.0)[0]
    assert list(evaluation.position_rates) == pytest.approx(POSITION_RATES, abs=1e-12)


@pytest.mark.parametrize("engine", ["lmdeploy", "ray-vllm"])
def test_itl_quantiles_come_from_the_engines_itl_histogram(engine):
    last = _last(engine)
    for key, value in ITL.items():
        assert last[key] == pytest.approx(value, abs=1e-12), key


def test_llamacpp_has_no_itl_histogram_so_its_quantiles_are_absent_not_zero():
    last = _last("llamacpp")
    assert last["itl_p50_seconds"] is None
    assert last["itl_p99_seconds"] is None


def test_llamacpp_without_labels_is_one_default_route():
    assert _last("llamacpp")["route"] == "default"


def test_rays_deprecated_counter_gauges_are_not_read_as_the_counters():
    # The bare-name gauges hold the same lifetime values: read as counters they would double them.
    families = SELECTOR.parse((ENGINES / "ray-vllm" / "after.prom").read_text())
    assert [s.name for s in families["ray_vllm_spec_decode_num_drafts"].samples] == [
        "ray_vllm_spec_decode_num_drafts_total"
    ]


def test_the_per_position_draft_counter_makes_the_rates_exact_under_a_schedule():
    evaluation = _pipeline("vllm-per-pos-drafts").evaluate(1030.0)[0]
    assert list(evaluation.position_rates) == pytest.approx([0.8, 0.6, 0.4, 0.2], abs=1e-12)


def test_without_the_per_position_draft_counter_the_rates_fall_back_to_the_rule(tmp_path):
    # The same polls without vllm:spec_decode_num_draft_tokens_per_pos: every draft counts as
    # reaching every position (a lookup drafter's rule without a schedule), so p_2, p_3 halve.
    lines = []
    for line in _lines("vllm-per-pos-drafts"):
        record = json.loads(line)
        record["text"] = "".join(
            row for row in record["text"].splitlines(keepends=True) if "draft_tokens_per_pos" not in row
        )
        lines.append(json.dumps(record))
    pipeline = Pipeline(from_mapping(CONFIG))
    list(replay(from_mapping(CONFIG), lines, pipeline))
    evaluation = pipeline.evaluate(1030.0)[0]
    assert list(evaluation.position_rates) == pytest.approx([0.8, 0.6, 0.2, 0.1], abs=1e-12)


def test_a_target_configured_with_an_engine_reads_that_engine_whatever_the_payload_holds():
    config = {**CONFIG, "targets": [{"name": "vllm", "url": "http://127.0.0.1:1/metrics", "engine": "lmdeploy"}]}
    pipeline = Pipeline(from_mapping(config))
    list(replay(from_mapping(config), _lines("ray-vllm"), pipeline))
    assert pipeline.state().routes == ()  # no lmdeploy family in a Ray payload: nothing to group
    list(replay(from_mapping(config), _lines("lmdeploy"), pipeline := Pipeline(from_mapping(config))))
    assert [r.engine for r in pipeline.state().routes] == ["lmdeploy"]


def test_an_unknown_engine_in_the_config_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as raised:
        from_mapping({"targets": [{"url": "http://127.0.0.1:1/metrics", "engine": "tgi"}]}, environ={})
    assert "engine" in str(raised.value)
    assert "llamacpp" in str(raised.value)  # the known names are listed
