"""RouteWindow.ingest (the usual poll's shorter way) leaves the window that ingest_plain leaves,
and answers the same, on random sequences of polls of one or two engines that grow, dip, restart
(with and without `_created`), re-lay-out their ITL histogram, lose, gain and reorder series, and
arrive out of order or at a NaN time: the same entries, totals, mirrors, bases, `_created`, held
polls and counts."""

from __future__ import annotations

import random

import pytest

from specwatch.engines.series import Counter, SeriesKey
from specwatch.windows.window import RouteWindow
from support.builders import route_snapshot
from support.counter_sequences import random_snapshots


def _state(window: RouteWindow) -> dict:
    return {
        "entries": [(e.t, list(e.totals.items()), e.snapshot) for e in window.entries],
        "times": list(window._times),
        "raw": list(window._raw.items()),
        "created": list(window._created.items()),
        "totals": list(window.totals.items()),
        "mirror": list(window.mirror.items()),
        "held": window._held,
        "counts": (window.resets, window.dips, window.last_dips, window._unordered),
    }


def _same(a, b) -> bool:
    """Equal, NaN equal to NaN (repr compares floats exactly and writes NaN as nan)."""
    return repr(a) == repr(b)


@pytest.mark.parametrize("seed", range(60))
def test_ingest_leaves_the_window_ingest_plain_leaves(seed):
    rng = random.Random(seed)
    short, plain = RouteWindow(60.0), RouteWindow(60.0)
    for snap in random_snapshots(rng, rng.randint(5, 60)):
        assert short.ingest(snap) == plain.ingest_plain(snap)
        assert _same(_state(short), _state(plain))


def test_the_usual_poll_takes_the_shorter_way():
    """A guard that the comparison above covers the shortcut: steady polls skip ingest_plain."""
    window = RouteWindow(60.0)
    calls = []
    window.ingest_plain = lambda snap: calls.append(snap) or RouteWindow.ingest_plain(window, snap)  # type: ignore[method-assign]
    key = SeriesKey(Counter.DRAFTS, "0")
    for i in range(5):
        window.ingest(route_snapshot(float(i), {key: 10.0 * i}, {SeriesKey(Counter.ITL, "0"): 1.0}, configured_k=3))
    assert len(calls) == 1  # only the first poll (no base yet) went the plain way
    assert window.totals[key] == 40.0
