"""The cost model's one memo (CostModel.step_times) and the search shortcuts change no number: they
give exactly (bit for bit, ==) what the plain formulas compute on a freshly built model."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from specwatch import costmodel as cmod
from specwatch.costmodel import learned
from specwatch.costmodel.breakeven import first_drop_best
from specwatch.costmodel.models import model_weight_bytes
from specwatch.costmodel.roofline import _MEMO_LIMIT, CostModel
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


SLOW_SERVER = [(1, 0.03), (3, 0.035), (7, 0.05), (12, 0.07), (30, 0.12), (60, 0.3)]


def learned_model(
    settings: dict | None = None, method: str = "ngram", *, spec_off: bool = False, scale: float = 1.0
) -> CostModel:
    """A learned curve over a prior (the default one unless ``settings``), from six spec-on windows
    of a slow server; ``spec_off``: and six windows with speculation off at the same batches, so the
    curve measures the scale of the spec costs (spec_scale) too."""
    prior = cmod.build_cost_model(**(settings or {}))
    learner = learned.StepTimeLearner(prior.with_method(method), min_points=2)
    for i, (batch, step) in enumerate(SLOW_SERVER):
        for off in (False, True) if spec_off else (False,):
            learner.add(  # spec off: as many requests as the spec-on window verifies tokens
                learned.StepObservation(
                    t=10.0 * (2 * i + 1 + off),
                    batch=batch * 3.2 if off else float(batch),
                    query_tokens=batch * 3.2,
                    step_seconds=scale * (step / 1.6 if off else step),
                    draft_length=0.0 if off else 3.4,
                    draft_coverage=0.7,
                    steps=100.0,
                    prefill_tokens=0.0,
                )
            )
    curve = learner.curve()
    assert curve is not None
    assert (curve.spec_scale is not None) == spec_off
    return learned.learned_cost_model(prior, curve)


LEARNED = {  # over dense and MoE priors, with and without a measured scale of the spec costs
    "learned": learned_model,
    "learned-mtp-spec-scale": lambda: learned_model(method="mtp", spec_off=True),
    "learned-70b-tp4": lambda: learned_model(MODELS[1], scale=0.5),
    "learned-eagle3-spec-scale": lambda: learned_model(MODELS[0], "eagle3", spec_off=True),
    "learned-draft-model": lambda: learned_model(MODELS[3], "draft_model"),
    "learned-moe": lambda: learned_model(MODELS[2], "mtp"),
    "learned-configured-cost": lambda: learned_model(MODELS[5], "eagle3", spec_off=True),
}


def builders() -> Iterator[tuple[str, Callable[[], CostModel]]]:
    for name, settings in zip(IDS, MODELS, strict=True):
        yield name, lambda settings=settings: cmod.build_cost_model(**settings)
    yield from LEARNED.items()


BUILDS = [build for _, build in builders()]


@hypothesis_settings(max_examples=150, deadline=None)
@given(
    which=st.integers(0, len(BUILDS) - 1),
    method=st.sampled_from(("eagle3", "ngram", "mtp", "draft_model")),
    questions=st.lists(
        st.tuples(
            st.one_of(st.integers(1, 1024), st.floats(0.0, 2048.0)),
            st.one_of(st.integers(0, 8), st.floats(0.0, 8.0)),
            st.one_of(st.just(1.0), st.floats(0.01, 1.0)),
        ),
        min_size=1,
        max_size=30,
    ),
)
def test_the_step_times_memo_answers_exactly_what_the_plain_step_times_compute(which, method, questions):
    long_lived, fresh = BUILDS[which]().with_method(method), BUILDS[which]().with_method(method)
    for batch, k, coverage in questions + questions[::-1]:  # every question again, from the memo
        plain = fresh.plain_step_times(batch, k, coverage)
        assert long_lived.step_times(batch, k, coverage) == plain
        assert plain == (long_lived.base_step_time(batch), long_lived.spec_step_time(batch, k, coverage))


def _same_floats(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Equal bit for bit, NaN matching NaN."""
    return all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


@hypothesis_settings(max_examples=500, deadline=None)
@given(
    which=st.integers(0, len(BUILDS) - 1),
    method=st.sampled_from(("eagle3", "ngram", "mtp", "draft_model", "medusa")),
    batch=st.one_of(st.integers(-3, 1024), st.floats(-1.0, 4096.0), st.just(math.nan)),
    k=st.one_of(st.integers(-2, 16), st.floats(-1.0, 16.0), st.just(math.nan)),
    coverage=st.one_of(st.just(1.0), st.floats(1e-6, 1.0)),
)
def test_the_fused_step_times_are_the_plain_step_times_bit_for_bit(which, method, batch, k, coverage):
    cm = BUILDS[which]().with_method(method)
    assert _same_floats(cm.fused_step_times(batch, k, coverage), cm.plain_step_times(batch, k, coverage))


@pytest.mark.parametrize("coverage", [0.0, 1.5, math.nan])
def test_the_fused_step_times_refuse_a_coverage_outside_0_1_as_the_plain_ones_do(coverage):
    cm = cmod.build_cost_model()
    for step_times in (cm.fused_step_times, cm.plain_step_times):
        with pytest.raises(cmod.CostModelError, match="draft_coverage"):
            step_times(4.0, 3, coverage)


def test_the_fused_path_covers_the_dense_roofline_and_leaves_profiles_and_moe_to_the_plain_one():
    covered = {name: build()._fused_factors is not None for name, build in builders()}
    assert covered == {
        "eagle3": True,
        "70b-tp4-ngram": True,
        "moe-mtp": False,
        "draft-model": True,
        "profile": False,
        "configured-cost": True,
        **dict.fromkeys(LEARNED, False),
    }


def test_the_memo_is_bounded_and_not_part_of_the_models_value():
    cm = cmod.build_cost_model()
    for i in range(3 * _MEMO_LIMIT):
        cm.step_times(1.0 + i, 3, 0.7)
    assert len(cm._memo) <= _MEMO_LIMIT
    assert cm == replace(cm) and not replace(cm)._memo


def test_with_method_gives_one_model_per_method():
    cm = cmod.build_cost_model(draft_method="eagle3")
    ngram = cm.with_method("ngram")
    assert cm.with_method("ngram") is ngram and cm.with_method("ngram_gpu") is ngram
    assert cm.with_method("eagle3") is cm and cm.with_method(None) is cm
    assert ngram == replace(cm, draft=cmod.draft_cost_for("ngram", cm.model))


def speedups_of_the_plain_scan(cm: CostModel, batch: float, rates: tuple[float, ...], c: float) -> Iterator[float]:
    """best_draft_length's speedups from the plain step times (lazily, per K')."""
    tau = 1.0
    for kk in range(1, len(rates) + 1):
        tau += c * float(rates[kk - 1])
        yield tau * cm.base_step_time(batch) / cm.spec_step_time(batch, kk, c)


def max_batch_by_expected_speedup(cm: CostModel, k: float, alpha: float, limit: int, c: float) -> int:
    """max_speculative_batch_size from the plain step times: the speedup per probe."""

    def pays(b: int) -> bool:
        return cm.tokens_per_step(k, alpha, c) * cm.base_step_time(b) / cm.spec_step_time(b, k, c) > 1.0

    if not pays(1):
        return 0
    lo, hi = 1, 2
    while hi <= limit and pays(hi):
        lo, hi = hi, hi * 2
    if hi > limit:
        return limit if pays(limit) else last_true(pays, lo, limit)
    return last_true(pays, lo, hi)


@pytest.mark.parametrize(("name", "build"), list(builders()), ids=[name for name, _ in builders()])
def test_best_k_and_the_largest_speculative_batch_equal_the_plain_scans_on_fresh_models(name, build):
    long_lived = build()
    rng = random.Random(11)
    for _ in range(60):
        coverage = cmod.draft_coverage(rng.choice(COVERAGES))
        method = rng.choice(("eagle3", "ngram"))
        batch = rng.choice(BATCHES)
        rates = tuple(sorted((rng.random() for _ in range(rng.randint(1, 6))), reverse=True))
        floor = rng.choice((1.0, cmod.zero_k_band_speedup(64.0)))
        k, alpha = rng.choice((1, 2, 3.38, 5)), rng.random()
        cached = long_lived.with_method(method)
        fresh = build().with_method(method)
        assert cmod.best_draft_length(cached, batch, rates, floor, coverage) == first_drop_best(
            speedups_of_the_plain_scan(fresh, batch, rates, coverage), floor
        )
        for limit in (100, cmod.MAX_BATCH_LIMIT):
            assert cmod.max_speculative_batch_size(cached, k, alpha, limit, coverage) == max_batch_by_expected_speedup(
                build().with_method(method), k, alpha, limit, coverage
            )


@pytest.mark.parametrize("settings", MODELS[:4], ids=IDS[:4])
def test_the_dense_weight_shortcut_equals_the_general_roofline(settings):
    cm = cmod.build_cost_model(**settings)
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
