"""Advice in each engine's terms: the same recommendation as each engine's flags or config."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from specwatch.config import DecisionConfig
from specwatch.engines.advice import (
    ADVISED_ENGINES,
    EngineAdvice,
    adapts_draft_length,
    advise,
    apply_to_command,
    recommendation_of,
    trtllm_schedule,
)
from specwatch.engines.registry import ENGINE_NAMES
from specwatch.engines.vllm_schedule import SCHEDULE_KEY, k_at_batch, parse_speculative_config
from specwatch.verdict.config_check import check_draft_length
from specwatch.verdict.decide import Assessment, assess
from specwatch.windows.derive import WindowStats
from support.builders import roofline_cost_model

BANDS = [[1, 16, 4], [17, 64, 2], [65, 512, 1]]
SCHEDULED = Assessment(
    candidate="shorten",
    recommended_draft_length=2,  # the live batch is in the 17..64 band
    action="apply",
    recommended_config={"method": "eagle3", "model": "/m/eagle", "num_speculative_tokens": 4, SCHEDULE_KEY: BANDS},
    config_changes={"method": "eagle3", "num_speculative_tokens": 4, SCHEDULE_KEY: BANDS},
)
FIXED = Assessment(  # the drafter's path unknown: vLLM's advice is keys to merge
    candidate="shorten", recommended_draft_length=2, action="merge", config_changes={"num_speculative_tokens": 2}
)
KEEP = Assessment(candidate="keep", recommended_draft_length=4, action="no_change")
DISABLE = Assessment(candidate="disable", recommended_draft_length=0, action="remove_speculative_config")

VLLM_FLAG = (
    '--speculative-config \'{"method":"eagle3","model":"/m/eagle","num_speculative_tokens":4,'
    '"num_speculative_tokens_per_batch_size":[[1,16,4],[17,64,2],[65,512,1]]}\''
)
SGLANG_K2 = "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3"
SGLANG_OFF = (
    "remove --speculative-algorithm --speculative-draft-model-path --speculative-draft-model --speculative-num-steps "
    "--speculative-eagle-topk --speculative-num-draft-tokens --speculative-adaptive --speculative-adaptive-config"
)
LLAMACPP_OFF = (
    "remove --spec-type --spec-draft-model -md --model-draft --spec-draft-n-max --spec-draft-n-min "
    "--spec-draft-p-min --draft-p-min (serve without the draft model)"
)

# engine, assessment -> (the command a user pastes or acts on, the action label)
TABLE = [
    ("vllm", SCHEDULED, VLLM_FLAG, "apply"),
    ("vllm", FIXED, 'merge into your --speculative-config: {"num_speculative_tokens":2}', "merge"),
    ("vllm", KEEP, None, "no_change"),
    ("vllm", DISABLE, "remove --speculative-config (serve without speculative decoding)", "remove_speculative_config"),
    ("sglang", SCHEDULED, SGLANG_K2, "apply"),
    ("sglang", FIXED, SGLANG_K2, "apply"),
    ("sglang", KEEP, None, "no_change"),
    ("sglang", DISABLE, SGLANG_OFF, "remove_speculative_config"),
    (
        "trtllm",
        SCHEDULED,
        "speculative_config:\n  max_draft_len: 4\n  draft_len_schedule:\n    16: 4\n    64: 2\n    512: 1",
        "apply",
    ),
    ("trtllm", FIXED, "speculative_config:\n  max_draft_len: 2", "apply"),
    ("trtllm", KEEP, None, "no_change"),
    (
        "trtllm",
        DISABLE,
        "remove speculative_config from the --config YAML (serve without speculative decoding)",
        "remove_speculative_config",
    ),
    ("llamacpp", SCHEDULED, "--spec-draft-n-max 2", "apply"),
    ("llamacpp", FIXED, "--spec-draft-n-max 2", "apply"),
    ("llamacpp", KEEP, None, "no_change"),
    ("llamacpp", DISABLE, LLAMACPP_OFF, "remove_speculative_config"),
    ("lmdeploy", SCHEDULED, "--speculative-num-draft-tokens 2", "apply"),
    ("lmdeploy", FIXED, "--speculative-num-draft-tokens 2", "apply"),
    ("lmdeploy", KEEP, None, "no_change"),
    (
        "lmdeploy",
        DISABLE,
        "remove --speculative-algorithm --speculative-draft-model --speculative-num-draft-tokens",
        "remove_speculative_config",
    ),
]


@pytest.mark.parametrize(("engine", "assessment", "command", "action"), TABLE)
def test_each_engine_renders_each_action_in_its_own_terms(engine, assessment, command, action):
    advice = advise(assessment, engine)
    assert advice is not None
    assert advice.command == command
    assert advice.export_action == action
    assert advice.action == assessment.candidate


def test_every_engine_has_a_row_for_every_action():
    rows = {(engine, a.candidate, a.action) for engine, a, _, _ in TABLE}
    for engine in set(ADVISED_ENGINES) - {"ray-vllm"}:
        assert {(engine, "keep", "no_change"), (engine, "disable", "remove_speculative_config")} <= rows
        assert any(row[0] == engine and row[1] == "shorten" for row in rows)


def test_every_engine_specwatch_reads_gets_advice_in_its_terms():
    assert set(ENGINE_NAMES) <= set(ADVISED_ENGINES)
    for engine in ENGINE_NAMES:
        advice = advise(FIXED, engine)
        assert advice is not None and advice.engine == engine and advice.command


def test_no_verdict_to_act_on_gives_no_advice_in_any_engine():
    below_guard = Assessment(candidate="insufficient_data")
    assert all(advise(below_guard, engine) is None for engine in ADVISED_ENGINES)
    measure = Assessment(candidate="undecided", action="measure")  # asks for a measurement, not a config
    assert all(advise(measure, engine) is None for engine in ADVISED_ENGINES)
    assert advise(None) is None


def test_an_engine_without_a_renderer_gets_no_advice_rather_than_vllm_flags():
    assert advise(SCHEDULED, "tgi") is None


def test_ray_serve_reads_vllm_speculative_config():
    ray, vllm = advise(SCHEDULED, "ray-vllm"), advise(SCHEDULED, "vllm")
    assert ray is not None and vllm is not None
    assert (ray.engine, ray.command, ray.label) == ("ray-vllm", vllm.command, vllm.label)


def test_vllm_label_is_the_sorted_config_json_the_metric_always_carried():
    advice = advise(SCHEDULED, "vllm")
    assert advice is not None
    assert yaml.safe_load(advice.label) == SCHEDULED.recommended_config
    assert advice.label.index('"method"') < advice.label.index('"model"') < advice.label.index('"num_')


def trtllm_k_at(schedule: dict[int, int], batch: int) -> int:
    """TensorRT-LLM's lookup as its llm_args documents it: the first key at or above the batch;
    above the last key, no drafting."""
    return next((k for bound, k in sorted(schedule.items()) if batch <= bound), 0)


@pytest.mark.parametrize(
    "bands",
    [
        BANDS,
        [[1, 8, 5], [9, 32, 3], [33, 128, 1], [129, 512, 0]],
        [[1, 4, 3], [5, 8, 3], [9, 256, 2]],
    ],
)
def test_a_schedule_renders_as_draft_len_schedule_giving_the_same_k_at_every_batch(bands):
    schedule = trtllm_schedule([tuple(b) for b in bands])
    assert schedule is not None
    config = {"num_speculative_tokens": max(k for _, _, k in bands), SCHEDULE_KEY: bands}
    for batch in range(1, bands[-1][1] + 1):
        assert trtllm_k_at(schedule, batch) == k_at_batch(config, batch)
    assert schedule[min(schedule)] == max(schedule.values())  # the engine requires it


def test_trailing_k0_bands_are_left_to_trtllm_implicit_zero_and_equal_bands_joined():
    assert trtllm_schedule([(1, 16, 3), (17, 512, 0)]) == {16: 3}
    assert trtllm_schedule([(1, 8, 4), (9, 16, 4), (17, 512, 2)]) == {16: 4, 512: 2}
    assert trtllm_schedule([(1, 512, 3)]) is None  # one K everywhere: max_draft_len alone


def test_a_schedule_trtllm_cannot_hold_falls_back_to_the_live_k_and_says_so():
    rising = replace(SCHEDULED, config_changes={"num_speculative_tokens": 4, SCHEDULE_KEY: [[1, 8, 2], [9, 512, 4]]})
    advice = advise(rising, "trtllm")
    assert advice is not None and advice.config == {"speculative_config": {"max_draft_len": 2}}
    assert any("cannot hold" in note for note in advice.notes)


def test_trtllm_keeps_the_users_speculative_config_and_drops_max_concurrency_beside_a_schedule():
    current = {"decoding_type": "Eagle3", "speculative_model": "/m/eagle", "max_draft_len": 4, "max_concurrency": 32}
    advice = advise(SCHEDULED, "trtllm", current)
    assert advice is not None
    assert advice.config == {
        "speculative_config": {
            "decoding_type": "Eagle3",
            "speculative_model": "/m/eagle",
            "max_draft_len": 4,
            "draft_len_schedule": {16: 4, 64: 2, 512: 1},
        }
    }
    fixed = advise(FIXED, "trtllm", current)
    assert fixed is not None and fixed.config == {"speculative_config": {**current, "max_draft_len": 2}}


def test_engines_without_a_batch_schedule_say_the_k_is_for_the_live_batch():
    for engine in ("sglang", "llamacpp", "lmdeploy"):
        scheduled, fixed = advise(SCHEDULED, engine), advise(FIXED, engine)
        assert scheduled is not None and fixed is not None
        assert any("no batch-size schedule" in note for note in scheduled.notes)
        assert not any("no batch-size schedule" in note for note in fixed.notes)


def test_llamacpp_lowers_a_stated_draft_minimum_above_the_new_maximum():
    advice = advise(FIXED, "llamacpp", {"spec_draft_n_min": 4})
    assert advice is not None and advice.flags == ("--spec-draft-n-max", "2", "--spec-draft-n-min", "2")
    assert advise(FIXED, "llamacpp", {"spec_draft_n_min": 1}).flags == ("--spec-draft-n-max", "2")


def test_llamacpp_advice_applied_to_a_server_command_line():
    argv = ["llama-server", "-m", "t.gguf", "-md", "d.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "8"]
    shorten, off = advise(FIXED, "llamacpp"), advise(DISABLE, "llamacpp")
    assert shorten is not None and off is not None
    assert apply_to_command(argv, shorten) == [*argv[:-2], "--spec-draft-n-max", "2"]
    assert apply_to_command([*argv[:-2], "--spec-draft-n-max=8"], off) == ["llama-server", "-m", "t.gguf"]


def test_a_removed_switch_takes_no_value_with_it():
    argv = ["sglang", "--speculative-adaptive", "--port", "30000", "--speculative-num-steps", "3"]
    off = advise(DISABLE, "sglang")
    assert off is not None and apply_to_command(argv, off) == ["sglang", "--port", "30000"]


def test_recommendation_reads_the_schedule_bands_and_the_live_k():
    rec = recommendation_of(SCHEDULED)
    assert rec is not None
    assert (rec.action, rec.k, rec.k_max, rec.bands) == ("shorten", 2, 4, ((1, 16, 4), (17, 64, 2), (65, 512, 1)))


# -- adaptive verification: the engine chooses K per step, so no shorten advice -----------------

DECISION = DecisionConfig(min_drafts=500, margin=0.02, hold=2)
# exact: the advice is tested apart from the speedup's interval
CM = replace(roofline_cost_model(), calibration_log_error=0.0)
WEAK_TAIL = (0.8, 0.6, 0.05, 0.01)  # positions 2 and 3 rarely survive: a shorter K pays more
DSPARK = {"method": "dspark", "model": "/m/dspark", "num_speculative_tokens": 4}


def weak_tail() -> WindowStats:
    alpha = sum(WEAK_TAIL) / 4
    return WindowStats(
        route="chat",
        window="1m",
        t=100.0,
        samples=13,
        span_seconds=60.0,
        spec_present=True,
        drafts=2000.0,
        draft_tokens=8000.0,
        accepted_tokens=8000.0 * alpha,
        acceptance_rate=alpha,
        mean_acceptance_length=1 + 4 * alpha,
        draft_length=4.0,
        configured_k=4,
        position_rates=WEAK_TAIL,
        batch_size=96.0,
    )


def test_with_adaptive_verification_on_a_shorter_k_is_not_advised_only_keep():
    fixed = assess(CM, weak_tail(), DECISION, "eagle3", "keep", base_config=DSPARK)
    assert fixed.candidate == "shorten"  # the same window without it
    adaptive_config = {**DSPARK, "enable_adaptive_verification": True}
    adaptive = assess(CM, weak_tail(), DECISION, "eagle3", "keep", base_config=adaptive_config)
    assert adaptive.candidate == "keep" and adaptive.action == "no_change"
    assert adaptive.recommended_config is None and adaptive.config_changes is None
    assert any("enable_adaptive_verification" in note and "keep or disable" in note for note in adaptive.notes)
    advice = advise(adaptive, "vllm", adaptive_config)
    assert advice is not None and advice.command is None and advice.action == "keep"


def test_with_adaptive_verification_on_disable_is_still_advised():
    adaptive_config = {**DSPARK, "enable_adaptive_verification": True}
    hopeless = replace(weak_tail(), acceptance_rate=0.005, position_rates=(0.005, 0.0, 0.0, 0.0), batch_size=4.0)
    a = assess(CM, hopeless, DECISION, "eagle3", None, base_config=adaptive_config)
    assert a.candidate == "disable" and a.action == "remove_speculative_config"


def test_sglang_adaptive_steps_make_a_shorten_a_keep_with_the_reason():
    advice = advise(SCHEDULED, "sglang", {"speculative_adaptive": True})
    assert advice == EngineAdvice("sglang", "keep", notes=advice.notes)
    assert "speculative_adaptive" in advice.notes[0]


def test_each_engine_reads_only_its_own_adaptive_option():
    assert adapts_draft_length({"enable_adaptive_verification": True}, "vllm")
    assert not adapts_draft_length({"enable_adaptive_verification": True}, "sglang")
    assert not adapts_draft_length({"enable_adaptive_verification": False})
    assert not adapts_draft_length({"enable_adaptive_verification": "true"})  # vLLM wants a boolean
    assert not adapts_draft_length(None)


@pytest.mark.parametrize(("engine", "assessment", "command", "action"), [row for row in TABLE if row[0] != "vllm"])
def test_another_engines_label_is_what_the_alerts_quote_as_is(engine, assessment, command, action):
    """The alerts quote a label that is not a JSON object as it is: it must say what the status says."""
    advice = advise(assessment, engine)
    assert advice is not None
    if command is None:
        assert advice.label == ""
    elif advice.config is not None:  # TensorRT-LLM: the same YAML on one line
        assert "\n" not in advice.label and yaml.safe_load(advice.label) == yaml.safe_load(command)
    else:
        assert advice.label == command and not advice.label.startswith("{")


def test_with_adaptive_verification_drafts_shorter_than_k_are_no_config_mismatch():
    """K is a maximum there: the config check must not alert on the engine's own shorter drafts."""
    kwargs = {"batch_size": 8.0, "drafts": 5000, "observed_k": 2.1, "min_drafts": 500}
    fixed = check_draft_length(parse_speculative_config(DSPARK), **kwargs)
    adaptive = check_draft_length(parse_speculative_config({**DSPARK, "enable_adaptive_verification": True}), **kwargs)
    assert fixed is not None and fixed.mismatch
    assert adaptive is not None and not adaptive.mismatch and adaptive.one_sided
    longer = check_draft_length(
        parse_speculative_config({**DSPARK, "enable_adaptive_verification": True}), **{**kwargs, "observed_k": 5.0}
    )
    assert longer is not None and longer.mismatch  # more than K is still wrong
