"""Soak: noisy but stable traffic above break-even, zero verdict changes, flat RSS, no series growth.

Both run bench/soak.py in a fresh process, so the RSS measured is the soak's own:
- replay: SPECWATCH_SOAK_HOURS simulated hours (default 2 = 1 440 polls at 5 s; 24 = the full
  17 280-poll day, about a minute more) through specwatch.sidecar.replay;
- live: SPECWATCH_SOAK_MINUTES real minutes (default 1) of `specwatch run` polling the simulated
  vLLM every second (5x the default rate) (`python bench/soak.py live --minutes 10` is the full 10-minute run).
"""

from __future__ import annotations

import os

from .soakrun import Soak


def check(result: dict) -> None:
    assert result["verdict_changes"] == [], result["verdict_changes"]
    assert set(result["final_verdicts"].values()) == {"keep"} and len(result["final_verdicts"]) == 2
    assert len(result["rss_kib"]) >= 3
    assert result["rss_drift"] <= 0.10, result["rss_kib"]
    assert max(result["series"]) == min(result["series"]) > 0, result["series"]
    assert result["scrape_errors"] == 0
    assert result["problems"] == []


def test_replay_soak_of_a_noisy_stable_day_has_no_verdict_change_flat_rss_and_constant_series():
    hours = float(os.environ.get("SPECWATCH_SOAK_HOURS", "2"))
    result = Soak("replay", "--hours", str(hours), timeout=120 + hours * 60).result()
    assert result["polls"] == int(hours * 720)
    check(result)


def test_live_soak_of_specwatch_run_against_the_simulated_vllm_at_fast_polls(live_soak):
    """The soak was started when the tests were collected (conftest.py): it ran beside them."""
    result = live_soak.result()
    assert result["exit_code"] == 0
    check(result)
