"""The lesson's epsilon, split by what pays it: verify, drafting and the engine's fixed costs."""

from __future__ import annotations

import pytest

from specwatch import costmodel
from specwatch import costmodel as cmod


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


def test_a_k0_band_costs_more_under_load_as_measured_and_agrees_with_the_held_out_source():
    # fitted on vLLM #49548's two points, held at the ends
    assert cmod.zero_k_band_slowdown(2.0) == pytest.approx(0.0656)
    assert cmod.zero_k_band_slowdown(189.0) == pytest.approx(0.2158)
    assert cmod.zero_k_band_slowdown(1.0) == cmod.zero_k_band_slowdown(2.0)
    assert cmod.zero_k_band_slowdown(4096.0) == cmod.zero_k_band_slowdown(189.0)
    assert cmod.zero_k_band_slowdown(8.0) < cmod.zero_k_band_slowdown(64.0)
    # spec-goodput-control at batch 32, not used to set it: 14.9 % (V1) and 15-18 % (V0)
    assert 0.149 - 0.02 <= cmod.zero_k_band_slowdown(32.0) <= 0.18
    assert cmod.zero_k_band_speedup(32.0) == pytest.approx(1.0 / (1.0 + cmod.zero_k_band_slowdown(32.0)))
