"""Verdicts: sample guard, hysteresis margin, hold, and the numbers behind them."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import pytest
from specwatch import costmodel as cmod
from specwatch.config import DecisionConfig
from specwatch.decide import VERDICTS, Assessment, VerdictState, assess, next_verdict
from specwatch.derive import WindowStats

DECISION = DecisionConfig(min_drafts=500, margin=0.02, hold=2)
# Decision logic on the plain roofline (no fitted fixed costs of speculation): the scenarios below
# were laid out on it, and the calibration has its own tests (tests/test_calibration.py).
CM = cmod.CostModel(cmod.HARDWARE_PRESETS["h100-sxm"], cmod.MODEL_PRESETS["llama-3.1-8b"], context_tokens=1024,
                    draft=replace(cmod.draft_cost_for("eagle3", cmod.MODEL_PRESETS["llama-3.1-8b"]), fixed_seconds=0.0),
                    verify_overhead_seconds=0.0, verify_seconds_per_request=0.0)


def stats(alpha=0.6, k=3, batch=8.0, drafts=2000.0, rates=None, configured_k=None, spec_present=True):
    """A window whose counters are consistent: Σp_i = K·alpha, tau = 1 + K·alpha."""
    if rates is None and alpha is not None:
        rates = cmod.position_rates_from_alpha(alpha, k)
    return WindowStats(route="chat", window="1m", t=100.0, samples=13, span_seconds=60.0, spec_present=spec_present,
                       drafts=drafts, draft_tokens=None if drafts is None else drafts * k,
                       accepted_tokens=None if drafts is None or alpha is None else drafts * k * alpha,
                       acceptance_rate=alpha, mean_acceptance_length=None if alpha is None else 1 + k * alpha,
                       draft_length=float(k), configured_k=configured_k or k,
                       position_rates=None if rates is None else tuple(rates), batch_size=batch)


def test_verdict_names_are_the_design_contract():
    assert VERDICTS == ("spec_off", "insufficient_data", "keep", "shorten", "disable")


def test_no_spec_families_or_no_drafts_while_generating_is_spec_off_with_every_gauge_absent():
    generating_without_drafts = dataclasses.replace(stats(drafts=0.0), generation_tokens=5000.0)
    for s in (stats(spec_present=False), generating_without_drafts):
        a = assess(CM, s, DECISION, "eagle3", None)
        assert a.candidate == "spec_off"
        assert all(getattr(a, f) is None for f in Assessment.__dataclass_fields__ if f != "candidate")


def test_an_idle_server_with_speculation_configured_is_insufficient_data_not_spec_off():
    idle = dataclasses.replace(stats(drafts=0.0), generation_tokens=0.0)
    assert assess(CM, idle, DECISION, "eagle3", None).candidate == "insufficient_data"


def test_fewer_drafts_than_the_guard_is_insufficient_data_with_every_gauge_absent():
    a = assess(CM, stats(drafts=499.0), DECISION, "eagle3", None)
    assert a.candidate == "insufficient_data"
    assert all(getattr(a, f) is None for f in Assessment.__dataclass_fields__ if f != "candidate")
    assert assess(CM, stats(drafts=500.0), DECISION, "eagle3", None).candidate != "insufficient_data"


def test_missing_batch_size_is_insufficient_data_not_a_guess():
    assert assess(CM, stats(batch=None), DECISION, "eagle3", None).candidate == "insufficient_data"


def test_v0_target_without_draft_counter_is_assessed_from_its_acceptance():
    s = replace(stats(alpha=0.6), drafts=None, draft_tokens=None, accepted_tokens=None)
    assert assess(CM, s, DECISION, "eagle3", None).candidate == "keep"


def test_high_alpha_at_small_batch_keeps_speculation_with_the_model_numbers():
    a = assess(CM, stats(alpha=0.6, batch=8), DECISION, "eagle3", None)
    be = cmod.breakeven_acceptance_rate(CM, 8, 3)
    assert a.candidate == "keep"
    assert a.breakeven_acceptance_rate == pytest.approx(be)
    assert a.acceptance_margin == pytest.approx(0.6 - be)
    assert a.expected_speedup == pytest.approx(cmod.expected_speedup(CM, 8, 3, 0.6))
    assert a.recommended_draft_length == 3
    assert a.max_speculative_batch_size == cmod.max_speculative_batch_size(CM, 3, 0.6)
    assert a.recommended_config["num_speculative_tokens"] == 3
    json.dumps(a.recommended_config)  # ready for --speculative-config


def test_alpha_below_breakeven_at_high_batch_with_no_paying_draft_length_is_disable():
    a = assess(CM, stats(alpha=0.05, batch=256), DECISION, "eagle3", None)
    assert a.candidate == "disable"
    assert a.recommended_draft_length == 0
    # Still worth it at small batches at most: the schedule then ends with K=0 at the live batch.
    sched = (a.recommended_config or {}).get("num_speculative_tokens_per_batch_size", [[1, 512, 0]])
    assert next(k for lo, hi, k in sched if lo <= 256 <= hi) == 0
    assert a.expected_speedup < 1


def test_below_breakeven_at_k_while_a_shorter_draft_pays_is_shorten_not_disable():
    """The verdict and the recommended config must agree: if K'=1 still pays, say shorten."""
    be = cmod.breakeven_acceptance_rate(CM, 256, 3)
    a = assess(CM, stats(alpha=be - 0.1, batch=256), DECISION, "eagle3", None)
    assert a.acceptance_margin == pytest.approx(-0.1) and a.expected_speedup < 1
    assert a.recommended_draft_length >= 1
    assert a.candidate == "shorten"
    assert cmod.expected_speedup_for_positions(
        CM, 256, cmod.position_rates_from_alpha(be - 0.1, 3)[:a.recommended_draft_length]) > 1


def test_margin_keeps_a_verdict_from_flapping_around_the_line():
    # K=1: no shorter draft exists, so the line between keep and disable is the only decision.
    b = 160
    be = cmod.breakeven_acceptance_rate(CM, b, 1)
    just_below, just_above = be - 0.01, be + 0.01  # inside the ±0.02 band
    # Coming from keep, slightly below the line is not yet disable ...
    assert assess(CM, stats(alpha=just_below, k=1, batch=b), DECISION, "eagle3", "keep").candidate == "keep"
    # ... and coming from disable, slightly above is not yet back on.
    assert assess(CM, stats(alpha=just_above, k=1, batch=b), DECISION, "eagle3", "disable").candidate == "disable"
    # Outside the band both directions move.
    assert assess(CM, stats(alpha=be - 0.03, k=1, batch=b), DECISION, "eagle3", "keep").candidate == "disable"
    assert assess(CM, stats(alpha=be + 0.03, k=1, batch=b), DECISION, "eagle3", "disable").candidate == "keep"


def test_a_weak_tail_position_recommends_shorten_with_a_config_for_the_live_batch():
    rates = (0.8, 0.6, 0.05, 0.01)  # positions 2 and 3 rarely survive
    alpha = sum(rates) / 4
    a = assess(CM, stats(alpha=alpha, k=4, batch=96, rates=rates), DECISION, "eagle3", "keep")
    assert a.candidate == "shorten"
    assert 0 < a.recommended_draft_length < 4
    # One band over every batch is written as a plain num_speculative_tokens.
    sched = a.recommended_config.get("num_speculative_tokens_per_batch_size",
                                     [[1, 512, a.recommended_config["num_speculative_tokens"]]])
    assert sched[0][0] == 1
    band = next(k for lo, hi, k in sched if lo <= 96 <= hi)
    assert band == a.recommended_draft_length
    # num_speculative_tokens is the schedule's maximum (vLLM clamps every band to it).
    assert a.recommended_config["num_speculative_tokens"] == max(k for _, _, k in sched) <= 4


def test_the_config_names_no_method_it_only_guessed_and_no_schedule_vllm_cannot_apply():
    rates = (0.8, 0.6, 0.05, 0.01)
    s = stats(alpha=sum(rates) / 4, k=4, batch=96, rates=rates)
    guessed = assess(CM, s, DECISION, "eagle3", "keep", config_method=None).recommended_config
    assert "method" not in guessed
    assert assess(CM, s, DECISION, "mtp", "keep", config_method="mtp").recommended_config["method"] == "mtp"
    for unusable in (replace(s, engines=2), replace(s, schema="v1-legacy-itl")):  # DP > 1, or older than 0.24
        config = assess(CM, unusable, DECISION, "eagle3", "keep").recommended_config
        assert "num_speculative_tokens_per_batch_size" not in config
        assert config["num_speculative_tokens"] == assess(CM, unusable, DECISION, "eagle3", "keep").recommended_draft_length


def test_cost_uses_measured_draft_length_not_configured_k():
    # n-gram drafted 3.4 tokens on average with K=4 configured (real vLLM run).
    s = replace(stats(alpha=0.3, k=4, batch=64), draft_length=3.4)
    a = assess(CM, s, DECISION, "ngram", None)
    ng = CM.with_method("ngram")
    assert a.breakeven_acceptance_rate == pytest.approx(cmod.breakeven_acceptance_rate(ng, 64, 3.4))


def test_method_selects_the_draft_cost():
    s = stats(alpha=0.5, batch=32)
    eagle = assess(CM, s, DECISION, "eagle3", None).breakeven_acceptance_rate
    ngram = assess(CM, s, DECISION, "ngram", None).breakeven_acceptance_rate
    draft_model = assess(CM, s, DECISION, "draft_model", None).breakeven_acceptance_rate
    assert ngram < eagle < draft_model


def test_hopeless_acceptance_everywhere_recommends_removing_the_config():
    a = assess(CM, stats(alpha=0.005, batch=4), DECISION, "eagle3", None)
    assert a.candidate == "disable" and a.recommended_draft_length == 0
    assert a.recommended_config is None


def test_first_evaluation_takes_effect_immediately():
    assert next_verdict(None, "keep", hold=2) == VerdictState("keep")


def test_a_new_verdict_takes_effect_only_after_holding_for_hold_evaluations():
    s = VerdictState("keep")
    s = next_verdict(s, "disable", hold=3)
    assert s.current == "keep" and s.pending == "disable" and s.pending_count == 1
    s = next_verdict(s, "disable", hold=3)
    assert s.current == "keep" and s.pending_count == 2
    s = next_verdict(s, "disable", hold=3)
    assert s == VerdictState("disable")


def test_an_interrupted_streak_restarts_the_hold_count():
    s = next_verdict(VerdictState("keep"), "disable", hold=2)
    s = next_verdict(s, "shorten", hold=2)
    assert s.current == "keep" and s.pending == "shorten" and s.pending_count == 1
    s = next_verdict(s, "keep", hold=2)  # back to the current verdict clears the pending one
    assert s == VerdictState("keep")


def test_hold_of_one_switches_at_once():
    assert next_verdict(VerdictState("keep"), "disable", hold=1) == VerdictState("disable")


def test_unknown_verdict_is_rejected():
    with pytest.raises(ValueError):
        next_verdict(None, "maybe", hold=2)
