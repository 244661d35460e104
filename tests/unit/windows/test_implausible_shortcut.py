"""window.implausible (the comparisons worked out once per layout of keys) gives what its plain
version, implausible_plain (key by key), gives: on random polls of one or two engines with every
identity broken or kept, values at and around the slack, NaN and infinities, gauges, and keys of
one series at the same position."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from specwatch.engines.series import Counter, Gauge, SeriesKey
from specwatch.windows import window
from specwatch.windows.window import implausible, implausible_plain
from support.builders import route_snapshot

_VALUES = st.one_of(
    st.integers(0, 60).map(float),
    st.floats(0.0, 1e6),
    st.sampled_from((math.nan, math.inf, -1.0, 1e300)),
)
_KEYS = st.one_of(
    st.builds(
        SeriesKey,
        st.sampled_from((Counter.POS, Counter.POS_DRAFTS)),
        st.sampled_from(("0", "1")),
        st.one_of(st.integers(0, 5).map(float), st.sampled_from((1.5, 2))),
    ),
    st.builds(
        SeriesKey,
        st.sampled_from((Counter.ACCEPTED, Counter.DRAFTS, Counter.DRAFT_TOKENS, Counter.GEN)),
        st.sampled_from(("0", "1")),
    ),
    st.builds(SeriesKey, st.just(Counter.ITL_BUCKET), st.just("0"), st.sampled_from((0.1, math.inf))),
)


def _snapshot(counters, running, gauges, configured_k):
    return route_snapshot(
        0.0, counters, target="llm", engines=("0", "1"), configured_k=configured_k, running=running, gauges=gauges
    )


@hypothesis_settings(max_examples=500, deadline=None)
@given(
    counters=st.dictionaries(_KEYS, _VALUES, max_size=24),
    running=st.dictionaries(st.sampled_from(("0", "1")), st.floats(0.0, 64.0), max_size=2),
    gauges=st.dictionaries(
        st.sampled_from((Gauge.DRAFT_LENGTH, Gauge.ACCEPTANCE_LENGTH, Gauge.ACCEPTANCE_RATE)),
        st.floats(0.0, 8.0),
        max_size=3,
    ),
    configured_k=st.one_of(st.none(), st.integers(1, 6)),
    stated_k=st.one_of(st.none(), st.integers(1, 6)),
)
def test_implausible_answers_what_the_key_by_key_check_answers(counters, running, gauges, configured_k, stated_k):
    snap = _snapshot(counters, running, gauges, configured_k)
    assert implausible(snap, stated_k) == implausible_plain(snap, stated_k)


def _engine(series: str, accepted_at: list[float], drafted_at: list[float], accepted: float, drafts: float):
    counters = {SeriesKey(Counter.POS, series, float(i)): v for i, v in enumerate(accepted_at)}
    counters |= {SeriesKey(Counter.POS_DRAFTS, series, float(i)): v for i, v in enumerate(drafted_at)}
    return counters | {SeriesKey(Counter.ACCEPTED, series): accepted, SeriesKey(Counter.DRAFTS, series): drafts}


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    base=st.integers(100, 10_000),
    rates=st.lists(st.floats(0.0, 1.3), min_size=1, max_size=5),
    second=st.booleans(),
    batch=st.floats(0.0, 64.0),
)
def test_implausible_answers_the_same_near_each_identitys_bound(base, rates, second, batch):
    """Realistic counters whose per-position rates may rise or pass the drafted ones by a little:
    the cases where the slack and the relative tolerance decide."""
    accepted_at = [base * r for r in rates]
    counters = _engine("0", accepted_at, [base * 1.0] * len(rates), sum(accepted_at), base)
    if second:
        counters |= _engine("1", accepted_at[::-1], [base * 0.9] * len(rates), sum(accepted_at) * 1.01, base / 2)
    snap = _snapshot(counters, {"0": batch}, {}, len(rates))
    assert implausible(snap) == implausible_plain(snap)


def test_the_layouts_remembered_stay_within_their_bounds_whatever_the_keys():
    """A target that sends new series every poll: the cache of layouts never holds more than
    IDENTITIES_CACHE_SIZE layouts or IDENTITIES_CACHE_KEYS keys, and answers stay the plain ones."""
    for poll in range(window.IDENTITIES_CACHE_SIZE * 3):
        engines = [f"e{poll}-{i}" for i in range(poll % 7 + 1)]
        counters = {}
        for engine in engines:
            counters |= _engine(engine, [50.0, 40.0 + poll % 20], [60.0, 60.0], 90.0, 60.0)
        snap = _snapshot(counters, {}, {}, 2)
        assert implausible(snap) == implausible_plain(snap)
        assert len(window._identities_cache) <= window.IDENTITIES_CACHE_SIZE
        assert sum(map(len, window._identities_cache)) <= window.IDENTITIES_CACHE_KEYS
    big = _engine("big", [1.0] * 3000, [2.0] * 3000, 10.0, 10.0)
    for copy in range(8):
        snap = _snapshot({SeriesKey(k.counter, f"{k.series}{copy}", k.sub): v for k, v in big.items()}, {}, {}, 3000)
        assert implausible(snap) == implausible_plain(snap)
        assert sum(map(len, window._identities_cache)) <= window.IDENTITIES_CACHE_KEYS
