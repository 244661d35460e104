"""windows/gauges.py: a gauge-only engine's window values are its readings' mean over the polls that
followed activity, and never a reading an idle interval left behind."""

import math

import pytest

from specwatch.engines.series import Counter, Gauge, RouteSnapshot, SeriesKey
from specwatch.windows.derive import GAUGE_MEAN, window_stats
from specwatch.windows.gauges import BATCH, gauge_means
from specwatch.windows.window import RouteWindow
from support.builders import route_snapshot

DRAFTS = SeriesKey(Counter.DRAFTS, "0")


def snap(t, drafts, rate=None, length=None, steps=None, running=None):
    gauges = {
        name: value
        for name, value in (
            (Gauge.ACCEPTANCE_RATE, rate),
            (Gauge.ACCEPTANCE_LENGTH, length),
            (Gauge.DRAFT_LENGTH, steps),
        )
        if value is not None
    }
    return route_snapshot(
        t,
        {DRAFTS: drafts},
        schema="sglang",
        target="t",
        running={} if running is None else {"0": running},
        gauges=gauges,
        gauge_acceptance=True,
        engine="sglang",
    )


def view(*snaps, width=60.0):
    window = RouteWindow(width)
    for s in snaps:
        window.ingest(s)
    return window.view(snaps[-1].t, width)


def test_readings_after_idle_intervals_are_left_out():
    v = view(
        snap(0, 0, rate=0.5, running=4),  # closes the interval before the window: not read
        snap(5, 100, rate=0.6, running=8),
        snap(10, 200, rate=0.7, running=8),
        snap(15, 200, rate=0.7, running=8),  # nothing moved, the gauge repeats: idle
        snap(20, 200, rate=0.7, running=8),
    )
    means = gauge_means(v)
    assert means[Gauge.ACCEPTANCE_RATE] == pytest.approx(0.65)
    assert means[BATCH] == 8.0


def test_a_gauge_set_anew_counts_even_while_no_counter_moved():
    # Long requests: none finished (the counter is counted at the finish), but the engine logged.
    means = gauge_means(view(snap(0, 50, rate=0.5), snap(5, 50, rate=0.6), snap(10, 50, rate=0.8)))
    assert means[Gauge.ACCEPTANCE_RATE] == pytest.approx(0.7)


def test_a_wholly_idle_window_has_no_value():
    assert gauge_means(view(snap(0, 300, rate=0.7, running=8), snap(5, 300, rate=0.7, running=8))) == {}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (Gauge.ACCEPTANCE_RATE, 1.7),
        (Gauge.ACCEPTANCE_RATE, -0.1),
        (Gauge.ACCEPTANCE_LENGTH, 0.0),  # SGLang's unset value
        (Gauge.DRAFT_LENGTH, 0.0),
        (Gauge.DRAFT_LENGTH, math.inf),
    ],
)
def test_implausible_readings_are_skipped(name, value):
    first = snap(0, 0)
    hostile = snap(5, 100)
    hostile = RouteSnapshot(**{**hostile.__dict__, "gauges": {name: value}})
    assert name not in gauge_means(view(first, hostile))


def test_window_stats_of_a_gauge_engine_hold_no_token_counts_and_say_what_they_are():
    stats = window_stats(
        view(snap(0, 0, 0.5, 2.5, 3, 4), snap(5, 120, 0.6, 2.8, 3, 8), snap(10, 260, 0.8, 3.4, 3, 12)), "r", "1m", 10
    )
    assert stats.acceptance_basis == GAUGE_MEAN
    assert (stats.acceptance_rate, stats.mean_acceptance_length, stats.draft_length) == pytest.approx((0.7, 3.1, 3.0))
    assert stats.drafts == 260.0
    assert stats.batch_size == 10.0
    assert stats.draft_tokens is None and stats.accepted_tokens is None
    assert stats.position_rates is None and stats.accepted_by_position is None


def test_drafts_without_draft_tokens_read_through_the_counter_path_give_no_tau_or_k():
    # A gauge-only engine's snapshot that lost its gauge_acceptance mark (a source that does not
    # know the engine): its verify calls alone must not make tau 1 and K 0.
    a, b = snap(0, 0), snap(5, 400)
    plain = [RouteSnapshot(**{**s.__dict__, "gauge_acceptance": False, "gauges": {}}) for s in (a, b)]
    stats = window_stats(view(*plain), "r", "1m", 5)
    assert stats.drafts == 400.0
    assert (stats.acceptance_rate, stats.mean_acceptance_length, stats.draft_length) == (None, None, None)
