"""The exports show the advice in the route's engine's terms: status JSON, the config-info
metric, the page and the demo table; vLLM routes keep their --speculative-config fields."""

from __future__ import annotations

import json

from prometheus_client.core import GaugeMetricFamily

from specwatch.cli.demo import _recommendation
from specwatch.engines.vllm_schedule import SCHEDULE_KEY
from specwatch.export.collector import WindowFamilies
from specwatch.export.page import recommendations
from specwatch.export.status import window_status
from specwatch.verdict.decide import Assessment
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.windows.derive import WindowStats

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
MERGE = Assessment("shorten", recommended_draft_length=2, config_changes={"num_speculative_tokens": 2}, action="merge")


def evaluation(advice: Assessment) -> RouteEvaluation:
    return RouteEvaluation(stats=STATS, assessment=advice, verdict=advice.candidate, guard_passed=True, advice=advice)


def config_info(engine: str, advice: Assessment) -> list[tuple[str, str]]:
    families = WindowFamilies(["route", "target", "window"], "")
    families.add(["chat", "vllm", "1m"], evaluation(advice), engine)
    family = next(f for f in families.families() if f.name == "specwatch_recommended_config_info")
    assert isinstance(family, GaugeMetricFamily)
    return [(s.labels["config"], s.labels["action"]) for s in family.samples]


def test_a_vllm_route_gets_the_generic_command_beside_the_flag_it_always_had():
    record = window_status(evaluation(APPLY))
    assert record["recommended_command"] == record["recommended_speculative_config_flag"]
    assert record["recommended_flags"] == ["--speculative-config", json.dumps(COMPLETE, separators=(",", ":"))]
    assert record["recommended_config"] == COMPLETE


def test_another_engines_route_gets_its_own_flags_and_no_speculative_config_fields():
    record = window_status(evaluation(APPLY), "llamacpp")
    assert record["recommended_command"] == "--spec-draft-n-max 2"
    assert record["recommended_flags"] == ["--spec-draft-n-max", "2"]
    assert record["recommended_config"] is None and record["merge_into_your_speculative_config"] is None
    assert "recommended_speculative_config_flag" not in record
    assert window_status(evaluation(MERGE), "sglang")["recommended_action"] == "merge"  # the verdict's own
    assert window_status(evaluation(MERGE), "sglang")["recommended_flags"][:2] == ["--speculative-num-steps", "2"]


def test_the_config_info_metric_carries_the_engines_terms_and_vllms_sorted_json():
    assert config_info("vllm", APPLY) == [(json.dumps(COMPLETE, separators=(",", ":"), sort_keys=True), "apply")]
    assert config_info("vllm", MERGE) == [('{"num_speculative_tokens":2}', "merge")]
    # The drafter's path does not matter to a llama.cpp flag: the advice is complete there.
    assert config_info("llamacpp", MERGE) == [("--spec-draft-n-max 2", "apply")]
    trtllm = json.loads(config_info("trtllm", APPLY)[0][0])
    assert trtllm == {"speculative_config": {"max_draft_len": 3, "draft_len_schedule": {"16": 3, "512": 2}}}


def test_the_page_names_each_engines_settings():
    vllm = recommendations([("1m", window_status(evaluation(MERGE)))])
    assert "Recommended <code>--speculative-config</code>" in vllm
    assert "merge into your --speculative-config:<pre>{&quot;num_speculative_tokens&quot;:2}</pre>" in vllm
    lmdeploy = recommendations([("1m", window_status(evaluation(MERGE), "lmdeploy"))], "lmdeploy")
    assert "Recommended speculative settings (lmdeploy)" in lmdeploy
    assert "<pre>--speculative-num-draft-tokens 2</pre>" in lmdeploy
    keep = Assessment("keep", recommended_draft_length=3, action="no_change")
    assert "keep the speculative settings you run" in recommendations(
        [("1m", window_status(evaluation(keep), "lmdeploy"))], "lmdeploy"
    )


def test_the_demo_column_shows_the_engines_flags():
    assert _recommendation(evaluation(MERGE), "llamacpp") == "--spec-draft-n-max 2"
    assert _recommendation(evaluation(MERGE)) == 'merge {"num_speculative_tokens":2}'
