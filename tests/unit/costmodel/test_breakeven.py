"""The lesson's epsilon, split by what pays it: verify, drafting and the engine's fixed costs."""

from __future__ import annotations

import pytest

from specwatch import costmodel


@pytest.mark.parametrize("method", ["eagle3", "ngram", "draft_model", "mtp"])
@pytest.mark.parametrize("coverage", [1.0, 0.4])
@pytest.mark.parametrize("batch", [1, 64, 256])
def test_the_lesson_epsilon_parts_sum_to_the_break_even_times_k(method, coverage, batch):
    """epsilon = verify + drafting + fixed is T_spec/T_base − 1, so epsilon/(c·K) is the break-even."""
    cm = costmodel.build_cost_model(hardware="h100-sxm", model="llama-3.1-70b", tensor_parallel=4, draft_method=method)
    k = 3
    parts = costmodel.overhead_breakdown(cm, batch, k, coverage)
    base, spec = cm.step_times(batch, k, coverage)
    assert parts.epsilon == pytest.approx(spec / base - 1.0, rel=1e-12)
    assert parts.epsilon / (coverage * k) == pytest.approx(
        costmodel.breakeven_acceptance_rate(cm, batch, k, coverage), rel=1e-12
    )
    assert parts.verify >= 0 and parts.drafting >= 0 and parts.fixed >= 0
    assert parts.fixed == pytest.approx(cm.spec_overhead_time(batch, batch * (1 + coverage * k)) / base)


def test_a_measured_draft_cost_has_no_separate_fixed_part():
    cm = costmodel.build_cost_model(hardware="h100-sxm", model="llama-3.1-8b", draft_cost_per_token=0.03)
    assert costmodel.overhead_breakdown(cm, 32, 4).fixed == 0.0
