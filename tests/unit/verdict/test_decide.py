"""Verdicts: sample guard, hysteresis margin, hold, and the numbers behind them."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specwatch import costmodel as cmod
from specwatch.config import ConfigError, DecisionConfig, from_mapping
from specwatch.config.cost_model import cost_model_from_config
from specwatch.engines.vllm_schedule import k_at_batch
from specwatch.export.collector import registry_for
from specwatch.export.status import status_document
from specwatch.sidecar.pipeline import Pipeline
from specwatch.verdict import decide
from specwatch.verdict.decide import VERDICTS, Assessment, VerdictState, assess, next_verdict
from specwatch.verdict.evaluation import evaluation_record, resolve_method
from support.builders import roofline_cost_model, window_stats

DECISION = DecisionConfig(min_drafts=500, margin=0.02, hold=2)
# Decision logic on the plain roofline (no fitted fixed costs of speculation): the scenarios below
# were laid out on it, and the calibration has its own tests (tests/unit/costmodel/test_calibration.py). Taken as
# exact (no calibration error), so the lines and configs are tested apart from the interval, which
# EXACT_CM's siblings with the generic prior's error test below.
ROOFLINE_CM = roofline_cost_model()
CM = replace(ROOFLINE_CM, calibration_log_error=0.0)
#: Drafts in a window large enough that alpha's sampling noise is negligible.
HUGE = 1e12


def test_verdict_names_are_the_design_contract():
    assert VERDICTS == ("spec_off", "insufficient_data", "undecided", "keep", "shorten", "disable")


NO_GAUGE = [f for f in Assessment.__dataclass_fields__ if f not in ("candidate", "notes")]


@pytest.mark.parametrize(
    ("window", "candidate"),
    [
        pytest.param(window_stats(spec_present=False), "spec_off", id="no-spec-families-is-spec-off"),
        pytest.param(
            replace(window_stats(drafts=0.0), generation_tokens=5000.0),
            "spec_off",
            id="generating-without-drafts-is-spec-off",
        ),
        pytest.param(window_stats(drafts=499.0), "insufficient_data", id="fewer-drafts-than-the-guard-is-insufficient"),
    ],
)
def test_a_window_without_evidence_gets_its_candidate_and_every_gauge_absent(window, candidate):
    a = assess(CM, window, DECISION, "eagle3", None)
    assert a.candidate == candidate
    assert all(getattr(a, f) is None for f in NO_GAUGE)


@pytest.mark.parametrize(
    ("window", "candidate"),
    [
        pytest.param(
            replace(window_stats(drafts=0.0), generation_tokens=0.0),
            "insufficient_data",
            id="an-idle-server-with-speculation-configured-is-insufficient-data-not-spec-off",
        ),
        pytest.param(
            # TensorRT-LLM through a source with no query for its drafts (one token_position of a family).
            replace(window_stats(drafts=0.0), draft_tokens=6000.0, generation_tokens=9000.0),
            "insufficient_data",
            id="draft-tokens-without-drafts-is-a-source-that-cannot-count-drafts-not-spec-off",
        ),
        pytest.param(
            window_stats(batch=None), "insufficient_data", id="a-missing-batch-is-insufficient-data-not-a-guess"
        ),
        pytest.param(window_stats(drafts=500.0), "keep", id="exactly-the-guards-drafts-is-assessed"),
        pytest.param(
            replace(window_stats(alpha=0.6), drafts=None, draft_tokens=None, accepted_tokens=None),
            "keep",
            id="a-v0-target-without-a-draft-counter-is-assessed-from-its-acceptance",
        ),
    ],
)
def test_the_candidate_of_a_window_at_the_edges_of_the_evidence(window, candidate):
    assert assess(CM, window, DECISION, "eagle3", None).candidate == candidate


def test_high_alpha_at_small_batch_keeps_speculation_with_the_model_numbers():
    a = assess(CM, window_stats(alpha=0.6, batch=8), DECISION, "eagle3", None)
    be = cmod.breakeven_acceptance_rate(CM, 8, 3)
    assert a.candidate == "keep"
    assert a.breakeven_acceptance_rate == pytest.approx(be)
    assert a.acceptance_margin == pytest.approx(0.6 - be)
    assert a.expected_speedup == pytest.approx(cmod.expected_speedup(CM, 8, 3, 0.6))
    assert a.recommended_draft_length == 3
    assert a.max_speculative_batch_size == cmod.max_speculative_batch_size(CM, 3, 0.6)
    # keep = nothing to change on the server: no config to paste.
    assert a.action == "no_change" and a.recommended_config is None and a.config_changes is None


@pytest.mark.parametrize(("alpha", "batch"), [(0.6, 8), (0.05, 256), (0.3, 64), (0.9, 1)])
def test_the_largest_paying_batch_is_searched_only_when_read_and_equals_the_eager_search(alpha, batch, monkeypatch):
    searches = []
    search = cmod.max_speculative_batch_size
    monkeypatch.setattr(cmod, "max_speculative_batch_size", lambda *a, **kw: searches.append(a) or search(*a, **kw))
    a = assess(CM, window_stats(alpha=alpha, batch=batch), DECISION, "eagle3", None)
    assert a.candidate in ("keep", "shorten", "disable", "undecided")
    assert searches == []  # deciding never needs it
    assert a.max_speculative_batch_size == search(CM, 3, alpha) and len(searches) == 1
    assert a.max_speculative_batch_size == search(CM, 3, alpha) and len(searches) == 1  # kept


def test_alpha_below_breakeven_at_high_batch_with_no_paying_draft_length_is_disable():
    a = assess(CM, window_stats(alpha=0.05, batch=256), DECISION, "eagle3", None)
    assert a.candidate == "disable"
    assert a.recommended_draft_length == 0
    # Still worth it at small batches at most: the schedule then ends with K=0 at the live batch.
    sched = (a.recommended_config or {}).get("num_speculative_tokens_per_batch_size", [[1, 512, 0]])
    assert next(k for lo, hi, k in sched if lo <= 256 <= hi) == 0
    assert a.expected_speedup < 1


def test_below_breakeven_at_k_while_a_shorter_draft_pays_is_shorten_not_disable():
    """The verdict and the recommended config must agree: if K'=1 still pays, say shorten."""
    be = cmod.breakeven_acceptance_rate(CM, 256, 3)
    a = assess(CM, window_stats(alpha=be - 0.1, batch=256), DECISION, "eagle3", None)
    assert a.acceptance_margin == pytest.approx(-0.1) and a.expected_speedup < 1
    assert a.recommended_draft_length >= 1
    assert a.candidate == "shorten"
    assert (
        cmod.expected_speedup_for_positions(
            CM, 256, cmod.position_rates_from_alpha(be - 0.1, 3)[: a.recommended_draft_length]
        )
        > 1
    )


@pytest.mark.parametrize(
    ("offset", "previous", "candidate"),
    [
        pytest.param(-0.01, "keep", "keep", id="keep-stays-just-below-the-line-inside-the-band"),
        pytest.param(+0.01, "disable", "disable", id="disable-stays-just-above-the-line-inside-the-band"),
        pytest.param(-0.03, "keep", "disable", id="keep-turns-disable-below-the-band"),
        pytest.param(+0.03, "disable", "keep", id="disable-turns-keep-above-the-band"),
    ],
)
def test_the_margin_keeps_a_verdict_from_flapping_around_the_line(offset, previous, candidate):
    # K=1: no shorter draft exists, so the line between keep and disable is the only decision. So
    # many drafts that alpha's noise leaves the interval clear of 1 just beside the line; the band
    # is DECISION's ±0.02.
    b = 160
    alpha = cmod.breakeven_acceptance_rate(CM, b, 1) + offset
    assert assess(CM, window_stats(alpha=alpha, k=1, batch=b, drafts=HUGE), DECISION, "eagle3", previous).candidate == (
        candidate
    )


def test_a_weak_tail_position_recommends_shorten_with_a_config_for_the_live_batch():
    rates = (0.8, 0.6, 0.05, 0.01)  # positions 2 and 3 rarely survive
    alpha = sum(rates) / 4
    a = assess(CM, window_stats(alpha=alpha, k=4, batch=96, rates=rates), DECISION, "eagle3", "keep")
    assert a.candidate == "shorten"
    assert 0 < a.recommended_draft_length < 4
    # One band over every batch is written as a plain num_speculative_tokens.
    changes = a.config_changes
    sched = changes.get("num_speculative_tokens_per_batch_size", [[1, 512, changes["num_speculative_tokens"]]])
    assert sched[0][0] == 1
    band = next(k for lo, hi, k in sched if lo <= 96 <= hi)
    assert band == a.recommended_draft_length
    # num_speculative_tokens is the schedule's maximum (vLLM clamps every band to it).
    assert changes["num_speculative_tokens"] == max(k for _, _, k in sched) <= 4
    json.dumps(changes)


def test_the_config_names_no_method_it_only_guessed_and_no_schedule_vllm_cannot_apply():
    rates = (0.8, 0.6, 0.05, 0.01)
    s = window_stats(alpha=sum(rates) / 4, k=4, batch=96, rates=rates)
    guessed = assess(CM, s, DECISION, "eagle3", "keep", config_method=None)
    assert "method" not in guessed.config_changes and guessed.recommended_config is None
    assert guessed.action == "merge"
    assert assess(CM, s, DECISION, "mtp", "keep", config_method="mtp").recommended_config["method"] == "mtp"
    for unusable in (replace(s, engines=2), replace(s, schema="v1-legacy-itl")):  # DP > 1, or older than 0.24
        a = assess(CM, unusable, DECISION, "eagle3", "keep")
        assert "num_speculative_tokens_per_batch_size" not in a.config_changes
        assert a.config_changes["num_speculative_tokens"] == a.recommended_draft_length


def test_cost_uses_measured_draft_length_not_configured_k():
    # n-gram drafted 3.4 tokens on average with K=4 configured (real vLLM run).
    s = replace(window_stats(alpha=0.3, k=4, batch=64), draft_length=3.4)
    a = assess(CM, s, DECISION, "ngram", None)
    ng = CM.with_method("ngram")
    assert a.breakeven_acceptance_rate == pytest.approx(cmod.breakeven_acceptance_rate(ng, 64, 3.4))


def test_method_selects_the_draft_cost():
    s = window_stats(alpha=0.5, batch=32)
    eagle = assess(CM, s, DECISION, "eagle3", None).breakeven_acceptance_rate
    ngram = assess(CM, s, DECISION, "ngram", None).breakeven_acceptance_rate
    draft_model = assess(CM, s, DECISION, "draft_model", None).breakeven_acceptance_rate
    assert ngram < eagle < draft_model


def test_hopeless_acceptance_everywhere_recommends_removing_the_config():
    a = assess(CM, window_stats(alpha=0.005, batch=4), DECISION, "eagle3", None)
    assert a.candidate == "disable" and a.recommended_draft_length == 0
    assert a.recommended_config is None


@pytest.mark.parametrize(
    ("start", "hold", "steps"),
    [
        pytest.param(None, 30.0, [("keep", 0.0, VerdictState("keep"))], id="the-first-evaluation-takes-effect-at-once"),
        pytest.param(
            VerdictState("keep"),
            30.0,
            [
                ("disable", 100.0, VerdictState("keep", "disable", 100.0)),
                ("disable", 120.0, VerdictState("keep", "disable", 100.0)),
                ("disable", 130.0, VerdictState("disable")),
            ],
            id="a-new-verdict-takes-effect-only-after-it-held-for-the-hold-time",
        ),
        pytest.param(
            VerdictState("keep"),
            10.0,
            [
                ("disable", 0.0, VerdictState("keep", "disable", 0.0)),
                ("shorten", 5.0, VerdictState("keep", "shorten", 5.0)),
                ("keep", 8.0, VerdictState("keep")),  # back to the current verdict clears the pending one
            ],
            id="an-interrupted-streak-restarts-the-hold-clock",
        ),
        pytest.param(
            VerdictState("keep"), 0.0, [("disable", 1.0, VerdictState("disable"))], id="a-zero-hold-switches-at-once"
        ),
    ],
)
def test_the_verdict_in_effect_after_each_candidate(start, hold, steps):
    state = start
    for candidate, now, expected in steps:
        state = next_verdict(state, candidate, hold_seconds=hold, now=now)
        assert state == expected, (candidate, now)


@pytest.mark.parametrize(
    ("polls", "interval"), [(1, 5.0), (2, 2.0), (3, 5.0)], ids=["1-poll-of-5s", "2-polls-of-2s", "3-polls-of-5s"]
)
def test_an_integer_hold_of_n_polls_switches_on_the_nth_evaluation(polls, interval):
    """N evaluations span N - 1 poll intervals."""
    hold = DecisionConfig(hold=polls).hold_seconds(interval)
    s, switched_at = VerdictState("keep"), None
    for i in range(10):
        s = next_verdict(s, "disable", hold_seconds=hold, now=100.0 + i * interval)
        if s.current == "disable":
            switched_at = i + 1  # evaluations seen
            break
    assert switched_at == polls


def test_a_hold_in_seconds_keeps_a_candidate_alternating_every_few_fast_polls_from_taking_effect():
    """Real vLLM, 2 s polls, a hold of 2 polls: shorten -> disable -> shorten within 40 s. With hold
    30s a candidate that alternates every few polls never takes effect."""
    config = from_mapping({"poll_interval": "2s", "windows": ["10s"], "decision": {"hold": "30s"}}, environ={})
    hold = config.decision.hold_seconds(config.poll_interval)
    assert hold == 30.0
    s = VerdictState("shorten")
    for i, candidate in enumerate(["disable"] * 6 + ["shorten"] * 2 + ["disable"] * 6 + ["shorten"] * 3):
        s = next_verdict(s, candidate, hold_seconds=hold, now=2.0 * i)
        assert s.current == "shorten"
    counted = from_mapping({"poll_interval": "2s", "windows": ["10s"], "decision": {"hold": 2}}, environ={})
    assert counted.decision.hold_seconds(counted.poll_interval) == 2.0


@pytest.mark.parametrize(
    ("raw", "environ", "hold"),
    [
        pytest.param({"decision": {"hold": "1m"}}, {}, 60.0, id="a-duration-in-seconds"),
        pytest.param({"decision": {"hold": 3}}, {}, 3, id="a-whole-number-of-polls"),
        pytest.param({}, {"SPECWATCH_DECISION__HOLD": "45s"}, 45.0, id="a-duration-from-the-environment"),
    ],
)
def test_hold_is_read_as_a_duration_or_a_whole_number_of_polls(raw, environ, hold):
    assert from_mapping(raw, environ=environ).decision.hold == hold


@pytest.mark.parametrize("bad", [2.5, "soon", 0, True], ids=["a-fraction", "a-word", "zero", "a-boolean"])
def test_a_bad_hold_names_its_key(bad):
    with pytest.raises(ConfigError) as exc:
        from_mapping({"decision": {"hold": bad}}, environ={})
    assert exc.value.key == "decision.hold"


def test_unknown_verdict_is_rejected():
    with pytest.raises(ValueError):
        next_verdict(None, "maybe", hold_seconds=0.0, now=0.0)


# ------------------------------------------------------------------------------------------
# Advice found wrong on a real vLLM (regressions)
# ------------------------------------------------------------------------------------------


def vllm_accepts(config: dict) -> str | None:
    """vLLM 0.32's SpeculativeConfig checks a pasted --speculative-config makes (vllm/config/speculative.py,
    __post_init__ and _verify_args): None if accepted, else vLLM's error."""
    method, model = config.get("method"), config.get("model")
    k = config.get("num_speculative_tokens")
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if model is None and k is not None and method not in ("mtp", "ngram", "[ngram]", "ngram_gpu", "suffix"):
        return "num_speculative_tokens was provided but without speculative model."
    if not isinstance(k, int) or k <= 0:
        return "num_speculative_tokens must be provided and > 0"
    if method in ("ngram", "ngram_gpu"):
        lo, hi = config.get("prompt_lookup_min"), config.get("prompt_lookup_max")
        lo, hi = lo or hi or 5, hi or lo or 5
        if lo > hi:
            return "prompt_lookup_min must be <= prompt_lookup_max"
    for band in config.get("num_speculative_tokens_per_batch_size") or []:
        if len(band) != 3 or band[0] > band[1]:
            return "schedule bands are (range_start, range_end, num_speculative_tokens)"
    return None


WEAK_TAIL = (0.8, 0.6, 0.05, 0.01)


def weak_tail_stats(**kw):
    return replace(window_stats(alpha=sum(WEAK_TAIL) / 4, k=4, batch=96, rates=WEAK_TAIL), **kw)


def test_the_flag_for_an_inferred_ngram_drafter_is_complete_and_accepted_by_vllm_as_pasted():
    a = assess(CM, weak_tail_stats(), DECISION, "ngram", "keep", config_method="ngram")
    assert a.candidate == "shorten" and a.action == "apply"
    assert vllm_accepts(a.recommended_config) is None
    assert a.recommended_config["method"] == "ngram"
    assert {"prompt_lookup_max", "prompt_lookup_min"} <= set(a.recommended_config)
    # Without method (and the n-gram window) the same keys are refused: the flag must be whole.
    partial = {
        k: v for k, v in a.recommended_config.items() if k not in ("method", "prompt_lookup_max", "prompt_lookup_min")
    }
    assert vllm_accepts(partial) == "num_speculative_tokens was provided but without speculative model."


def test_an_unknown_model_based_drafter_gets_keys_to_merge_not_a_partial_flag():
    a = assess(CM, weak_tail_stats(), DECISION, "eagle3", "keep", config_method=None)
    assert a.recommended_config is None and a.action == "merge"
    assert a.config_changes["num_speculative_tokens"] >= 1 and "method" not in a.config_changes
    assert any("merge" in note for note in a.notes)


def test_the_users_stated_config_is_completed_keeping_its_model_path_and_ngram_window():
    eagle = {
        "method": "eagle3",
        "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 512, 4]],
    }
    a = assess(CM, weak_tail_stats(), DECISION, "eagle3", "keep", config_method="eagle3", base_config=eagle)
    assert a.action == "apply" and vllm_accepts(a.recommended_config) is None
    assert a.recommended_config["model"] == eagle["model"]
    assert a.recommended_config["num_speculative_tokens"] == a.config_changes["num_speculative_tokens"]
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 7, "prompt_lookup_min": 3}
    b = assess(CM, weak_tail_stats(engines=2), DECISION, "ngram", "keep", config_method="ngram", base_config=ngram)
    assert (b.recommended_config["prompt_lookup_max"], b.recommended_config["prompt_lookup_min"]) == (7, 3)
    assert "num_speculative_tokens_per_batch_size" not in b.recommended_config  # none where vLLM ignores it


def test_disable_recommends_removing_speculation_even_where_small_batches_would_still_draft():
    """K=0 at the live batch: a K=0 band runs slower than no speculation, so remove the config."""
    a = assess(CM, window_stats(alpha=0.05, batch=256), DECISION, "eagle3", None)
    assert cmod.recommend_schedule(CM.with_method("eagle3"), cmod.position_rates_from_alpha(0.05, 3), 512)[0][2] > 0
    assert a.candidate == "disable" and a.action == "remove_speculative_config"
    assert a.recommended_config is None and a.config_changes is None and a.recommended_draft_length == 0


def test_a_schedule_prefers_k1_to_a_k0_band_that_costs_more_than_k1_loses():
    cm = CM.with_method("eagle3")
    p = (0.3, 0.1, 0.03, 0.01)
    plain = cmod.recommend_schedule(cm, p, 512)
    priced = cmod.recommend_schedule(cm, p, 512, zero_band_speedup=cmod.zero_k_band_speedup)
    zero_from = next(lo for lo, _hi, k in plain if k == 0)
    k_priced = next(k for lo, hi, k in priced if lo <= zero_from <= hi)
    # Just past where the plain schedule drops to K=0, K=1 still beats a K=0 band (which costs more under load).
    assert k_priced == 1
    assert cmod.expected_speedup_for_positions(cm, zero_from, p[:1]) > cmod.zero_k_band_speedup(zero_from)


def test_a_recommended_schedule_says_what_it_costs_in_vllm_today():
    a = assess(CM, weak_tail_stats(), DECISION, "ngram", "keep", config_method="ngram")
    assert "num_speculative_tokens_per_batch_size" in a.config_changes
    text = " ".join(a.notes)
    assert "piecewise" in text and "data parallel" in text and "collapse throughput" in text
    unscheduled = assess(CM, weak_tail_stats(engines=2), DECISION, "ngram", "keep", config_method="ngram")
    assert not any("piecewise" in n for n in unscheduled.notes)


BUMPY = cmod.Profile(points=((1, 0.004), (5, 0.004), (6, 0.008), (12, 0.0082), (40, 0.016)))


def bumpy_model():
    m = cmod.MODEL_PRESETS["llama-3.1-8b"]
    return cmod.CostModel(
        cmod.HARDWARE_PRESETS["h100-sxm"],
        m,
        context_tokens=0.0,
        profile=BUMPY,
        draft=cmod.draft_cost_for("ngram", m),
        calibration_log_error=0.0,
    )


def test_shorten_and_the_schedule_agree_at_the_live_batch_on_a_non_monotone_profile():
    """Best K is 0 at batch 5 but 1 at batch 8 on this measured curve: a schedule capped to be
    monotone would write K=0 from batch 5 on while the verdict says shorten to K=1 at batch 8."""
    cm, rates = bumpy_model(), (0.5, 0.2, 0.05, 0.01)
    assert cmod.best_draft_length(cm, 5, rates) == 0 and cmod.best_draft_length(cm, 8, rates) >= 1
    a = assess(
        cm,
        window_stats(alpha=sum(rates) / 4, k=4, batch=8, rates=rates, drafts=HUGE),
        DECISION,
        "ngram",
        "keep",
        config_method="ngram",
    )
    assert a.candidate == "shorten"
    assert k_at_batch(a.recommended_config, 8) == a.recommended_draft_length >= 1
    assert decide.verdict_agrees_with_config(a, 8, 4)


@pytest.mark.parametrize("cm", [CM, bumpy_model()], ids=["roofline", "bumpy-profile"])
def test_verdict_and_recommended_config_agree_over_a_grid(cm):
    method = "ngram" if cm.profile is not None else "eagle3"
    tails = [None, (0.9, 0.7, 0.3, 0.05), (0.6, 0.2, 0.05, 0.0), (0.95, 0.9, 0.85, 0.8)]
    checked = set()
    for alpha in (0.02, 0.1, 0.3, 0.5, 0.7, 0.9):
        for batch in (1, 3, 8, 24, 96, 256):
            for rates in tails:
                r = rates if rates is not None else cmod.position_rates_from_alpha(alpha, 4)
                a_win = sum(r) / 4 if rates is not None else alpha
                for previous in (None, "keep", "shorten", "disable"):
                    for config_method in ("same", None):
                        a = assess(
                            cm,
                            window_stats(alpha=a_win, k=4, batch=batch, rates=r),
                            DECISION,
                            method,
                            previous,
                            config_method=config_method,
                        )
                        assert decide.verdict_agrees_with_config(a, batch, 4), (alpha, batch, rates, previous, a)
                        if a.recommended_config is not None:
                            assert vllm_accepts(a.recommended_config) is None
                        checked.add(a.candidate)
    assert {"keep", "shorten", "disable"} <= checked


# ------------------------------------------------------------------------------------------
# The live pipeline on real vLLM 0.32 payloads (n-gram, K=4)
# ------------------------------------------------------------------------------------------

FIXTURES = Path(__file__).parents[2] / "fixtures" / "vllm-0.32-cpu"
IDLE = (FIXTURES / "ngram-00-idle.prom").read_text()
AFTER_C1 = (FIXTURES / "ngram-01-c1-quiet.prom").read_text()


def bumped(text: str, drafts: float, per_draft: int) -> str:
    """The payload with ``drafts`` more drafts of ``per_draft`` tokens, every token accepted."""

    def add(name: str, extra: float, body: str, labels: str = "") -> str:
        pattern = re.compile(
            rf'^({re.escape(name)}{{engine="0",model_name="tiny-llama"{labels}}}) (\S+)$', re.MULTILINE
        )
        return pattern.sub(lambda m: f"{m.group(1)} {float(m.group(2)) + extra}", body)

    text = add("vllm:spec_decode_num_drafts_total", drafts, text)
    text = add("vllm:spec_decode_num_draft_tokens_total", drafts * per_draft, text)
    text = add("vllm:spec_decode_num_accepted_tokens_total", drafts * per_draft, text)
    for i in range(per_draft):
        text = add("vllm:spec_decode_num_accepted_tokens_per_pos_total", drafts, text, f',position="{i}"')
    return text


def pipeline_for(**raw):
    base = {"poll_interval": "5s", "windows": ["30s", "2m"], "decision": {"min_drafts": 500, "hold": 2}}
    return Pipeline(from_mapping({**base, **raw}, environ={}))


def test_the_inferred_method_does_not_flip_on_a_handful_of_drafts_when_traffic_stops():
    """Real run: auto:ngram became auto:eagle3 on windows of 2-4 drafts after the load ended."""
    p = pipeline_for()
    p.ingest("vllm", 0.0, IDLE)
    p.ingest("vllm", 10.0, AFTER_C1)
    p.evaluate(10.0)
    assert p.state().routes[0].method == "auto:ngram"
    for i in range(1, 40):  # the tail: three 4-token drafts every 5 s, far below min_drafts
        t = 10.0 + 5 * i
        p.ingest("vllm", t, bumped(AFTER_C1, 3 * i, 4))
        p.evaluate(t)
        assert p.state().routes[0].method == "auto:ngram", t


FEW_DRAFTS = replace(window_stats(alpha=0.7, k=4, drafts=3.0), draft_length=4.0, draft_coverage=1.0)
#: A mean draft of 3 of K=4 over plenty of drafts.
SHORT = replace(window_stats(alpha=0.7, k=4, drafts=5000.0), draft_length=3.0)


@pytest.mark.parametrize(
    ("method", "window", "schedule_ks", "resolved"),
    [
        # No evidence: the caller keeps its answer.
        pytest.param("auto", FEW_DRAFTS, None, None, id="too-few-drafts-infer-nothing"),
        # Every request-step drafted, mean 3 of 4: a model-based drafter under a schedule, not n-gram.
        pytest.param(
            "auto", replace(SHORT, draft_coverage=1.0), None, "auto:eagle3", id="every-step-drafted-short-is-a-schedule"
        ),
        pytest.param("auto", replace(SHORT, draft_coverage=0.71), None, "auto:ngram", id="undrafted-steps-are-ngram"),
        # With the schedule known ([[1, 4, 4], [5, 32, 2]]) a mean inside its K range is no n-gram sign ...
        pytest.param(
            "auto",
            replace(SHORT, draft_coverage=1.0),
            (4, 2),
            "auto:eagle3",
            id="a-mean-inside-the-stated-schedules-ks-is-no-ngram-sign",
        ),
        # ... but a mean below every K it gives is.
        pytest.param(
            "auto",
            replace(SHORT, draft_length=1.6, draft_coverage=0.7),
            (4, 2),
            "auto:ngram",
            id="a-mean-below-every-k-of-the-stated-schedule-is-ngram",
        ),
        pytest.param("eagle3", FEW_DRAFTS, None, "eagle3", id="a-stated-method-is-kept"),
    ],
)
def test_method_inference_needs_enough_drafts_and_tells_a_schedule_from_ngram_misses(
    method, window, schedule_ks, resolved
):
    assert resolve_method(method, window, min_drafts=500, schedule_ks=schedule_ks) == resolved


def test_status_serves_no_alpha_batch_or_verdict_while_vllm_is_down_and_recovers_after():
    p = pipeline_for()
    p.ingest("vllm", 0.0, IDLE)
    p.ingest("vllm", 10.0, AFTER_C1)
    p.evaluate(10.0)
    windows = status_document(p.view())["routes"][0]["windows"]
    assert windows["2m"]["acceptance_rate"] is not None and windows["2m"]["verdict"] is not None
    p.ingest_error("vllm", 15.0, "connect")
    p.evaluate(15.0)
    down = status_document(p.view())
    assert down["targets"][0]["up"] is False
    assert down["routes"][0]["windows"] == {}  # as /metrics: absent, never stale
    p.ingest("vllm", 20.0, AFTER_C1)
    p.evaluate(20.0)
    assert status_document(p.view())["routes"][0]["windows"]["2m"]["verdict"] is not None


def test_a_breakeven_above_one_is_exported_capped_with_a_cannot_pay_series_and_kept_raw_in_status():
    p = pipeline_for(draft={"method": "eagle3", "cost_per_token": 5.0})  # a drafter costing 5 steps per token
    p.ingest("vllm", 0.0, IDLE)
    p.ingest("vllm", 10.0, AFTER_C1)
    [evaluation, *_] = [e for e in p.evaluate(10.0) if e.stats.window == "2m"]
    raw = evaluation_record(evaluation)
    assert raw["breakeven_acceptance_rate"] > 1 and raw["speculation_cannot_pay"] is True
    text = generate_latest(registry_for(p.view)).decode()
    samples = {
        (s.name, s.labels.get("window")): s.value for fam in text_string_to_metric_families(text) for s in fam.samples
    }
    assert samples[("specwatch_breakeven_acceptance_ratio", "2m")] == 1.0
    assert samples[("specwatch_speculation_cannot_pay", "2m")] == 1.0


def test_replay_lines_carry_the_complete_recommended_config():
    p = pipeline_for(windows=["30s", "2m"])
    p.ingest("vllm", 0.0, IDLE)
    p.ingest("vllm", 10.0, AFTER_C1)
    evaluation = next(e for e in p.evaluate(10.0) if e.stats.window == "2m")
    advice = assess(CM, weak_tail_stats(), DECISION, "ngram", "keep", config_method="ngram")
    record = evaluation_record(replace(evaluation, assessment=advice, advice=advice, verdict="shorten"))
    assert record["recommended_config"] == advice.recommended_config and record["recommended_action"] == "apply"
    assert vllm_accepts(record["recommended_config"]) is None
    json.dumps(record)


# ------------------------------------------------------------------------------------------
# Cost model inputs behind the advice
# ------------------------------------------------------------------------------------------

CPU_PROFILE = str(FIXTURES / "stepprofile-nospec.yaml")


def test_with_a_profile_the_draft_cost_is_a_roofline_ratio_not_a_roofline_draft_over_a_measured_step():
    """profile: + no hardware: the draft costs its roofline share of the profile's own step, not the draft's
    H100 roofline step over the CPU profile's step."""
    plain = from_mapping({"draft": {"method": "draft_model"}}, environ={})
    profiled = from_mapping({"draft": {"method": "draft_model"}, "profile": CPU_PROFILE}, environ={})
    cm_plain, cm_prof = cost_model_from_config(plain), cost_model_from_config(profiled)
    assert cm_prof.draft_cost_per_token() == pytest.approx(cm_plain.draft_cost_per_token())
    # Drafting K tokens costs K·c of the profile's own step.
    assert cm_prof.draft_time(1, 4) == pytest.approx(4 * cm_plain.draft_cost_per_token() * cm_prof.base_step_time(1))
    assert cmod.breakeven_acceptance_rate(cm_prof, 1, 4) < 1.0


def test_the_draft_model_is_named_by_a_preset_or_its_config_json(tmp_path):
    def cost(draft: dict) -> float:
        config = from_mapping({"draft": {"method": "draft_model", **draft}}, base_dir=str(tmp_path), environ={})
        return cost_model_from_config(config).draft_cost_per_token()

    default = cost({})
    assert cost({"model": "llama-3.2-1b"}) == pytest.approx(default)
    assert cost({"model": "llama-3.2-3b"}) > default
    (tmp_path / "draft.json").write_text(json.dumps(cmod.MODEL_HF_CONFIGS["llama-3.2-3b"]))
    assert cost({"model": "draft.json"}) == pytest.approx(cost({"model": "llama-3.2-3b"}))
    # The drafter survives a method inferred later (with_method) instead of falling back to 1B.
    config = from_mapping({"draft": {"model": "llama-3.2-3b"}}, environ={})
    inferred = cost_model_from_config(config).with_method("draft_model")
    assert inferred.draft_cost_per_token() == pytest.approx(cost({"model": "llama-3.2-3b"}))
    with pytest.raises(ConfigError) as exc:
        from_mapping({"draft": {"model": "gpt-17"}}, environ={})
    assert exc.value.key == "draft.model"


# ---- the speedup's interval ---------------------------------------------------------------------


def alpha_for_speedup(cm, batch, k, speedup):
    """The alpha at which the model predicts ``speedup`` (S is linear in alpha)."""
    base, spec = cm.step_times(batch, k, 1.0)
    return (speedup * spec / base - 1.0) / k


def test_a_speedup_within_the_models_error_of_1_is_undecided_and_asks_for_a_spec_off_canary():
    b, k = 160, 1  # K=1: no shorter draft, so the only question is on or off
    window = window_stats(alpha=alpha_for_speedup(ROOFLINE_CM, b, k, 0.8), k=k, batch=b)
    exact = assess(CM, window, DECISION, "eagle3", "keep")
    assert exact.candidate == "disable"  # a model without error would switch it off
    a = assess(ROOFLINE_CM, window, DECISION, "eagle3", "keep")
    assert a.candidate == "undecided" and a.action == "measure"
    assert a.expected_speedup == pytest.approx(0.8) and a.speedup_lower < 1.0 < a.speedup_upper
    assert a.recommended_draft_length == k and decide.verdict_agrees_with_config(a, b, k)
    m = a.measurement
    assert m is not None and m.kind == "spec_off_canary" and m.minutes >= 10 and m.batch == b
    assert "without --speculative-config" in m.how and f"{m.minutes:.0f} minutes" in m.how


@pytest.mark.parametrize(
    ("batch", "k", "speedup", "candidate", "action"),
    [
        pytest.param(160, 1, 0.45, "disable", "remove_speculative_config", id="clearly-below-1-is-disabled"),
        pytest.param(160, 1, 0.8, "undecided", "measure", id="within-the-models-error-of-1-is-undecided"),
        pytest.param(8, 3, 1.3, "undecided", "measure", id="above-1-but-not-the-whole-interval-is-undecided"),
        pytest.param(8, 3, 2.5, "keep", "no_change", id="the-whole-interval-above-1-is-keep"),
    ],
)
def test_the_verdict_follows_where_the_speedup_interval_lies(batch, k, speedup, candidate, action):
    window = window_stats(alpha=alpha_for_speedup(ROOFLINE_CM, batch, k, speedup), k=k, batch=batch)
    a = assess(ROOFLINE_CM, window, DECISION, "eagle3", "keep")
    assert (a.candidate, a.action) == (candidate, action)
    assert a.expected_speedup == pytest.approx(speedup)
    if candidate == "keep":
        assert a.speedup_lower > 1.0
    elif candidate == "disable":
        assert a.speedup_upper < 1.0
    else:
        assert a.speedup_lower < 1.0 < a.speedup_upper
    assert (a.measurement is None) == (candidate != "undecided")


@pytest.mark.parametrize(
    ("confidence", "candidate"),
    [(DECISION.confidence, "undecided"), (0.6, "disable")],
    ids=["at-the-default-confidence-undecided", "at-a-loose-confidence-disable"],
)
def test_the_confidence_level_sets_where_disable_starts(confidence, candidate):
    b, k = 160, 1
    window = window_stats(alpha=alpha_for_speedup(ROOFLINE_CM, b, k, 0.7), k=k, batch=b)
    assert (
        assess(ROOFLINE_CM, window, replace(DECISION, confidence=confidence), "eagle3", "keep").candidate == candidate
    )


def test_an_undecided_shorter_draft_asks_for_a_restart_with_a_config_vllm_accepts():
    window = weak_tail_stats()
    assert assess(CM, window, DECISION, "ngram", "keep", config_method="ngram").candidate == "shorten"
    a = assess(ROOFLINE_CM, window, DECISION, "ngram", "keep", config_method="ngram")
    assert a.candidate == "undecided"
    m = a.measurement
    assert m is not None and m.kind == "restart_with_draft_length" and 1 <= m.draft_length < 4
    assert m.speculative_config is not None and vllm_accepts(m.speculative_config) is None
    assert m.speculative_config["num_speculative_tokens"] == m.draft_length
    assert json.dumps(m.speculative_config, separators=(",", ":")) in m.how


def test_nothing_configured_and_nothing_learned_decides_nothing():
    """The assumed H100 and Llama-3.1-8B may be far from the server: even a predicted 3x is undecided."""
    cm = cost_model_from_config(from_mapping({}))
    assert cm.setup_assumed
    b, k = 1, 4
    window = window_stats(alpha=alpha_for_speedup(cm.with_method("eagle3"), b, k, 3.0), k=k, batch=b)
    a = assess(cm, window, DECISION, "eagle3", None)
    assert a.expected_speedup == pytest.approx(3.0, rel=1e-6) and a.candidate == "undecided"
    configured = replace(cm, setup_assumed=False)
    assert assess(configured, window, DECISION, "eagle3", None).candidate == "keep"


# ---- leaving a verdict in effect: the stay lines -------------------------------------------------


def window_with_bound(cm, batch, k, bound, *, side):
    """A window with alpha's noise negligible whose interval's ``side`` ("lower"/"upper") bound is ``bound``."""
    z = decide.uncertainty.z_for(DECISION.confidence)
    speedup = bound * math.exp(z * cm.calibration_log_error * (1 if side == "lower" else -1))
    return window_stats(alpha=alpha_for_speedup(cm, batch, k, speedup), k=k, batch=batch, drafts=HUGE)


def band_for(cm, batch, k):
    base, spec = cm.with_method("eagle3").step_times(batch, k, 1.0)
    return DECISION.margin * k * base / spec


def verdicts_through_the_hold(windows, start):
    """The verdict in effect after each window, polled every 5 s with DECISION's hold (two polls)."""
    hold = DECISION.hold_seconds(5.0)
    state, seen = VerdictState(start), []
    for i, window in enumerate(windows):
        a = assess(ROOFLINE_CM, window, DECISION, "eagle3", state.current)
        state = next_verdict(state, a.candidate, hold, now=5.0 * i)
        seen.append(state.current)
    return seen


def test_keep_in_effect_holds_while_the_lower_bound_wanders_just_around_its_line():
    b, k = 8, 3
    line = 1.0 - band_for(ROOFLINE_CM, b, k)
    above, below = (window_with_bound(ROOFLINE_CM, b, k, line * f, side="lower") for f in (1.01, 0.99))
    assert assess(ROOFLINE_CM, above, DECISION, "eagle3", None).candidate == "keep"
    assert assess(ROOFLINE_CM, below, DECISION, "eagle3", None).candidate == "undecided"  # entering: the entry line
    seen = verdicts_through_the_hold([above, below, below, above, above, below, below, below, above] * 3, "keep")
    assert set(seen) == {"keep"}, seen


@pytest.mark.parametrize(
    ("verdict", "batch", "k", "side", "sign"),
    [
        pytest.param("keep", 8, 3, "lower", -1, id="keep-once-the-lower-bound-is-clearly-below"),
        pytest.param("disable", 160, 1, "upper", +1, id="disable-once-the-upper-bound-is-clearly-above"),
    ],
)
def test_the_verdict_in_effect_leaves_for_undecided_within_the_hold(verdict, batch, k, side, sign):
    band = band_for(ROOFLINE_CM, batch, k)
    clearly = window_with_bound(ROOFLINE_CM, batch, k, (1.0 + sign * band) * math.exp(sign * 1.5 * band), side=side)
    a = assess(ROOFLINE_CM, clearly, DECISION, "eagle3", verdict)
    assert a.candidate == "undecided" and decide.verdict_agrees_with_config(a, batch, k)
    assert verdicts_through_the_hold([clearly, clearly], verdict) == [verdict, "undecided"]


def test_disable_in_effect_holds_while_the_upper_bound_wanders_just_around_its_line():
    b, k = 160, 1
    line = 1.0 + band_for(ROOFLINE_CM, b, k)
    above, below = (window_with_bound(ROOFLINE_CM, b, k, line * f, side="upper") for f in (1.005, 0.995))
    assert assess(ROOFLINE_CM, below, DECISION, "eagle3", "disable").candidate == "disable"
    seen = verdicts_through_the_hold([below, above, above, below, above, above, above, below] * 3, "disable")
    assert set(seen) == {"disable"}, seen


def shorten_with_lower_bound(bound):
    """The weak-tail window (a shorter draft pays more: candidate shorten) under a cost model whose
    error puts the interval's lower bound at ``bound``; the speedup and the candidate stay put."""
    window = weak_tail_stats(drafts=HUGE)
    speedup = assess(ROOFLINE_CM, window, DECISION, "eagle3", "shorten").expected_speedup
    z = decide.uncertainty.z_for(DECISION.confidence)
    return replace(ROOFLINE_CM, calibration_log_error=math.log(speedup / bound) / z), window


def test_shorten_in_effect_holds_while_the_lower_bound_wanders_just_around_its_line():
    line = 1.0 - band_for(ROOFLINE_CM, 96, 4)
    (above, window), (below, _) = (shorten_with_lower_bound(line * f) for f in (1.01, 0.99))
    assert assess(above, window, DECISION, "eagle3", "keep").candidate == "shorten"
    assert assess(below, window, DECISION, "eagle3", "keep").candidate == "undecided"  # entering: the entry line
    state, seen = VerdictState("shorten"), []
    hold = DECISION.hold_seconds(5.0)
    for i, cm in enumerate([above, below, below, above, below, below, below, above] * 3):
        state = next_verdict(state, assess(cm, window, DECISION, "eagle3", state.current).candidate, hold, 5.0 * i)
        seen.append(state.current)
    assert set(seen) == {"shorten"}, seen


def test_shorten_in_effect_leaves_for_undecided_once_the_lower_bound_is_clearly_below():
    band = band_for(ROOFLINE_CM, 96, 4)
    cm, window = shorten_with_lower_bound((1.0 - band) * math.exp(-1.5 * band))
    a = assess(cm, window, DECISION, "eagle3", "shorten")
    assert a.candidate == "undecided" and decide.verdict_agrees_with_config(a, 96, 4)


def test_the_stay_margin_is_alphas_sampling_noise_where_that_exceeds_the_band():
    b, k = 8, 3
    band = band_for(ROOFLINE_CM, b, k)
    few = decide.uncertainty.speedup_interval(
        ROOFLINE_CM, 2.0, k=k, alpha=0.5, coverage=1.0, drafts=20.0, confidence=DECISION.confidence
    )
    many = replace(few, sampling_log_error=0.0)
    assert (
        decide.stay_margin(few, band) == pytest.approx(few.z * few.sampling_log_error)
        and few.z * few.sampling_log_error > band
    )
    assert decide.stay_margin(many, band) == band


BAND, STAY = 0.05, 0.1
ENTRY = (1 - BAND, 1 - BAND)


@pytest.mark.parametrize(
    ("candidate", "previous", "lines"),
    [
        *(
            pytest.param(candidate, previous, ENTRY, id=f"{candidate}-entered-from-{previous}-gets-the-entry-lines")
            for candidate in ("keep", "disable")
            for previous in (None, "undecided", "insufficient_data", "spec_off")
        ),
        pytest.param("keep", "keep", ((1 - BAND) * math.exp(-STAY), 1 - BAND), id="keep-in-effect-stays-longer"),
        pytest.param("shorten", "keep", ENTRY, id="shorten-from-keep-enters-at-the-entry-lines"),
        pytest.param(
            "keep", "disable", (1 + BAND, 1 + BAND), id="keep-from-disable-needs-its-lower-bound-above-1-plus-band"
        ),
        pytest.param(
            "disable", "disable", (1 + BAND, (1 + BAND) * math.exp(STAY)), id="disable-in-effect-stays-longer"
        ),
        pytest.param(
            "disable",
            "shorten",
            (1 - BAND, 1 + BAND),
            id="disable-from-shorten-needs-its-upper-bound-below-1-plus-band",
        ),
        pytest.param(
            "shorten",
            "shorten",
            ((1 - BAND) * math.exp(-STAY), (1 + BAND) * math.exp(STAY)),
            id="shorten-in-effect-gets-both-stay-lines",
        ),
    ],
)
def test_only_the_verdict_in_effect_gets_the_stay_lines(candidate, previous, lines):
    # The stay lines (a verdict in effect again) are products with e^±stay; the entry lines exact.
    expected = pytest.approx(lines) if candidate == previous else lines
    assert decide.interval_lines(candidate, previous, band=BAND, stay=STAY) == expected
