"""RouteEvaluation's typed accessors: guarded values are absent below the sample guard, the
recommendation comes from the advice behind the verdict in effect, and value(name) returns the
accessor's number for every exported numeric name and nothing else."""

from __future__ import annotations

import pytest

from specwatch.verdict.decide import Assessment
from specwatch.verdict.evaluation import NUMERIC_VALUES, RouteEvaluation
from specwatch.windows.derive import WindowStats

STATS = WindowStats(
    route="r",
    window="1m",
    t=10.0,
    samples=7,
    span_seconds=60.0,
    spec_present=True,
    drafts=400.0,
    acceptance_rate=0.6,
    mean_acceptance_length=2.8,
    draft_length=3.5,
    position_rates=(0.8, 0.6, 0.4),
    batch_size=12.0,
    itl_p50_seconds=0.02,
    itl_p99_seconds=0.05,
    itl_per_token_mean_seconds=0.01,
)
NOW = Assessment(
    "shorten",
    breakeven_acceptance_rate=0.5,
    acceptance_margin=0.1,
    expected_speedup=1.3,
    recommended_draft_length=2,
    max_speculative_batch_size=40,
    recommended_config={"num_speculative_tokens": 2},
)
BEHIND_VERDICT = Assessment("keep", recommended_draft_length=4, recommended_config={"num_speculative_tokens": 4})


def evaluation(guard: bool) -> RouteEvaluation:
    return RouteEvaluation(STATS, NOW, "keep", guard, advice=BEHIND_VERDICT)


def test_value_returns_the_accessor_for_every_numeric_name():
    for guard in (True, False):
        e = evaluation(guard)
        for name in NUMERIC_VALUES:
            assert e.value(name) == getattr(e, name)  # type: ignore[arg-type]


def test_guarded_values_are_absent_below_the_sample_guard_and_measured_ones_are_not():
    below = evaluation(False)
    for name in ("acceptance_rate", "mean_acceptance_length", "draft_length", "position_rates"):
        assert getattr(below, name) is None
        assert getattr(evaluation(True), name) == getattr(STATS, name)
    assert below.breakeven_acceptance_rate is None and below.recommended_config is None
    assert below.batch_size == 12.0 and below.itl_p99_seconds == 0.05


def test_the_recommendation_belongs_to_the_verdict_in_effect_and_the_rest_to_the_current_assessment():
    e = evaluation(True)
    assert (e.recommended_draft_length, e.recommended_config) == (4, {"num_speculative_tokens": 4})
    assert (e.breakeven_acceptance_rate, e.acceptance_margin, e.expected_speedup) == (0.5, 0.1, 1.3)
    assert e.max_speculative_batch_size == 40


def test_value_refuses_a_name_that_is_not_a_number():
    with pytest.raises(ValueError, match="position_rates"):
        evaluation(True).value("position_rates")  # type: ignore[arg-type]
