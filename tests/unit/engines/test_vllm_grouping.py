"""Grouping remembers where each series goes between polls (and the whole plan of a poll with the
last poll's layout): a long-lived Grouping must give exactly the snapshots a fresh one gives, poll
after poll, with and without route matchers."""

from __future__ import annotations

import random

import pytest

from specwatch.engines import grouping as grouping_module
from specwatch.engines import registry
from specwatch.engines.grouping import Grouping
from specwatch.engines.series import RouteMatcher
from specwatch.exposition import Selector
from support.paths import FIXTURES
from support.vllm_payloads import FakeVllm


def _payloads() -> list[str]:
    texts = [p.read_text() for d in ("vllm-cpu-real", "vllm-0.32-cpu") for p in sorted((FIXTURES / d).glob("*.prom"))]
    for schema in ("v1", "v1-legacy-itl", "nospec"):
        fake = FakeVllm(model_name="a", engines=2, schema=schema)
        for engine in (0, 1, 0):
            fake.step(engine, 8, [0, 2, 4], 0.02)
            texts.append(fake.text())
    return texts


MATCHER_SETS = {
    "one route per model_name": (),
    "matchers": (
        RouteMatcher("all", {}),
        RouteMatcher("engine0", {"engine": "0"}),
        RouteMatcher("named", {"model_name": "a"}),
    ),
}


@pytest.mark.parametrize("matchers", list(MATCHER_SETS.values()), ids=list(MATCHER_SETS))
def test_a_remembered_grouping_gives_the_snapshots_of_a_fresh_one(matchers):
    texts = _payloads()
    order = texts + random.Random(7).sample(texts, len(texts)) + texts
    grouping = Grouping(matchers, "t/")
    planned = 0
    for i, text in enumerate(order):
        remembered = grouping.parse(text, t=float(i), target="t")
        planned += grouping.selector.shape is not None  # the whole plan of the last poll reused
        fresh = grouping_module.snapshots(
            Selector(registry.FAMILIES).parse(text), t=float(i), target="t", matchers=matchers, route_prefix="t/"
        )
        assert remembered == fresh
        assert [s.route for s in remembered] == [s.route for s in fresh]  # the same routes in the same order
        assert [list(s.counters) for s in remembered] == [list(s.counters) for s in fresh]
    assert planned > len(order) // 2


def test_the_remembered_placements_stay_bounded(monkeypatch):
    monkeypatch.setattr(grouping_module, "PLACEMENT_CACHE_SIZE", 5)
    grouping = Grouping()
    for i, text in enumerate(_payloads()[:4]):
        families = grouping_module.SELECTOR.parse(text)
        assert grouping.snapshots(families, t=float(i), target="t") == grouping_module.snapshots(
            families, t=float(i), target="t"
        )
        assert len(grouping._placements) <= 5


@pytest.mark.parametrize("duplicates", [False, True])
def test_a_routes_counters_read_in_one_pass_equal_them_summed_key_by_key(duplicates):
    """grouping.counter_reader, the shortcut a route's plan reads its counters with, against
    summed_counters, the key-by-key reference: the same keys in the same order and the same floats,
    bit for bit (a -0.0 made 0.0, NaN and infinities kept), with and without keys read twice."""
    from specwatch.engines.grouping import counter_reader, summed_counters
    from specwatch.engines.series import Counter, SeriesKey

    rnd = random.Random(3)
    specials = [0.0, -0.0, float("nan"), float("inf"), 1e308, 5e-324, 3.0]
    for _ in range(200):
        keys = [SeriesKey(Counter.ITL_BUCKET, str(rnd.randrange(3)), float(i)) for i in range(rnd.randrange(1, 12))]
        if duplicates:
            keys += rnd.choices(keys, k=rnd.randrange(1, 4))
        values = [rnd.choice(specials) if rnd.random() < 0.3 else rnd.uniform(0, 1e6) for _ in range(40)]
        pairs = [(key, rnd.randrange(len(values))) for key in keys]
        rnd.shuffle(pairs)
        fast, plain = counter_reader(pairs)(values), summed_counters(pairs, values)
        assert list(fast) == list(plain)
        assert [repr(v) for v in fast.values()] == [repr(v) for v in plain.values()]
