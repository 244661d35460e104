"""The cost model's shortcuts change no number: every memo and inlined formula gives exactly (bit
for bit, ==) what the plain formula computes on a freshly built model (issue #17)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cached_property

import pytest

from specwatch import costmodel as cmod
from specwatch.costmodel import learned
from specwatch.costmodel.breakeven import first_drop_best
from specwatch.costmodel.models import DTYPE_BYTES, model_weight_bytes
from specwatch.costmodel.roofline import _COVERAGE_FREE_CACHED, CostModel
from specwatch.costmodel.search import last_true

MODELS = [  # dense and MoE, one and four GPUs, every draft cost class, a profile, a configured cost
    {"hardware": "h100-sxm", "model": "llama-3.1-8b", "draft_method": "eagle3"},
    {"hardware": "h100-sxm", "model": "llama-3.1-70b", "tensor_parallel": 4, "draft_method": "ngram"},
    {"hardware": "a100-80gb", "model": "qwen3-30b-a3b", "draft_method": "mtp"},
    {"hardware": "h100-sxm", "model": "llama-3.1-8b", "draft_method": "draft_model"},
    {
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "draft_method": "eagle3",
        "profile": cmod.parse_profile({"context_tokens": 1024, "points": [[1, 0.007], [64, 0.0079], [512, 0.02]]}),
    },
    {"hardware": "h100-sxm", "model": "llama-3.1-8b", "draft_method": "eagle3", "draft_cost_per_token": 0.05},
]
IDS = ["eagle3", "70b-tp4-ngram", "moe-mtp", "draft-model", "profile", "configured-cost"]
BATCHES = (1, 2.5, 7, 16, 63.7, 300, 1024)
COVERAGES = (None, 0.71, 1.0)


def learned_model() -> CostModel:
    """A learned curve over the default prior, from six spec-on windows of a slow server."""
    prior = cmod.build_cost_model()
    learner = learned.StepTimeLearner(prior.with_method("ngram"), min_points=2)
    for i, (batch, step) in enumerate([(1, 0.03), (3, 0.035), (7, 0.05), (12, 0.07), (30, 0.12), (60, 0.3)]):
        learner.add(
            learned.StepObservation(
                t=10.0 * (i + 1),
                batch=float(batch),
                query_tokens=batch * 3.2,
                step_seconds=step,
                draft_length=3.4,
                draft_coverage=0.7,
                steps=100.0,
                prefill_tokens=0.0,
            )
        )
    curve = learner.curve()
    assert curve is not None
    return learned.learned_cost_model(prior, curve)


def builders() -> Iterator[tuple[str, object]]:
    for name, settings in zip(IDS, MODELS, strict=True):
        yield name, lambda settings=settings: cmod.build_cost_model(**settings)
    yield "learned", learned_model


@pytest.mark.parametrize(("name", "build"), list(builders()), ids=[*IDS, "learned"])
def test_the_k_scan_rows_and_the_batch_search_pairs_hold_exactly_a_fresh_models_step_times(name, build):
    long_lived = build()
    rates = cmod.position_rates_from_alpha(0.7, 5)
    for coverage, method in itertools.product(COVERAGES, ("eagle3", "ngram")):
        cm = long_lived.with_method(method).with_coverage(coverage)
        cmod.recommend_schedule(cm, rates, 1024, live_batch=63.7)
        for batch in BATCHES:
            cmod.best_draft_length(cm, batch, rates)
        for k in (1, 3, 3.38):
            cmod.max_speculative_batch_size(cm, k, 0.8)
        fresh = build().with_method(method).with_coverage(coverage)
        rows = [(key, row) for key, row in cm._rows.items() if key[1] == cm.draft_coverage]
        assert rows
        for (batch, _), row in rows:
            assert row == [fresh.base_step_time(batch)] + [fresh.spec_step_time(batch, kk) for kk in range(1, len(row))]
        for k in (1, 3, 3.38):
            pairs = cm.step_time_pairs(k)
            assert pairs
            assert pairs == {b: (fresh.base_step_time(b), fresh.spec_step_time(b, k)) for b in pairs}


def speedups_of_the_plain_scan(cm: CostModel, batch: float, rates: tuple[float, ...]) -> Iterator[float]:
    """best_draft_length's speedups as it computed them before the row (lazily, per K')."""
    tau = 1.0
    for kk in range(1, len(rates) + 1):
        tau += cm.draft_coverage * float(rates[kk - 1])
        yield tau * cm.base_step_time(batch) / cm.spec_step_time(batch, kk)


def max_batch_by_expected_speedup(cm: CostModel, k: float, alpha: float, limit: int) -> int:
    """max_speculative_batch_size as it was before step_time_pairs: expected_speedup per probe."""

    def pays(b: int) -> bool:
        return cmod.expected_speedup(cm, b, k, alpha) > 1.0

    if not pays(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and pays(hi):
        lo, hi = hi, hi * 2
    if hi > limit:
        return limit if pays(limit) else last_true(pays, lo, limit)
    return last_true(pays, lo, hi)


@pytest.mark.parametrize(("name", "build"), list(builders()), ids=[*IDS, "learned"])
def test_best_k_and_the_largest_speculative_batch_equal_the_plain_scans_on_fresh_models(name, build):
    long_lived = build()
    rng = random.Random(11)
    for _ in range(60):
        coverage = rng.choice(COVERAGES)
        method = rng.choice(("eagle3", "ngram"))
        batch = rng.choice(BATCHES)
        rates = tuple(sorted((rng.random() for _ in range(rng.randint(1, 6))), reverse=True))
        floor = rng.choice((1.0, cmod.ZERO_K_BAND_SPEEDUP))
        k, alpha = rng.choice((1, 2, 3.38, 5)), rng.random()
        cached = long_lived.with_method(method).with_coverage(coverage)
        fresh = build().with_method(method).with_coverage(coverage)
        assert cmod.best_draft_length(cached, batch, rates, floor) == first_drop_best(
            speedups_of_the_plain_scan(fresh, batch, rates), floor
        )
        for limit in (100, cmod.MAX_BATCH_LIMIT):
            assert cmod.max_speculative_batch_size(cached, k, alpha, limit) == max_batch_by_expected_speedup(
                build().with_method(method).with_coverage(coverage), k, alpha, limit
            )


@pytest.mark.parametrize("settings", MODELS[:4], ids=IDS[:4])
def test_the_inlined_dense_and_draft_head_rooflines_equal_the_general_roofline(settings):
    cm = cmod.build_cost_model(**settings)
    kv_scale = DTYPE_BYTES[cm.kv_dtype] / 2.0
    d = cm.draft
    for tokens, context in itertools.product((0.5, 1, 3.3, 64, 511.7, 4096, 70000), (0.0, 900.0, 2.5e6)):
        t = max(float(tokens), 1.0)
        general = cm._roofline(
            model_weight_bytes(cm.model, cm.dtype, t),
            cm.model.active_params,
            t,
            cm.kv_bytes_per_token * context,
            cm.fixed_seconds,
        )
        assert cm.step_time(tokens, context) == general
    if d.head_params > 0:
        for batch, k in itertools.product((1.0, 3.7, 48.0, 900.0), (1, 3, 3.38)):
            head_step = cm._roofline(
                d.head_params * DTYPE_BYTES["bf16"],
                d.head_params,
                batch,
                d.head_kv_bytes_per_token * kv_scale * cm.context_tokens * batch,
                0.0,
            )
            passes = k if d.head_steps_per_token else 1.0
            assert cm._head_draft_time(batch, k) == cm.cost_scale(batch * (k + 1)) * passes * (
                d.fixed_seconds + head_step
            )


def test_the_spec_steps_fixed_cost_is_the_scaled_verify_overhead_of_the_batch():
    for cm in (cmod.build_cost_model(), learned_model()):
        for batch, tokens in ((1, None), (3.4, 11.2), (64, 256.0), (0.5, 2.0)):
            fixed = cm.verify_overhead_seconds + cm.verify_seconds_per_request * max(float(batch), 1.0)
            scale = cm.cost_scale(tokens if tokens is not None else batch)
            assert cm.spec_overhead_time(batch, tokens) == scale * fixed


def test_a_learned_curves_memoised_ratio_is_the_computed_one():
    curve = learned_model().profile
    assert isinstance(curve, learned.LearnedStepCurve)
    tokens = [0.3, 1, 2, 3.2, 9.6, 10, 38.4, 100, 192, 5000, 1e6]
    first = [curve.ratio(t) for t in tokens]
    assert first == [curve._ratio(t) for t in tokens]
    assert [curve.ratio(t) for t in tokens] == first  # from the memo
    assert curve == replace(curve)  # the memo is not part of the curve's value


@pytest.mark.parametrize("coverage", [0.05, 0.71, 1.0, 1.7, float("inf")])
def test_a_coverage_derived_model_equals_the_replaced_model_and_its_cached_constants(coverage):
    for parent in (cmod.build_cost_model(draft_method="eagle3"), learned_model().with_method("ngram")):
        parent.base_step_time(3.0)  # fills the parent's cached constants, which the copy carries over
        parent.spec_step_time(3.0, 2)
        derived = parent.with_coverage(coverage)
        reference = replace(parent, draft_coverage=min(float(coverage), 1.0))
        assert derived == reference
        assert derived._memo is parent._memo and derived._rows is parent._rows and derived._pairs is parent._pairs
        for name in _COVERAGE_FREE_CACHED:
            assert isinstance(CostModel.__dict__[name], cached_property), name
            assert getattr(derived, name) == getattr(reference, name), name
        for batch, k in ((1, 1), (3.0, 2), (63.7, 3.38)):
            assert derived.spec_step_time(batch, k) == reference.spec_step_time(batch, k)
            assert derived.base_step_time(batch) == reference.base_step_time(batch)


@dataclass
class ChangingCurve:
    """A step-time curve that changes while the sidecar runs (its curve_version counts changes)."""

    scale: float = 1.0
    curve_version: int = 0

    def step_seconds(self, tokens: float, context_tokens: float, roofline_kv_seconds_per_token: float) -> float:
        return self.scale * (0.007 + 2e-5 * tokens) + roofline_kv_seconds_per_token * context_tokens


def test_a_new_curve_version_empties_the_rows_and_pairs_too():
    curve = ChangingCurve()
    cm = cmod.build_cost_model(profile=curve).with_coverage(0.8)
    rates = (0.8, 0.6, 0.4, 0.2)
    cmod.recommend_schedule(cm, rates, 512, live_batch=40.0)
    cmod.max_speculative_batch_size(cm, 3, 0.5)
    assert cm._rows and cm._pairs
    curve.scale, curve.curve_version = 6.0, 1
    fresh = cmod.build_cost_model(profile=ChangingCurve(scale=6.0)).with_coverage(0.8)
    assert cmod.recommend_schedule(cm, rates, 512, live_batch=40.0) == cmod.recommend_schedule(
        fresh, rates, 512, live_batch=40.0
    )
    assert cmod.max_speculative_batch_size(cm, 3, 0.5) == cmod.max_speculative_batch_size(fresh, 3, 0.5)
    for (batch, _), row in cm._rows.items():
        assert row[0] == fresh.base_step_time(batch)
    assert cm.step_time_pairs(3) == {
        b: (fresh.base_step_time(b), fresh.spec_step_time(b, 3)) for b in cm.step_time_pairs(3)
    }


def test_new_coverages_every_poll_keep_the_per_method_models_and_stay_bounded():
    cm = cmod.build_cost_model(draft_method="eagle3")
    ngram = cm.with_method("ngram")
    for i in range(40):  # the base method's coverages land in the same derived-model memo
        assert cm.with_coverage(0.5 + i / 100).draft_coverage == 0.5 + i / 100
    assert cm.with_method("ngram") is ngram
    assert len(cm._derived) <= 16


def test_coverage_copies_of_a_model_never_asked_itself_inherit_its_constants_instead_of_recomputing():
    parent = cmod.build_cost_model(draft_method="ngram")  # fresh: nothing computed on it yet
    first, second = parent.with_coverage(0.42), parent.with_coverage(0.43)
    for name in _COVERAGE_FREE_CACHED:
        assert name in first.__dict__ and name in second.__dict__, name
        assert first.__dict__[name] is second.__dict__[name] or first.__dict__[name] == second.__dict__[name]
    reference = replace(parent, draft_coverage=0.42)
    for batch, k in ((1, 1), (7.0, 3.4), (300.5, 2.2)):
        assert first.spec_step_time(batch, k) == reference.spec_step_time(batch, k)


def test_a_constant_the_parent_cannot_compute_still_fails_only_where_a_copy_uses_it():
    # No bf16 peak: flops_eff cannot be computed, but a measured profile never needs it.
    hardware = cmod.HardwareSpec("no-flops", bandwidth_bytes_per_second=1e12, flops={})
    profile = cmod.Profile(points=((1.0, 0.01), (64.0, 0.02), (512.0, 0.08)))
    ngram = cmod.build_cost_model(draft_method="ngram")
    parent = CostModel(hardware=hardware, model=ngram.model, draft=ngram.draft, profile=profile)
    copy = parent.with_coverage(0.5)
    assert "flops_eff" not in copy.__dict__
    assert copy.spec_step_time(4.0, 2) == replace(parent, draft_coverage=0.5).spec_step_time(4.0, 2)
    with pytest.raises(KeyError):
        _ = copy.flops_eff
