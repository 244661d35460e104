"""Window semantics (Prometheus reset rule, _created resets, whole-histogram resets) and the
derived values, checked against values computed independently of specwatch."""

import itertools
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specwatch.engines.series import SeriesKey
from specwatch.windows.derive import drafts_reaching_positions, histogram_quantile, position_rates
from specwatch.windows.window import RouteWindow
from support.builders import route_snapshot
from support.counter_rule import noise, poll_increases


def prometheus_increase(values):
    """Reference: Prometheus's reset rule over consecutive samples, without extrapolation."""
    total = 0.0
    for previous, current in itertools.pairwise(values):
        total += current - previous if current >= previous else current
    return total


def test_increase_follows_the_prometheus_reset_rule_when_the_counter_drops():
    w = RouteWindow(600)
    for t, v in enumerate([10, 20, 30, 5, 15]):
        w.ingest(route_snapshot(t * 5.0, {SeriesKey("drafts", "0"): float(v)}))
    view = w.view(20.0, 600)
    assert view.increase(SeriesKey("drafts", "0")) == prometheus_increase([10, 20, 30, 5, 15]) == 35


def test_a_changed_created_timestamp_is_a_reset_even_when_the_value_did_not_drop():
    w = RouteWindow(600)
    w.ingest(route_snapshot(0, {SeriesKey("drafts", "0"): 100.0}, {SeriesKey("drafts", "0"): 1000.0}))
    w.ingest(route_snapshot(5, {SeriesKey("drafts", "0"): 110.0}, {SeriesKey("drafts", "0"): 1000.0}))
    # vLLM restarted and counted past the old value between two polls: only _created tells.
    assert w.ingest(route_snapshot(10, {SeriesKey("drafts", "0"): 150.0}, {SeriesKey("drafts", "0"): 2000.0}))
    assert w.view(10, 600).increase(SeriesKey("drafts", "0")) == 10 + 150
    assert w.resets == 1


def test_a_histogram_resets_as_a_whole_when_any_bucket_drops():
    w = RouteWindow(600)
    b = lambda le: SeriesKey("itl_bucket", "0", le)
    w.ingest(
        route_snapshot(
            0, {b(0.01): 5.0, b(math.inf): 10.0, SeriesKey("itl_count", "0"): 10.0, SeriesKey("itl_sum", "0"): 1.0}
        )
    )
    # Only the lowest bucket drops, the +Inf bucket and count rise: a restart all the same.
    w.ingest(
        route_snapshot(
            5, {b(0.01): 1.0, b(math.inf): 12.0, SeriesKey("itl_count", "0"): 12.0, SeriesKey("itl_sum", "0"): 1.5}
        )
    )
    view = w.view(5, 600)
    assert view.increase(b(0.01)) == 1.0
    assert view.increase(b(math.inf)) == 12.0
    assert view.increase(SeriesKey("itl_sum", "0")) == 1.5


def test_window_spans_the_oldest_snapshot_at_or_after_now_minus_width():
    w = RouteWindow(600)
    for t in range(0, 100, 5):
        w.ingest(route_snapshot(float(t), {SeriesKey("drafts", "0"): float(t * 2)}))
    view = w.view(95, 60)
    assert view.first.t == 35 and view.last.t == 95
    assert view.increase(SeriesKey("drafts", "0")) == 120
    assert w.view(95, 4) is None  # one snapshot: no ratio


def test_a_series_born_inside_the_window_counts_from_its_first_sighting():
    w = RouteWindow(600)
    w.ingest(route_snapshot(0, {SeriesKey("drafts", "0"): 10.0}))
    w.ingest(route_snapshot(5, {SeriesKey("drafts", "0"): 20.0, SeriesKey("drafts", "1"): 500.0}))  # engine 1 appears
    w.ingest(route_snapshot(10, {SeriesKey("drafts", "0"): 30.0, SeriesKey("drafts", "1"): 520.0}))
    view = w.view(10, 600)
    assert view.increase(SeriesKey("drafts", "1")) == 20
    assert view.increase(SeriesKey("drafts", "0")) == 20


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.booleans()), min_size=2, max_size=40))
def test_window_increase_with_random_resets_equals_the_prometheus_increase_rule(steps):
    """Without _created, the only reset signal is a drop: Prometheus's increase(), except that a drop
    within noise (0.1 %, at least one count) is a dip, not a restart (docs/architecture.md §3). A
    restart that lands within one count of the old value is then missed: it loses at most that
    poll's increase, where taking a dip for a restart would add the lifetime value."""
    w = RouteWindow(10_000)
    value, values = 0.0, []
    for i, (inc, restart) in enumerate(steps):
        value = (0.0 if restart else value) + inc
        values.append(value)
        w.ingest(route_snapshot(float(i), {SeriesKey("c", "0"): value}))
    increase = w.view(float(len(steps) - 1), 10_000).increase(SeriesKey("c", "0"))
    assert increase == sum(poll_increases(values))
    assert increase >= 0
    if all(b >= a or b < a - noise(a) for a, b in itertools.pairwise(values)):
        assert increase == prometheus_increase(values)  # no drop near the noise: exactly Prometheus's


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.booleans()), min_size=2, max_size=40))
def test_window_increase_with_created_timestamps_equals_the_true_number_of_events(steps):
    """With _created (single-process vLLM), even a restart that counts past the old value is seen."""
    w = RouteWindow(10_000)
    value, created, truth = 0.0, 1.0, 0.0
    for i, (inc, restart) in enumerate(steps):
        if restart:
            value, created = 0.0, created + 1
        value += inc
        if i > 0:
            truth += inc
        w.ingest(route_snapshot(float(i), {SeriesKey("c", "0"): value}, {SeriesKey("c", "0"): created}))
    assert w.view(float(len(steps) - 1), 10_000).increase(SeriesKey("c", "0")) == truth


def test_histogram_quantile_matches_prometheus_semantics():
    buckets = [(0.01, 0.0), (0.025, 50.0), (0.05, 90.0), (math.inf, 100.0)]
    assert histogram_quantile(0.5, buckets) == 0.025
    assert math.isclose(histogram_quantile(0.7, buckets), 0.025 + 0.025 * (20 / 40))
    assert histogram_quantile(0.99, buckets) == 0.05  # in +Inf: highest finite bound
    assert histogram_quantile(0.5, [(0.01, 10.0), (math.inf, 10.0)]) == 0.005  # lowest bucket starts at 0
    assert math.isnan(histogram_quantile(0.5, [(0.01, 0.0), (math.inf, 0.0)]))
    assert math.isnan(histogram_quantile(0.5, [(0.01, 1.0), (1.0, 2.0)]))  # no +Inf
    assert histogram_quantile(0.5, [(-1.0, 5.0), (math.inf, 10.0)]) == -1.0
    assert histogram_quantile(1.5, buckets) == math.inf and histogram_quantile(-0.1, buckets) == -math.inf


def test_histogram_quantile_agrees_with_an_independent_reimplementation_on_random_histograms():
    rng = random.Random(7)

    def reference(q, bounds, counts):
        total = counts[-1]
        rank = q * total
        for i, c in enumerate(counts):  # noqa: B007 -- i is the bucket found, read after the break
            if c >= rank:
                break
        if i == len(counts) - 1:
            return bounds[-2]
        lo = bounds[i - 1] if i > 0 else 0.0
        below = counts[i - 1] if i > 0 else 0.0
        return lo + (bounds[i] - lo) * (rank - below) / (c - below)

    bounds = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, math.inf]
    for _ in range(500):
        counts, acc = [], 0
        for _ in bounds:
            acc += rng.choice([0, 0, 1, 5, 50])
            counts.append(float(acc))
        if counts[-1] == 0:
            continue
        for q in (0.5, 0.9, 0.99):
            ours = histogram_quantile(q, list(zip(bounds, counts, strict=False)))
            assert math.isclose(ours, reference(q, bounds, counts), rel_tol=1e-12), (q, counts)


def test_the_poll_clock_never_steps_back_with_the_wall_clock(monkeypatch):
    import time as time_module

    from specwatch.sidecar.scrape import steady_clock

    wall = [1_000_000.0]
    monkeypatch.setattr(time_module, "time", lambda: wall[0])
    clock = steady_clock()
    first = clock()
    wall[0] -= 3600  # an NTP step back by an hour
    assert clock() >= first


def multiprocess_poll(t, drafts, tokens, accepted, running=4.0):
    """A poll of vLLM in multiprocess mode (no _created) configured with K=4."""
    counters = {
        SeriesKey("drafts", "0"): drafts,
        SeriesKey("draft_tokens", "0"): tokens,
        SeriesKey("accepted", "0"): accepted,
    }
    return route_snapshot(t, counters, configured_k=4, running={"0": running})


def test_a_half_applied_step_in_multiprocess_mode_is_not_taken_for_a_restart():
    """Without _created, a scrape can land between vLLM's increments of one step: drafts counted,
    its draft tokens not yet. That is one step's worth, not a restart."""
    w = RouteWindow(600)
    assert not w.ingest(multiprocess_poll(0, 1_000_000, 4_000_000, 2_000_000, running=16.0))
    # 16 drafts of the last step are in, their 64 tokens and 40 accepted are not yet.
    assert not w.ingest(multiprocess_poll(5, 1_000_016, 4_000_000, 2_000_000, running=16.0))
    assert not w.ingest(multiprocess_poll(10, 1_000_400, 4_001_600, 2_000_960, running=16.0))
    assert w.resets == 0
    assert w.view(10, 600).increase(SeriesKey("drafts", "0")) == 400


def test_a_hidden_restart_that_breaks_vllms_identities_is_still_detected_without_created():
    w = RouteWindow(600)
    w.ingest(multiprocess_poll(0, 100, 400, 100))
    # Restarted and counted past the old values: 150 drafts, 600 tokens, 500 accepted since the restart.
    assert w.ingest(multiprocess_poll(5, 150, 600, 500))
    assert w.view(5, 600).increase(SeriesKey("accepted", "0")) == 500


# ------------------------------------------------------------------------------------------
# Per-position acceptance over the drafts that reached the position
# ------------------------------------------------------------------------------------------


def _schedule_window(true_rates=(0.9, 0.8, 0.7, 0.6), drafts=1000.0):
    """Half the drafts at K=4 (batch in band [1, 4]), half at K=2 (band [5, 32]): a model-based
    drafter under num_speculative_tokens_per_batch_size [[1, 4, 4], [5, 32, 2]]."""
    long_, short = drafts / 2, drafts / 2
    accepted = [true_rates[i] * (long_ + (short if i < 2 else 0.0)) for i in range(4)]
    return accepted, drafts, long_ * 4 + short * 2


def test_positions_a_schedule_never_proposed_are_not_counted_as_rejections():
    accepted, drafts, draft_tokens = _schedule_window()
    over_all_drafts = tuple(a / drafts for a in accepted)
    # What dividing by every draft gives: half the drafts never had a position 2 or 3.
    assert over_all_drafts[2:] == pytest.approx((0.35, 0.3))
    rates = position_rates(accepted, drafts, draft_tokens, variable_length=False, schedule_ks=(4, 2))
    assert rates == pytest.approx((0.9, 0.8, 0.7, 0.6))
    reached = drafts_reaching_positions(drafts, draft_tokens, 4, variable_length=False, schedule_ks=(4, 2))
    assert reached == pytest.approx((1000, 1000, 500, 500)) and sum(reached) == draft_tokens


def test_a_lookup_drafter_without_schedule_keeps_unfilled_slots_as_misses():
    # n-gram proposing 3.4 of 4 tokens (the real vLLM run): a shorter K would not make it propose more.
    accepted, drafts, draft_tokens = (1076.0, 881.0, 700.0, 581.0), 1165.0, 3944.0
    rates = position_rates(accepted, drafts, draft_tokens, variable_length=True)
    assert rates == pytest.approx(tuple(a / drafts for a in accepted))


def test_a_model_based_drafter_shortened_by_an_unknown_schedule_leaves_unreached_positions_unknown():
    # Every draft 3 long with K=4: position 3 was never proposed, so its rate is unknown, not 0.
    rates = position_rates((900.0, 800.0, 700.0, 0.0), 1000.0, 3000.0, variable_length=False)
    assert rates == pytest.approx((0.9, 0.8, 0.7))


def test_the_advice_does_not_ratchet_k_down_after_its_own_schedule_is_applied():
    """Under an applied schedule, rates over every draft point to K=2 at batch 1 where K=4 is best;
    rates over the drafts that reached each position keep K=4."""
    from specwatch import costmodel as cmod
    from specwatch.config import DecisionConfig
    from specwatch.verdict.decide import assess
    from specwatch.windows.derive import WindowStats

    model = cmod.MODEL_PRESETS["llama-3.1-8b"]
    # Taken as exact (no calibration error): the question is which K the rates point to, not
    # whether the interval clears 1.
    cm = cmod.CostModel(
        cmod.HARDWARE_PRESETS["h100-sxm"],
        model,
        context_tokens=1024,
        draft=cmod.draft_cost_for("draft_model", model),
        calibration_log_error=0.0,
    )
    accepted, drafts, draft_tokens = _schedule_window()

    def verdict(rates):
        s = WindowStats(
            route="r",
            window="5m",
            t=0.0,
            samples=30,
            span_seconds=300.0,
            spec_present=True,
            drafts=drafts,
            draft_tokens=draft_tokens,
            accepted_tokens=sum(accepted),
            acceptance_rate=sum(accepted) / draft_tokens,
            draft_length=draft_tokens / drafts,
            configured_k=4,
            position_rates=rates,
            batch_size=1.0,
            accepted_by_position=tuple(accepted),
        )
        return assess(cm, s, DecisionConfig(min_drafts=500, margin=0.02), "draft_model", "keep")

    over_all_drafts = verdict(tuple(a / drafts for a in accepted))
    assert (over_all_drafts.candidate, over_all_drafts.recommended_draft_length) == ("shorten", 2)
    over_reached = verdict(position_rates(accepted, drafts, draft_tokens, variable_length=False, schedule_ks=(4, 2)))
    assert (over_reached.candidate, over_reached.recommended_draft_length) == ("keep", 4)
