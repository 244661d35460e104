"""The evaluation caches change no number: memoised cost models and the assessment memo give
exactly (bit for bit) what a freshly built cost model computes, on a grid and on replays."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from specwatch import costmodel as cmod
from specwatch import sim
from specwatch.config import DecisionConfig, from_mapping
from specwatch.config.cost_model import cost_model_from_config, route_cost_model
from specwatch.costmodel import learned
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import replay
from specwatch.verdict import decide
from specwatch.verdict.memo import ASSESS_INPUTS, AssessmentCache
from specwatch.windows.derive import WindowStats
from support.builders import scenario_config, window_stats

REAL_RECORDING = Path(__file__).parents[2] / "fixtures" / "vllm-0.32-cpu" / "ngram-recording.jsonl"
DECISION = DecisionConfig(min_drafts=500, margin=0.02, hold=2)
PROFILE = cmod.parse_profile({"context_tokens": 1024, "points": [[1, 0.007], [64, 0.0079], [512, 0.02]]})
MODELS = [  # dense and MoE targets, one and four GPUs, every draft cost class, roofline and profile
    {"hardware": "h100-sxm", "model": "llama-3.1-8b", "draft_method": "eagle3"},
    {"hardware": "h100-sxm", "model": "llama-3.1-70b", "tensor_parallel": 4, "draft_method": "ngram"},
    {"hardware": "a100-80gb", "model": "qwen3-30b-a3b", "draft_method": "mtp"},
    {"hardware": "h100-sxm", "model": "llama-3.1-8b", "draft_method": "draft_model"},
    {"hardware": "h100-sxm", "model": "llama-3.1-8b", "draft_method": "eagle3", "profile": PROFILE},
]


def cost_model_questions(
    cm: cmod.CostModel, batch: float, k: float, alpha: float, rates: tuple[float, ...], c: float
) -> tuple[object, ...]:
    return (
        cm.base_step_time(batch),
        cm.spec_step_time(batch, k, c),
        cmod.breakeven_acceptance_rate(cm, batch, k, c),
        cmod.expected_speedup(cm, batch, k, alpha, c),
        cmod.best_draft_length(cm, batch, rates, coverage=c),
        cmod.max_speculative_batch_size(cm, k, alpha, coverage=c),
        cmod.recommend_schedule(cm, rates, 512, coverage=c),
    )


@pytest.mark.parametrize(
    "settings",
    MODELS,
    ids=lambda s: "-".join(str(v) for v in s.values() if v is not PROFILE) + ("-profile" if "profile" in s else ""),
)
def test_a_long_lived_cost_model_answers_like_a_fresh_one_on_a_grid(settings):
    long_lived = cmod.build_cost_model(**settings)
    grid = list(
        itertools.product(
            (None, 0.71, 1.0), ("eagle3", "ngram"), (1, 2.5, 16, 63.7, 300), (1, 3, 3.38), (0.2, 0.6, 0.9)
        )
    )
    random.Random(7).shuffle(grid)  # memo hits in every order, and twice
    for coverage, method, batch, k, alpha in grid + grid:
        rates, c = cmod.position_rates_from_alpha(alpha, 4), cmod.draft_coverage(coverage)
        fresh = cmod.build_cost_model(**settings).with_method(method)
        cached = long_lived.with_method(method)
        assert cost_model_questions(cached, batch, k, alpha, rates, c) == cost_model_questions(
            fresh, batch, k, alpha, rates, c
        ), (coverage, method, batch, k, alpha)


class CheckedCache(AssessmentCache):
    """The pipeline's memo, with every answer compared to decide.assess on a freshly built model."""

    def __init__(self, fresh_model, size: int = 2048) -> None:
        super().__init__(size)
        self.fresh_model = fresh_model
        self.compared = 0

    def assess(self, cm, stats, decision, method, previous_verdict, *, config_method="same", base_config=None):
        got = super().assess(
            cm, stats, decision, method, previous_verdict, config_method=config_method, base_config=base_config
        )
        fresh = self.fresh_model(stats)
        if cm.profile is not None and fresh.profile is None:
            # Learning is on (hardware and model not configured): the route's model is the
            # configured one over the curve learned so far; build that afresh too.
            fresh = learned.learned_cost_model(fresh, cm.profile)
        assert got == decide.assess(
            fresh, stats, decision, method, previous_verdict, config_method=config_method, base_config=base_config
        )
        self.compared += 1
        return got


def replay_both_ways(config, lines: list[str]) -> tuple[list[dict], list[dict], CheckedCache]:
    checked = Pipeline(config)
    cache = CheckedCache(
        lambda stats: route_cost_model(cost_model_from_config(config), config, stats.engine, stats.schema)
    )
    checked.assessments = cache
    uncached = Pipeline(config)
    uncached.assessments = AssessmentCache(size=0)  # keeps nothing: every window assessed afresh
    return list(replay(config, lines, pipeline=checked)), list(replay(config, lines, pipeline=uncached)), cache


def test_replaying_the_real_vllm_recording_gives_the_same_verdicts_and_numbers_with_and_without_the_memo():
    lines = REAL_RECORDING.read_text().splitlines()
    config = from_mapping({"poll_interval": "10s", "windows": ["1m", "5m"], "decision": {"min_drafts": 50}})
    cached, uncached, cache = replay_both_ways(config, lines)
    assert cached == uncached
    assert cache.hits > 0 and cache.compared == cache.hits + cache.misses
    assert any(r["breakeven_acceptance_rate"] is not None for r in cached)  # equal empty records prove nothing
    # Nothing configured and only spec-on minutes: the interval spans 1, the verdict is undecided.
    assert {r["verdict"] for r in cached} >= {"undecided"}


@pytest.mark.parametrize("scenario", ["alpha-drop", "mixed-routes"])
def test_replaying_simulated_verdict_changes_gives_the_same_records_with_and_without_the_memo(scenario, tmp_path):
    path = tmp_path / "rec.jsonl"
    sim.record(scenario, path, poll_interval=10.0)
    config = scenario_config(scenario, poll_interval=10.0)
    cached, uncached, cache = replay_both_ways(config, path.read_text().splitlines())
    assert cached == uncached
    assert cache.compared > 0
    if scenario == "alpha-drop":  # the replay moves: keep -> undecided -> disable
        assert {"keep", "undecided", "disable"} <= {r["verdict"] for r in cached}


def window(**changes) -> WindowStats:
    """A window with every field set, so a changed field shows in the memo's key."""
    return window_stats(
        batch=48.0,
        itl_p50_seconds=0.01,
        itl_p99_seconds=0.03,
        itl_per_token_mean_seconds=0.012,
        generation_tokens=9000.0,
        draft_coverage=0.9,
        **changes,
    )


def other_value(value: object) -> object:
    if isinstance(value, str):
        return value + "-other"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, float):
        return value * 3.0 + 1.0
    if value is None:
        return 0.5
    raise AssertionError(f"no other value for {value!r}")


WINDOW_STATS = [f.name for f in dataclasses.fields(WindowStats)]


def test_the_memo_key_names_only_window_stats():
    assert set(ASSESS_INPUTS) <= set(WINDOW_STATS)


@pytest.mark.parametrize("name", [name for name in WINDOW_STATS if name not in ASSESS_INPUTS])
def test_assess_reads_no_window_stat_outside_the_memo_key(name):
    cm = cmod.build_cost_model(hardware="h100-sxm", model="llama-3.1-8b")
    base = window()
    expected = decide.assess(cm, base, DECISION, "eagle3", "keep")
    assert expected.breakeven_acceptance_rate is not None
    changed = dataclasses.replace(base, **{name: other_value(getattr(base, name))})
    assert decide.assess(cm, changed, DECISION, "eagle3", "keep") == expected


def test_every_memo_key_field_can_change_the_assessment():
    cm = cmod.build_cost_model(hardware="h100-sxm", model="llama-3.1-8b")
    cache = AssessmentCache()
    first = cache.assess(cm, window(), DECISION, "eagle3", "keep")
    assert cache.assess(cm, window(t=500.0, window="5m", samples=61), DECISION, "eagle3", "keep") is first
    assert cache.hits == 1
    assert cache.assess(cm, window(batch_size=200.0), DECISION, "eagle3", "keep") != first
    assert cache.assess(cm, window(), DECISION, "eagle3", "disable") is not first
    assert cache.misses == 3


def test_the_memo_keeps_its_size_and_starts_afresh_with_a_new_cost_model():
    cm = cmod.build_cost_model(hardware="h100-sxm", model="llama-3.1-8b")
    cache = AssessmentCache(size=3)
    for batch in (8.0, 16.0, 32.0, 64.0):
        cache.assess(cm, window(batch_size=batch), DECISION, "eagle3", "keep")
    assert len(cache) == 3
    reloaded = cmod.build_cost_model(hardware="h100-sxm", model="llama-3.1-70b")
    again = cache.assess(reloaded, window(batch_size=64.0), DECISION, "eagle3", "keep")
    assert len(cache) == 1
    assert again == decide.assess(reloaded, window(batch_size=64.0), DECISION, "eagle3", "keep")


def schedule_with_per_batch_loops(
    cm: cmod.CostModel,
    rates: tuple[float, ...],
    max_batch: int,
    live_batch: float | None,
    zero_band_speedup: float | Callable[[float], float],
) -> list[list[int]]:
    """The previous construction: the same bisection filling a K per batch, then loops over every batch."""
    cache: dict[int, int] = {}

    def floor(b: float) -> float:
        return zero_band_speedup(b) if callable(zero_band_speedup) else zero_band_speedup

    def best(b: int) -> int:
        if b not in cache:
            cache[b] = cmod.best_draft_length(cm, b, rates, floor=floor(b))
        return cache[b]

    anchor = min(max(round(live_batch or 1), 1), max_batch)
    if live_batch is not None:
        live = max(float(live_batch), 1.0)
        cache[anchor] = cmod.best_draft_length(cm, live, rates, floor=floor(live))
    ks = [0] * (max_batch + 1)

    def fill(lo: int, hi: int) -> None:
        k_lo, k_hi = best(lo), best(hi)
        if k_lo == k_hi or hi - lo <= 1:
            for b in range(lo, hi + 1):
                ks[b] = k_lo if b < hi else k_hi
            return
        fill(lo, (lo + hi) // 2)
        fill((lo + hi) // 2, hi)

    if anchor > 1:
        fill(1, anchor)
    fill(anchor, max_batch)
    cap = len(rates)
    for b in range(anchor, max_batch + 1):
        ks[b] = cap = min(ks[b], cap)
    for b in range(anchor - 1, 0, -1):
        ks[b] = max(min(ks[b], len(rates)), ks[b + 1])
    bands: list[list[int]] = []
    for b in range(1, max_batch + 1):
        if bands and bands[-1][2] == ks[b]:
            bands[-1][1] = b
        else:
            bands.append([b, b, ks[b]])
    return bands


@pytest.mark.parametrize("settings", MODELS, ids=lambda s: f"{s['model']}-{s['draft_method']}-{'profile' in s}")
def test_schedule_bands_built_from_settled_ranges_equal_the_per_batch_construction(settings):
    cm = cmod.build_cost_model(**settings)
    for rates in ((0.9, 0.7, 0.5, 0.3), (0.6, 0.35, 0.2), (0.45, 0.2), (0.99, 0.97, 0.95, 0.9, 0.8)):
        for max_batch, live_batch, zero in itertools.product(
            (1, 7, 512), (None, 1.0, 5.5, 300.0, 900.0), (1.0, cmod.zero_k_band_speedup)
        ):
            assert cmod.recommend_schedule(
                cm, rates, max_batch, live_batch=live_batch, zero_band_speedup=zero
            ) == schedule_with_per_batch_loops(cm, rates, max_batch, live_batch, zero)


def test_the_stated_speculative_config_is_part_of_the_memo_key():
    cm = cmod.build_cost_model(hardware="h100-sxm", model="llama-3.1-8b")
    cache = AssessmentCache()
    stats = window(batch_size=300.0, acceptance_rate=0.3, position_rates=(0.5, 0.25, 0.15))
    for stated in ({"method": "eagle3", "model": "a/b"}, {"method": "eagle3", "model": "c/d"}, None):
        assert cache.assess(cm, stats, DECISION, "eagle3", "keep", base_config=stated) == decide.assess(
            cm, stats, DECISION, "eagle3", "keep", base_config=stated
        )
    assert cache.misses == 3
    assert cache.assess(
        cm, stats, DECISION, "eagle3", "keep", base_config={"model": "c/d", "method": "eagle3"}
    ) == decide.assess(cm, stats, DECISION, "eagle3", "keep", base_config={"method": "eagle3", "model": "c/d"})
    assert cache.hits == 1
