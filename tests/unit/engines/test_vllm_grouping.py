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
