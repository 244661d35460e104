"""The demo's live table names what to do with --speculative-config for every action."""

from __future__ import annotations

import pytest

from specwatch.cli.demo import _fmt_breakeven, _recommendation
from specwatch.verdict.decide import Assessment
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.windows.derive import WindowStats

STATS = WindowStats(route="chat", window="5m", t=0.0, samples=10, span_seconds=300.0, spec_present=True)
SCHEDULE = {"num_speculative_tokens": 3, "num_speculative_tokens_per_batch_size": [[1, 46, 3], [47, 512, 1]]}


def evaluation(advice: Assessment | None, *, guard_passed: bool = True) -> RouteEvaluation:
    return RouteEvaluation(stats=STATS, assessment=advice, verdict="shorten", guard_passed=guard_passed, advice=advice)


@pytest.mark.parametrize(
    ("advice", "shown"),
    [
        (
            Assessment(
                "shorten",
                recommended_config={"method": "eagle3", "model": "m", "num_speculative_tokens": 2},
                config_changes={"num_speculative_tokens": 2},
                action="apply",
            ),
            '{"method":"eagle3","model":"m","num_speculative_tokens":2}',
        ),
        (
            Assessment("shorten", config_changes=SCHEDULE, action="merge"),
            'merge {"num_speculative_tokens":3,"num_speculative_tokens_per_batch_size":[[1,46,3],[47,512,1]]}',
        ),
        (Assessment("disable", action="remove_speculative_config"), "remove"),
        (Assessment("keep", action="no_change"), "no change"),
        (Assessment("keep"), "-"),
    ],
)
def test_recommendation_column_shows_the_action_and_its_keys(advice, shown):
    assert _recommendation(evaluation(advice)) == shown


def test_recommendation_column_is_empty_below_the_sample_guard():
    advice = Assessment("disable", action="remove_speculative_config")
    assert _recommendation(evaluation(advice, guard_passed=False)) == "-"


def test_breakeven_column_says_cannot_pay_above_one():
    assert _fmt_breakeven(60.6) == "cannot pay" and _fmt_breakeven(1.0) == "cannot pay"
    assert _fmt_breakeven(0.42) == "0.420" and _fmt_breakeven(None) == "-"
