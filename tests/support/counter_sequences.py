"""Random sequences of one route's polls, for the tests that hold a shortcut of the window and
derive stages to its plain version: the counters of one or two engines grow, dip, restart (with
and without `_created`), re-lay-out their ITL histogram, lose, gain and reorder series, and
arrive out of order or at a NaN time."""

from __future__ import annotations

import math
import random

from specwatch.engines.series import Counter, RouteSnapshot, SeriesKey
from support.builders import route_snapshot

#: ITL bucket layouts a histogram moves between.
LAYOUTS = (
    (0.01, 0.05, 0.1, math.inf),
    (0.01, 0.1, math.inf),
    (0.02, 0.05, 0.1, 1.0, math.inf),
)


def random_snapshots(rng: random.Random, polls: int, *, drafted_by_position: bool = True) -> list[RouteSnapshot]:
    """`polls` polls of route "r", most calm (every series grows), some rough; with the draft
    tokens proposed at each position (POS_DRAFTS) unless `drafted_by_position` is False (a
    reference that predates them)."""
    engines = ("0", "1")[: rng.randint(1, 2)]
    with_created = rng.random() < 0.6
    k = rng.choice((None, 2, 3, 4))
    spec = rng.random() < 0.9
    layout = {e: rng.choice(LAYOUTS) for e in engines}
    created = dict.fromkeys(engines, 1000.0)
    value: dict[SeriesKey, float] = {}
    t = 1_000_000.0
    out = []
    for _ in range(polls):
        calm = rng.random() < 0.7
        t = rng.choice((t + 5.0, t + 2.0, t + 40.0, t, t - 5.0, math.nan)) if rng.random() < 0.1 else t + 5.0
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
                if drafted_by_position:
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
            route_snapshot(
                t,
                counters,
                {SeriesKey(Counter.ITL, e): c for e, c in created.items()} if with_created else {},
                spec_present=spec,
                engines=engines,
                configured_k=k,
                running={e: float(rng.randint(0, 16)) for e in engines} if rng.random() < 0.8 else {},
            )
        )
    return out
