"""A poll is one unit: when any counter of an engine dips in a poll without a restart (the
same `_created`), that engine's whole poll is held back, so no window pairs its draft tokens of one
moment with its accepted tokens of another; the next poll counts the whole interval. An engine that
really went backwards (a data-parallel engine's sum) counts on from where it went, losing one poll
of its traffic rather than everything up to its old high-water mark."""

from __future__ import annotations

import pytest

from specwatch.engines.series import Counter, SeriesKey
from specwatch.windows.window import RouteWindow
from support.builders import route_snapshot

POLL = 5.0


def keys(engine: str) -> tuple[SeriesKey, SeriesKey, SeriesKey]:
    return (
        SeriesKey(Counter.DRAFTS, engine),
        SeriesKey(Counter.DRAFT_TOKENS, engine),
        SeriesKey(Counter.ACCEPTED, engine),
    )


def values(n: int, engine: str = "0", offset: float = 0.0) -> dict[SeriesKey, float]:
    """Poll n of an engine drafting K=3 at alpha 0.5: 100 drafts, 300 tokens, 150 accepted a poll."""
    drafts, tokens, accepted = keys(engine)
    return {
        drafts: 1000 + 100.0 * n - offset,
        tokens: 3000 + 300.0 * n - 3 * offset,
        accepted: 1500 + 150.0 * n - 1.5 * offset,
    }


CREATED = {k: 1.0 for e in ("0", "1") for k in keys(e)}


def alpha(window: RouteWindow, now: float, width: float, engine: str = "0") -> float:
    increases = window.view(now, width).increases()
    _, tokens, accepted = keys(engine)
    return increases[accepted] / increases[tokens]


def feed(window: RouteWindow, polls: list[dict[SeriesKey, float]]) -> None:
    for n, counters in enumerate(polls):
        window.ingest(route_snapshot(n * POLL, counters, CREATED))


def test_one_counter_dipping_one_count_holds_back_the_engines_whole_poll():
    window = RouteWindow(600)
    polls = [values(n) | values(n, "1") for n in range(6)]
    dipped = dict(polls[4])
    dipped[keys("0")[2]] = polls[3][keys("0")[2]] - 1  # accepted reads one below its last value
    polls[4] = dipped
    feed(window, polls)
    # The 15 s window ending at the dip: engine 0 as of its last consistent poll, alpha exact.
    assert alpha(window, 4 * POLL, 15.0) == pytest.approx(0.5)
    increases = window.view(4 * POLL, 15.0).increases()
    assert increases[keys("0")[1]] == 600.0, "its draft tokens wait with its accepted tokens"
    assert increases[keys("1")[1]] == 900.0, "the other engine's poll is not held"
    # The next poll counts the whole interval: nothing lost, nothing twice.
    assert alpha(window, 5 * POLL, 15.0) == pytest.approx(0.5)
    assert window.view(5 * POLL, 600).increases()[keys("0")[1]] == 1500.0
    assert (window.resets, window.dips) == (0, 1)


def test_a_data_parallel_engine_going_backwards_loses_one_poll_not_its_traffic_until_it_catches_up():
    window = RouteWindow(600)
    # From poll 5 engine 0's sums read 45 s (9 polls) of traffic lower, and go on from there.
    polls = [values(n) if n < 5 else values(n, offset=900.0) for n in range(20)]
    feed(window, polls)
    drafts = window.view(19 * POLL, 600).increases()[keys("0")[0]]
    # 19 polls of 100 drafts; the poll it went backwards in is the one lost (not 9 + 1).
    assert drafts == 100.0 * 18
    assert alpha(window, 19 * POLL, 30.0) == pytest.approx(0.5)
    mirror = window.mirror[(Counter.DRAFTS, None)]
    assert mirror == drafts, "the exported counter never goes down and counts what the window counts"
