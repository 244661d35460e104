"""draft.config: the speculative config vLLM runs with, and the check that the server follows it.

The case to catch: a `num_speculative_tokens_per_batch_size` schedule dropped silently (the server
drafts `num_speculative_tokens` at every batch size)."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specwatch import sim
from specwatch.config import ConfigError, from_mapping
from specwatch.engines.vllm_schedule import SpeculativeConfigError, parse_speculative_config
from specwatch.export.collector import registry_for
from specwatch.export.status import status_document
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.polling import simulated_polls
from specwatch.sim.scenario import parse_scenario
from specwatch.verdict.config_check import check_draft_length
from support.builders import chat_scenario, scenario_raw_config

SCHEDULE = {
    "method": "eagle3",
    "num_speculative_tokens": 4,
    "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 48, 2], [49, 512, 1]],
}


# ---- the schedule, read as vLLM reads it -----------------------------------------------------------


def test_schedule_gives_each_batch_the_k_of_its_range_capped_at_num_speculative_tokens():
    s = parse_speculative_config(
        {"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 4, 5], [8, 16, 2], [20, 30, 0]]}
    )
    assert [s.k_range_at(b)[1] for b in (1, 4, 5, 7, 8, 16, 17, 25, 31, 900)] == [3, 3, 3, 3, 2, 2, 2, 0, 0, 0]


def test_five_item_entries_give_the_k_range_over_context_buckets():
    s = parse_speculative_config(
        {
            "num_speculative_tokens": 4,
            "num_speculative_tokens_per_batch_size": [
                [1, 8, 1, 4096, 4],
                [1, 8, 4097, 8192, 2],
                [9, 64, 1, 4096, 2],
                [9, 64, 4097, 8192, 1],
            ],
        }
    )
    assert s.k_range_at(4) == (2, 4) and s.k_range_at(100) == (1, 2)


@pytest.mark.parametrize(
    "config, field",
    [
        ({}, "num_speculative_tokens"),
        ({"num_speculative_tokens": 0}, "num_speculative_tokens"),
        (
            {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[2, 8, 4]]},
            "num_speculative_tokens_per_batch_size",
        ),
        (
            {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 8, 4], [8, 16, 2]]},
            "num_speculative_tokens_per_batch_size",
        ),
        (
            {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 8]]},
            "num_speculative_tokens_per_batch_size[0]",
        ),
        (
            {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 8, -1]]},
            "num_speculative_tokens_per_batch_size[0]",
        ),
    ],
)
def test_a_config_vllm_would_refuse_names_its_field(config, field):
    with pytest.raises(SpeculativeConfigError) as info:
        parse_speculative_config(config)
    assert info.value.key == field


def test_draft_config_is_a_mapping_or_the_same_json_string_and_a_bad_one_names_the_key():
    as_json = from_mapping({"draft": {"config": json.dumps(SCHEDULE)}}, environ={})
    as_mapping = from_mapping({"draft": {"config": SCHEDULE}}, environ={})
    assert as_json.draft.config == as_mapping.draft.config == SCHEDULE
    assert from_mapping({}, environ={}).draft.config is None
    from_env = from_mapping({}, environ={"SPECWATCH_DRAFT__CONFIG": json.dumps(SCHEDULE)})
    assert from_env.draft.config == SCHEDULE
    with pytest.raises(ConfigError, match=r"^draft\.config: not valid JSON"):
        from_mapping({"draft": {"config": "{method: eagle3"}}, environ={})
    with pytest.raises(ConfigError, match=r"^draft\.config\.num_speculative_tokens_per_batch_size: the first"):
        from_mapping(
            {"draft": {"config": {"num_speculative_tokens": 2, "num_speculative_tokens_per_batch_size": [[3, 9, 1]]}}},
            environ={},
        )


# ---- the check -----------------------------------------------------------------------------------


def test_a_dropped_schedule_is_a_mismatch_for_model_based_and_for_ngram_drafters():
    for method in ("eagle3", "ngram"):
        s = parse_speculative_config({**SCHEDULE, "method": method})
        check = check_draft_length(s, batch_size=64.0, drafts=5000, observed_k=4.0, min_drafts=500)
        assert check is not None and check.mismatch and check.configured_k == 1
        assert "schedule not applied" in check.reason


def test_ngram_proposing_fewer_tokens_than_k_is_not_a_mismatch_but_a_short_model_draft_is():
    ngram = parse_speculative_config({"method": "ngram", "num_speculative_tokens": 4})
    eagle = parse_speculative_config({"method": "eagle3", "num_speculative_tokens": 4})
    kwargs = {"batch_size": 4.0, "drafts": 5000, "observed_k": 3.4, "min_drafts": 500}
    assert not check_draft_length(ngram, **kwargs).mismatch
    assert check_draft_length(eagle, **kwargs).mismatch


def test_a_batch_straddling_a_schedule_boundary_accepts_any_k_between_the_two_bands():
    s = parse_speculative_config(SCHEDULE)
    mixed = check_draft_length(s, batch_size=16.0, drafts=5000, observed_k=3.1, min_drafts=500)
    assert not mixed.mismatch and (mixed.expected_low, mixed.expected_high) == (2, 4)


def test_a_k0_band_without_drafts_is_as_configured_and_thin_windows_give_no_answer():
    s = parse_speculative_config(
        {"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 8, 3], [9, 512, 0]]}
    )
    assert check_draft_length(s, batch_size=100.0, drafts=0, observed_k=None, min_drafts=500).mismatch is False
    assert check_draft_length(s, batch_size=100.0, drafts=10, observed_k=3.0, min_drafts=500) is None
    assert check_draft_length(s, batch_size=100.0, drafts=900, observed_k=3.0, min_drafts=500).mismatch
    assert check_draft_length(s, batch_size=None, drafts=900, observed_k=3.0, min_drafts=500) is None


# ---- end to end on the simulator ------------------------------------------------------------------


def test_the_sidecar_exports_a_mismatch_while_the_simulated_server_ignores_its_schedule():
    """At 32 concurrent requests the stated schedule gives K=2. The simulated vLLM first follows it,
    then (as after a restart that dropped the schedule) drafts K=4 again."""
    sc = parse_scenario(
        chat_scenario(
            "schedule-dropped",
            4,
            [
                {"name": "follows", "duration": "3m", "concurrency": 32, "k": 2, "alpha": 0.75},
                {"name": "dropped", "duration": "3m", "concurrency": 32, "k": 4, "alpha": 0.75},
            ],
        )
    )
    raw = scenario_raw_config(sc, windows=("1m", "2m"))
    raw["draft"]["config"] = SCHEDULE
    config = from_mapping(raw, environ={})
    pipeline, simulator = Pipeline(config), sim.Simulator(sc, seed=2)
    seen: dict[float, float] = {}
    for t, _evaluations in simulated_polls(simulator, pipeline, interval=5.0, count=72):
        text = generate_latest(registry_for(pipeline.view)).decode()
        for fam in text_string_to_metric_families(text):
            for sample in fam.samples:
                if sample.name == "specwatch_speculative_config_mismatch" and sample.labels["window"] == "1m":
                    seen[t] = sample.value
                if sample.name == "specwatch_configured_draft_length_tokens" and sample.labels["window"] == "1m":
                    assert sample.value == 2
    assert {seen[t] for t in seen if 60 <= t <= 180} == {0.0}
    assert {seen[t] for t in seen if t >= 180 + 60} == {1.0}
    check = status_document(pipeline.view())["routes"][0]["windows"]["1m"]["config_check"]
    assert check["mismatch"] is True and check["configured_draft_length"] == 2
    assert check["observed_draft_length"] == pytest.approx(4.0)
