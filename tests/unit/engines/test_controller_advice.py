"""engines/advice.py in a controller's terms: what each engine's own controller of K can be told,
from the terms the verdict priced (ControllerTerms)."""

from __future__ import annotations

from dataclasses import replace

from specwatch.engines.advice import ControllerTerms, advise
from specwatch.engines.vllm_schedule import SCHEDULE_KEY
from specwatch.verdict.decide import Assessment

TERMS = ControllerTerms(
    batch=24.0,
    zero_k_tax=0.12,
    acceptance_rate=0.6,
    breakeven=0.35,
    delivered_gain=1.8,
    best_fixed_k=3,
    band_ks=(4, 2, 0),
)
KEEP = Assessment(candidate="keep", recommended_draft_length=4, action="no_change", controller_terms=TERMS)
DISABLE = Assessment(
    candidate="disable", recommended_draft_length=0, action="remove_speculative_config", controller_terms=TERMS
)
SHORTEN = Assessment(
    candidate="shorten",
    recommended_draft_length=2,
    action="merge",
    config_changes={"num_speculative_tokens": 2},
    controller_terms=TERMS,
)
ADAPTIVE = {"num_speculative_tokens": 5, "enable_adaptive_verification": True}


def notes(advice) -> str:
    assert advice is not None
    return " ".join(advice.notes)


def test_vllm_keeps_adaptive_verification_where_it_delivers_a_gain():
    text = notes(advise(KEEP, "vllm", ADAPTIVE))
    assert "Keep enable_adaptive_verification: it delivers 1.80x over no speculation at batch 24." in text
    assert SCHEDULE_KEY not in text  # no schedule stated nor advised: no band tax to mention


def test_vllm_adaptive_that_loses_names_the_best_fixed_k_and_a_schedule_names_the_k0_tax_at_the_load():
    assert "num_speculative_tokens=3 is the cost model's best at batch 24" in notes(advise(DISABLE, "vllm", ADAPTIVE))
    stated = {"num_speculative_tokens": 4, SCHEDULE_KEY: [[1, 16, 4], [17, 1024, 0]]}
    assert "a K=0 band still costs 12.0 % over no speculation at batch 24" in notes(advise(KEEP, "vllm", stated))


def test_sglang_gets_its_adaptive_band_candidates():
    text = notes(advise(KEEP, "sglang", {"speculative_adaptive": True}))
    assert "[1, 64): K=4, [64, 128): K=2, [128, inf): K=0 (no speculation pays)" in text


def test_trtllm_gets_a_gate_threshold_at_the_live_break_even_or_none_when_the_batch_moves_across_it():
    assert "acceptance_rate_threshold: 0.35 (the break-even at batch 24)" in notes(advise(KEEP, "trtllm"))
    moving = replace(KEEP, controller_terms=replace(TERMS, breakeven_range=(0.2, 0.75)))
    text = notes(advise(moving, "trtllm"))
    assert "Set no acceptance_rate_threshold: the break-even moves from 0.20 to 0.75" in text
    assert "acceptance_rate_threshold: 0.35" not in text


def test_llamacpp_gets_the_per_request_n_max_beside_the_restart_flag():
    advice = advise(SHORTEN, "llamacpp")
    assert advice is not None
    assert advice.flags == ("--spec-draft-n-max", "2") and advice.request == {"speculative.n_max": 2}
    assert '"speculative.n_max": 2 in the request body' in notes(advice)
    assert "ignore them silently" in notes(advice)  # the pinned real build does (tests/system/realllamacpp)
    kept = advise(KEEP, "llamacpp")
    assert kept is not None and kept.request is None


def test_without_terms_the_advice_is_the_verdicts_alone():
    plain = replace(KEEP, controller_terms=None)
    for engine in ("vllm", "trtllm", "sglang"):
        advice = advise(plain, engine, ADAPTIVE if engine == "vllm" else None)
        assert advice is not None and advice.notes == (), engine
