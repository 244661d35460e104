"""Two fleet shards (prometheus.shard) over one Prometheus: every route is evaluated by exactly one
shard, and a shard's routes get the verdicts an unsharded instance gives them whether or not the
other shard runs (SpecwatchFleetShardDown's promtool test covers the alert of the stopped one)."""

from __future__ import annotations

import json

import pytest

from specwatch.fleet.backtest import Backtest

from .conftest import POLL, backfilled_config
from .promharness import PROMETHEUS, PROMTOOL

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="prometheus/promtool not installed"),
]


def _lines(url: str, start: float, end: float, shard: dict[str, int] | None) -> dict[tuple, dict]:
    prometheus: dict[str, object] = {"url": url, "selector": '{job="vllm"}', "scrape_interval": f"{POLL:g}s"}
    if shard is not None:
        prometheus["shard"] = shard
    config = backfilled_config(prometheus)
    return {
        (line["replica"]["instance"], line["route"], line["window"], round(line["t"], 3)): line
        for line in Backtest(config).run(start, end, POLL)
        if line.get("replica")
    }


def test_two_shards_evaluate_every_route_exactly_once_and_each_alone_keeps_its_verdicts(backfilled) -> None:
    prometheus, recordings = backfilled
    times = [json.loads(line)["t"] for path in recordings.values() for line in path.read_text().splitlines()]
    start, end = min(times), max(times)
    whole = _lines(prometheus.url, start, end, None)
    shards = [_lines(prometheus.url, start, end, {"index": i, "total": 2}) for i in range(2)]
    routes = [{key[1] for key in shard} for shard in shards]
    assert all(routes), routes  # both shards have routes of their own
    assert not routes[0] & routes[1]  # no route in both
    assert routes[0] | routes[1] == {key[1] for key in whole}
    for shard in shards:  # each shard run on its own: the other "stopped"
        assert set(shard) == {key for key in whole if key[1] in {k[1] for k in shard}}
        for key, line in shard.items():
            assert line["verdict"] == whole[key]["verdict"], key
            assert line["expected_speedup"] == whole[key]["expected_speedup"], key
