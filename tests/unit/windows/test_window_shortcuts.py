"""RouteWindow.ingest (the usual poll's shorter way) leaves the window that ingest_plain leaves,
and answers the same, on random sequences of polls of one or two engines that grow, dip, restart
(with and without `_created`), re-lay-out their ITL histogram, lose, gain and reorder series, and
arrive out of order or at a NaN time: the same entries, totals, mirrors, bases, `_created`, held
polls and counts."""

from __future__ import annotations

import math
import random

import pytest

from specwatch.engines.series import Counter, RouteSnapshot, SeriesKey
from specwatch.windows.window import RouteWindow

LAYOUTS = ((0.01, 0.05, 0.1, math.inf), (0.01, 0.1, math.inf), (0.02, 0.05, 0.1, 1.0, math.inf))


def _random_snapshots(rng: random.Random, polls: int) -> list[RouteSnapshot]:
    engines = ("0", "1")[: rng.randint(1, 2)]
    with_created = rng.random() < 0.7
    layout = {e: rng.choice(LAYOUTS) for e in engines}
    created = dict.fromkeys(engines, 1000.0)
    value: dict[SeriesKey, float] = {}
    t = 1_000_000.0
    out = []
    for _ in range(polls):
        calm = rng.random() < 0.7  # most polls: every series grows
        t = rng.choice((t + 5.0, t + 5.0, t + 5.0, t + 2.0, t, t - 5.0, math.nan)) if rng.random() < 0.1 else t + 5.0
        counters: dict[SeriesKey, float] = {}
        for e in engines:
            if not calm and rng.random() < 0.1:
                created[e] += 7.0  # a restart
                for key in [key for key in value if key.series == e]:
                    value[key] = 0.0
            if not calm and rng.random() < 0.1:
                layout[e] = rng.choice(LAYOUTS)
            drafts = rng.randint(0, 50)
            steps = {
                SeriesKey(Counter.DRAFTS, e): drafts,
                SeriesKey(Counter.DRAFT_TOKENS, e): drafts * rng.choice((2, 3, 4)),
                SeriesKey(Counter.ACCEPTED, e): rng.randint(0, drafts * 2),
                SeriesKey(Counter.GEN, e): rng.randint(0, 300),
                SeriesKey(Counter.ITL_SUM, e): rng.random(),
                SeriesKey(Counter.ITL_COUNT, e): rng.randint(0, 300),
                SeriesKey(Counter.STEPS, e): rng.randint(0, 100),
            }
            for position in range(3):
                steps[SeriesKey(Counter.POS, e, float(position))] = rng.randint(0, drafts)
                steps[SeriesKey(Counter.POS_DRAFTS, e, float(position))] = drafts
            cumulative = 0
            for le in layout[e]:
                cumulative += rng.randint(0, 40)
                steps[SeriesKey(Counter.ITL_BUCKET, e, le)] = cumulative
            for key, step in steps.items():
                event = 1.0 if calm else rng.random()
                if event < 0.03:
                    continue  # a series missing from this poll
                if event < 0.06:
                    value[key] = 0.0  # a reset only this series shows
                elif event < 0.12:
                    step = -rng.choice((1, 0.5, 5))  # a dip (multiprocess sums read mid-update)
                value[key] = value.get(key, 0.0) + step
                counters[key] = value[key]
        if not calm and rng.random() < 0.1:
            counters = dict(rng.sample(list(counters.items()), len(counters)))  # the same series, reordered
        out.append(
            RouteSnapshot(
                t=t,
                target="vllm",
                route="r",
                model_name="m",
                schema="v1",
                spec_present=True,
                engines=engines,
                configured_k=3,
                counters=counters,
                created={SeriesKey(Counter.ITL, e): c for e, c in created.items()} if with_created else {},
                running={e: float(rng.randint(0, 16)) for e in engines},
            )
        )
    return out


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
    for snap in _random_snapshots(rng, rng.randint(5, 60)):
        assert short.ingest(snap) == plain.ingest_plain(snap)
        assert _same(_state(short), _state(plain))


def test_the_usual_poll_takes_the_shorter_way():
    """A guard that the comparison above covers the shortcut: steady polls skip ingest_plain."""
    window = RouteWindow(60.0)
    calls = []
    window.ingest_plain = lambda snap: calls.append(snap) or RouteWindow.ingest_plain(window, snap)  # type: ignore[method-assign]
    key = SeriesKey(Counter.DRAFTS, "0")
    for i in range(5):
        window.ingest(
            RouteSnapshot(
                t=float(i),
                target="vllm",
                route="r",
                model_name="m",
                schema="v1",
                spec_present=True,
                engines=("0",),
                configured_k=3,
                counters={key: 10.0 * i},
                created={SeriesKey(Counter.ITL, "0"): 1.0},
            )
        )
    assert len(calls) == 1  # only the first poll (no base yet) went the plain way
    assert window.totals[key] == 40.0
