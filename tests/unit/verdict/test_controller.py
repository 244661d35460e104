"""The controller of K per route (verdict/controller.py): stated, observed, and stopped."""

from __future__ import annotations

from collections import deque

import pytest

from specwatch.engines.vllm_schedule import parse_speculative_config
from specwatch.verdict import controller as ctl
from specwatch.verdict.config_check import check_draft_length
from specwatch.windows.derive import WindowStats

MIN_DRAFTS = 500.0


def stats(window="1m", span=60.0, **values) -> WindowStats:
    base = {"route": "chat", "window": window, "t": 1000.0, "samples": 12, "span_seconds": span, "spec_present": True}
    return WindowStats(**{**base, **values})


def classify(windows, history=(), *, config=None, engine="vllm", k=3, configured=True):
    schedule = parse_speculative_config(config) if config is not None and "num_speculative_tokens" in config else None
    return ctl.classify(
        windows,
        deque(history),
        engine=engine,
        config=config,
        schedule=schedule,
        k=k,
        min_drafts=MIN_DRAFTS,
        configured=configured,
    )


DRAFTING = stats(drafts=4000.0, draft_length=3.0, acceptance_rate=0.6, batch_size=8.0, generation_tokens=12000.0)
FROZEN = stats(drafts=0.0, batch_size=8.0, generation_tokens=40000.0)


@pytest.mark.parametrize(
    "config, mode",
    [
        (None, "fixed"),
        ({"num_speculative_tokens": 3}, "fixed"),
        ({"num_speculative_tokens": 3, "enable_adaptive_verification": True}, "adaptive"),
        ({"num_speculative_tokens": 3, "speculative_adaptive": True}, "adaptive"),
        ({"num_speculative_tokens": 3, "acceptance_rate_threshold": 0.4}, "gated"),
        ({"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 64, 2]]}, "schedule"),
        # one band of K equal to num_speculative_tokens is no schedule
        ({"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 64, 4]]}, "fixed"),
    ],
)
def test_the_stated_config_gives_the_mode_while_the_engine_drafts(config, mode):
    c = classify([(DRAFTING, None, True)], config=config)
    assert (c.mode, c.basis) == (mode, "observed" if config is None else "stated")
    assert c.reason == "" and c.evidence


def test_k_moving_at_one_batch_is_an_adaptive_controller_observed_and_sglang_names_its_gauge():
    history = [(t, 8.0 + (t % 2), k) for t, k in enumerate([3.0, 3.0, 1.5, 2.0, 3.0])]
    c = classify([(DRAFTING, None, True)], history, engine="sglang")
    assert (c.mode, c.basis) == ("adaptive", "observed")
    assert "sglang:spec_num_steps moved between 1.50 and 3.00" in c.evidence
    # K moving with the batch as a stated schedule gives it is the schedule, not adaptive
    schedule = {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 8, 4], [9, 64, 2]]}
    moving = [(0, 8.0, 4.0), (1, 9.0, 2.0), (2, 8.0, 4.0)]
    assert classify([(DRAFTING, None, True)], moving, config=schedule).mode == "schedule"
    # and a steady K at another batch is no variation
    assert classify([(DRAFTING, None, True)], [(0, 64.0, 1.0), (1, 8.0, 3.0), (2, 8.0, 3.0)]).mode == "fixed"


def test_sglang_steps_differing_between_its_adaptive_bands_are_an_adaptive_controller_observed():
    # K steady within each band, 7 at batch 32 and 5 at batch 96: no variation at one batch.
    history = [(float(t), 32.0, 7.0) for t in range(5)] + [(float(t), 96.0, 5.0) for t in range(5, 10)]
    c = classify([(DRAFTING, None, True)], history, engine="sglang")
    assert (c.mode, c.basis) == ("adaptive", "observed")
    assert (
        c.evidence
        == "sglang:spec_num_steps per batch band: [1, 64) K=7.00 at batch ≈ 32, [64, 128) K=5.00 at batch ≈ 96"
    )
    # another engine's K following the batch without a stated controller is no band controller
    assert classify([(DRAFTING, None, True)], history, engine="vllm").mode == "fixed"


def test_each_band_is_read_at_the_window_nearest_its_representative_batch():
    # A window across the band edge (batch 59, K between 7 and 5) is not the band's steps.
    history = [(0.0, 32.0, 7.0), (1.0, 59.0, 6.2), (2.0, 96.0, 5.0), (3.0, 90.0, 5.4)]
    assert ctl.sglang_band_steps(history) == [(0, 7.0, 32.0), (1, 5.0, 96.0)]


def test_stated_sglang_bands_seen_in_one_band_name_the_step_gauge():
    config = {"num_speculative_tokens": 7, "speculative_adaptive": True}
    c = classify([(DRAFTING, None, True)], [(0.0, 96.0, 5.0), (1.0, 96.0, 5.0)], config=config, engine="sglang")
    assert (c.mode, c.basis) == ("adaptive", "stated")
    assert c.evidence.endswith("; sglang:spec_num_steps per batch band: [64, 128) K=5.00 at batch ≈ 96")


def test_observe_keeps_only_guarded_windows_of_drafters_whose_k_is_the_engines_choice():
    history: deque[ctl.KObservation] = deque()
    ctl.observe(history, DRAFTING, varies=True, guarded=True)  # n-gram lookup: its own short drafts
    ctl.observe(history, DRAFTING, varies=False, guarded=False)  # too few drafts
    assert not history
    for _ in range(ctl.K_HISTORY + 5):
        ctl.observe(history, DRAFTING, varies=False, guarded=True)
    assert len(history) == ctl.K_HISTORY


def test_a_fired_gate_is_stopped_with_what_was_expected_and_what_is_seen():
    config = {"num_speculative_tokens": 3, "acceptance_rate_threshold": 0.4}
    c = classify(
        [(FROZEN, None, False), (stats("5m", 300.0, drafts=900.0, generation_tokens=2e5), None, True)], config=config
    )
    assert (c.mode, c.reason, c.stated) == ("stopped", "gate_fired", "gated")
    assert "acceptance_rate_threshold=0.4" in c.expected
    assert c.seen == "40000 tokens generated and no draft over the 1m window at batch 8.0"
    # TensorRT-LLM with its spec counters frozen: its gate, stated or not
    assert classify([(FROZEN, None, False)], engine="trtllm").reason == "gate_fired"
    # another engine with nothing stated: drafts simply stopped
    assert classify([(FROZEN, None, False)]).reason == "not_drafting"


def test_no_stop_without_spec_counters_enough_generation_or_configured_speculation():
    config = {"num_speculative_tokens": 3, "acceptance_rate_threshold": 0.4}
    missing = stats(drafts=None, spec_present=False, batch_size=8.0, generation_tokens=40000.0)
    assert classify([(missing, None, False)], config=config).mode == "gated"  # SpecDecodeMetricsMissing's
    idle = stats(drafts=0.0, batch_size=1.0, generation_tokens=100.0)  # too few tokens to tell
    assert classify([(idle, None, False)], config=config).mode == "gated"
    assert classify([(FROZEN, None, False)], configured=False).mode == "fixed"
    # the shortest window that can tell decides: drafts in the 1m window, whatever the 5m one says
    assert (
        classify([(stats("5m", 300.0, drafts=0.0, generation_tokens=2e5), None, False), (DRAFTING, None, True)]).mode
        == "fixed"
    )


def test_a_schedule_at_zero_where_it_gives_k_is_stopped_and_its_k0_band_is_not():
    config = {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 1024, 0]]}
    at_8 = classify([(FROZEN, None, False)], config=config, k=4)
    assert (at_8.mode, at_8.reason) == ("stopped", "schedule_at_zero")
    assert at_8.expected == "the stated schedule gives K=4..4 at batch 8.0"
    in_band = stats(drafts=0.0, batch_size=64.0, generation_tokens=40000.0)
    assert classify([(in_band, None, False)], config=config, k=4).mode == "schedule"


def test_a_schedule_dropped_under_data_parallelism_is_stopped_and_one_engine_is_the_config_checks():
    config = {"num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 1024, 2]]}
    schedule = parse_speculative_config(config)
    window = stats(
        drafts=9000.0, draft_length=4.0, acceptance_rate=0.6, batch_size=32.0, generation_tokens=3e4, engines=2
    )
    check = check_draft_length(schedule, batch_size=32.0, drafts=9000.0, observed_k=4.0, min_drafts=MIN_DRAFTS)
    assert check is not None and check.mismatch
    c = classify([(window, check, True)], config=config, k=4)
    assert (c.mode, c.reason) == ("stopped", "schedule_dropped")
    assert c.seen == "K=4.00 over the 1m window on 2 data-parallel engines"
    one = stats(drafts=9000.0, draft_length=4.0, acceptance_rate=0.6, batch_size=32.0, generation_tokens=3e4)
    assert classify([(one, check, True)], config=config, k=4).mode == "schedule"


def test_an_acceptance_collapsed_to_zero_is_stopped():
    collapsed = stats(drafts=4000.0, draft_length=3.0, acceptance_rate=0.0, batch_size=8.0, generation_tokens=4000.0)
    c = classify([(collapsed, None, True)])
    assert (c.mode, c.reason) == ("stopped", "acceptance_collapsed")
    assert c.as_dict()["seen"] == "acceptance rate 0.000 over 4000 drafts over the 1m window at batch 8.0"
    assert c.line.startswith("controller: stopped (acceptance collapsed): ")
    assert classify([(collapsed, None, False)]).mode == "fixed"  # below the guard: no evidence
