"""The exports show the advice in the route's engine's terms: status JSON, the config-info
metric, the page and the demo table; vLLM routes keep their --speculative-config fields."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml
from prometheus_client import generate_latest

from specwatch.cli.demo import _recommendation
from specwatch.config import from_mapping
from specwatch.config.cost_model import cost_model_from_config
from specwatch.engines.vllm_schedule import SCHEDULE_KEY
from specwatch.export import contract
from specwatch.export.collector import add_evaluation, registry_for
from specwatch.export.page import recommendations, render_page
from specwatch.export.page_history import PageHistory
from specwatch.export.status import status_document, window_status
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from specwatch.verdict.decide import Assessment
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.windows.derive import WindowStats
from support.engine_fixtures import fixture, recording
from support.paths import FIXTURES
from support.views import view_of

STATS = WindowStats(route="chat", window="1m", t=0.0, samples=10, span_seconds=60.0, spec_present=True)
BANDS = [[1, 16, 3], [17, 512, 2]]
COMPLETE = {"method": "eagle3", "model": "/m/eagle", "num_speculative_tokens": 3, SCHEDULE_KEY: BANDS}
APPLY = Assessment(
    "shorten",
    recommended_draft_length=2,
    recommended_config=COMPLETE,
    config_changes={"method": "eagle3", "num_speculative_tokens": 3, SCHEDULE_KEY: BANDS},
    action="apply",
)
DISABLE = Assessment("disable", recommended_draft_length=0, action="remove_speculative_config")
LLAMACPP_OFF = (
    "remove --spec-type --spec-draft-model -md --model-draft --spec-draft-n-max --spec-draft-n-min "
    "--spec-draft-p-min --draft-p-min (serve without the draft model)"
)
MERGE = Assessment("shorten", recommended_draft_length=2, config_changes={"num_speculative_tokens": 2}, action="merge")


def evaluation(advice: Assessment, engine: str = "vllm") -> RouteEvaluation:
    stats = replace(STATS, engine=engine)
    return RouteEvaluation(stats=stats, assessment=advice, verdict=advice.candidate, guard_passed=True, advice=advice)


def config_info(engine: str, advice: Assessment) -> list[tuple[str, str]]:
    families = contract.Families("sidecar")
    add_evaluation(families, ["chat", "vllm", "1m"], evaluation(advice, engine))
    family = next(f for f in families if f.name == "specwatch_recommended_config_info")
    assert family.type == "gauge"
    return [(s.labels["config"], s.labels["action"]) for s in family.samples]


def test_a_vllm_route_gets_the_generic_command_beside_the_flag_it_always_had():
    record = window_status(evaluation(APPLY))
    assert record["recommended_command"] == record["recommended_speculative_config_flag"]
    assert record["recommended_flags"] == ["--speculative-config", json.dumps(COMPLETE, separators=(",", ":"))]
    assert record["recommended_config"] == COMPLETE


def test_another_engines_route_gets_its_own_flags_and_no_speculative_config_fields():
    record = window_status(evaluation(APPLY, "llamacpp"))
    assert record["recommended_command"] == "--spec-draft-n-max 2"
    assert record["recommended_flags"] == ["--spec-draft-n-max", "2"]
    assert record["recommended_config"] is None and record["merge_into_your_speculative_config"] is None
    assert "recommended_speculative_config_flag" not in record
    assert window_status(evaluation(MERGE, "sglang"))["recommended_action"] == "apply"  # complete flags there
    assert window_status(evaluation(MERGE, "sglang"))["recommended_flags"][:2] == ["--speculative-num-steps", "2"]


def test_the_config_info_metric_carries_the_engines_terms_and_vllms_sorted_json():
    assert config_info("vllm", APPLY) == [(json.dumps(COMPLETE, separators=(",", ":"), sort_keys=True), "apply")]
    assert config_info("vllm", MERGE) == [('{"num_speculative_tokens":2}', "merge")]
    # The drafter's path does not matter to a llama.cpp flag: the advice is complete there.
    assert config_info("llamacpp", MERGE) == [("--spec-draft-n-max 2", "apply")]
    # A line for the --config YAML, quoted as it is by the alerts (not as a --speculative-config).
    (trtllm,) = config_info("trtllm", APPLY)
    assert trtllm == ("speculative_config: {draft_len_schedule: {16: 3, 512: 2}, max_draft_len: 3}", "apply")
    assert yaml.safe_load(trtllm[0]) == {
        "speculative_config": {"max_draft_len": 3, "draft_len_schedule": {16: 3, 512: 2}}
    }
    assert config_info("llamacpp", DISABLE) == [(LLAMACPP_OFF, "remove_speculative_config")]
    assert config_info("vllm", DISABLE) == [("", "remove_speculative_config")]


def test_the_page_names_each_engines_settings():
    vllm = recommendations([("1m", window_status(evaluation(MERGE)))])
    assert "Recommended <code>--speculative-config</code>" in vllm
    assert "merge into your --speculative-config:<pre>{&quot;num_speculative_tokens&quot;:2}</pre>" in vllm
    lmdeploy = recommendations([("1m", window_status(evaluation(MERGE, "lmdeploy")))], "lmdeploy")
    assert "Recommended speculative settings (lmdeploy)" in lmdeploy
    assert "<pre>--speculative-num-draft-tokens 2</pre>" in lmdeploy
    keep = Assessment("keep", recommended_draft_length=3, action="no_change")
    assert "keep the speculative settings you run" in recommendations(
        [("1m", window_status(evaluation(keep, "lmdeploy")))], "lmdeploy"
    )


def test_the_demo_column_shows_the_engines_flags():
    assert _recommendation(evaluation(MERGE, "llamacpp")) == "--spec-draft-n-max 2"
    assert _recommendation(evaluation(MERGE)) == 'merge {"num_speculative_tokens":2}'


# -- a llama.cpp server's payloads through the live path ---------------------------------------
LLAMACPP = FIXTURES / "engines" / "llamacpp"  # two polls: alpha 0.65, K 3, p_i 0.85/0.65/0.45, batch 4


def replayed(lines: list[str], cost_per_token: float) -> tuple[dict, bytes, str]:
    """The status window, /metrics and the page after replaying ``lines``, with a drafter that
    costs ``cost_per_token`` of a target step per drafted token."""
    config = from_mapping(
        {
            "poll_interval": "5s",
            "windows": ["1m"],
            "decision": {"min_drafts": 10, "hold": 1},
            "draft": {"method": "eagle3", "cost_per_token": cost_per_token},
        }
    )
    # The advice in each engine's terms, tested on a model taken as exact (no calibration error,
    # no assumed setup): the speedup's interval is tested in tests/unit/verdict and costmodel.
    exact = replace(cost_model_from_config(config), calibration_log_error=0.0, setup_assumed=False)
    pipeline = Pipeline(config, exact)
    list(replay(config, lines, pipeline))
    state = pipeline.state()
    window = status_document(view_of(state, config))["routes"][0]["windows"]["1m"]
    history = PageHistory()
    history.record(view_of(state))
    page = render_page(view_of(state, config), history, now=state.t).decode()
    return window, generate_latest(registry_for(pipeline.view)), page


def llamacpp_status(cost_per_token: float) -> tuple[dict, bytes, str]:
    lines = [
        json.dumps({"t": t, "target": "vllm", "text": (LLAMACPP / f"{name}.prom").read_text()})
        for t, name in ((1000.0, "before"), (1030.0, "after"))
    ]
    return replayed(lines, cost_per_token)


def test_a_llamacpp_route_is_advised_in_llamacpp_flags_end_to_end():
    window, metrics, page = llamacpp_status(0.5)  # the third position no longer pays: K 3 -> 2
    assert window["verdict"] == "shorten"
    assert window["recommended_command"] == "--spec-draft-n-max 2"
    assert window["recommended_flags"] == ["--spec-draft-n-max", "2"]
    assert window["recommended_action"] == "apply"  # complete: llama.cpp needs no drafter path from us
    assert window["recommended_config"] is None and "recommended_speculative_config_flag" not in window
    assert not any("vLLM" in note or "--speculative-config" in note for note in window["notes"])
    assert b'config="--spec-draft-n-max 2"' in metrics
    assert "Recommended speculative settings (llamacpp)" in page and "<pre>--spec-draft-n-max 2</pre>" in page
    assert "--speculative-config" not in page


def test_a_llamacpp_route_disable_drops_the_draft_model():
    window, _, _ = llamacpp_status(0.9)  # a drafter nearly as slow as the target: nothing pays
    assert window["verdict"] == "disable" and window["recommended_action"] == "remove_speculative_config"
    assert window["recommended_command"].startswith("remove --spec-type --spec-draft-model -md --model-draft")


@pytest.mark.parametrize(
    ("engine", "shorter", "off"),
    [
        (
            "sglang",
            "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3",
            "remove --speculative-algorithm",
        ),
        ("trtllm", "speculative_config:\n  max_draft_len: 2", "remove speculative_config from the --config YAML"),
    ],
)
def test_sglang_and_trtllm_routes_are_advised_in_their_terms_end_to_end(engine, shorter, off):
    lines = recording(fixture(engine, "eagle3-load.prom"), "vllm", 6)  # the polls under load
    window, _, page = replayed(lines, 0.5)  # a drafter at half a target step per token: K 3 -> 2
    assert (window["verdict"], window["recommended_action"], window["recommended_command"]) == (
        "shorten",
        "apply",
        shorter,
    )
    assert "--speculative-config" not in page
    window, _, _ = replayed(lines, 0.9)  # nothing pays
    assert window["verdict"] == "disable" and window["recommended_command"].startswith(off)
