"""The history read starts where the fleet's data does: its cost follows the history Prometheus
holds, not the lookback, so a fleet mode started beside a young Prometheus (or a loaded one, seconds
a query) polls live within a few queries instead of after its whole deadline, and sees a rollout
that happens meanwhile. Against a fake query client: the clock is the read's `now`, nothing is timed."""

from __future__ import annotations

from specwatch.config import from_mapping
from specwatch.fleet.client import RangeAnswer, Series
from specwatch.fleet.evaluator import FleetEvaluator
from specwatch.fleet.history import CHUNK_STEPS, PROBE_STEP, first_data, history_grid, read_history

NOW = 1_000_000_020.0  # on no step's round number: the grid is now - k·step


class YoungPrometheus:
    """Holds one replica from `since` on; answers the freshness query from it and the window queries
    with nothing (the evaluator then skips every step: only the queries are looked at)."""

    def __init__(self, config: object, freshness: str, since: float | None):
        self.config, self.freshness, self.since = config, freshness, since
        self.ranges: list[tuple[float, float, float]] = []

    def query_range(self, expr: str, start: float, end: float, step: float) -> RangeAnswer:
        self.ranges.append((start, end, step))
        points: list[tuple[float, float]] = []
        if expr == self.freshness and self.since is not None:
            t = start
            while t <= end + 1e-9:
                if t >= self.since:
                    points.append((t, t))
                t += step
        series = (Series({"instance": "a:8000"}, tuple(points)),) if points else ()
        return RangeAnswer(series, 0.0, 0)


def _evaluator(lookback: str) -> FleetEvaluator:
    config = from_mapping(
        {
            "listen": "127.0.0.1:0",
            "windows": ["10s", "30s"],
            "prometheus": {"url": "http://prometheus:9090", "history_lookback": lookback, "recorded": False},
        },
        environ={},
    )
    return FleetEvaluator(config)


def test_a_twelve_hour_lookback_over_five_minutes_of_data_reads_one_chunk_after_one_probe():
    evaluator = _evaluator("12h")
    assert evaluator.config.prometheus is not None
    prometheus = YoungPrometheus(evaluator.config.prometheus, evaluator.queries.freshness, since=NOW - 300.0)
    read = read_history(evaluator, NOW, client=prometheus)  # type: ignore[arg-type]
    assert read.error is None
    probe, *chunks = prometheus.ranges
    origin, steps = history_grid(NOW, 12 * 3600.0, 10.0)
    assert probe[0] == origin and probe[2] == PROBE_STEP, "the probe spans the whole lookback"
    assert NOW - 10.0 <= probe[1] < NOW - 10.0 + PROBE_STEP, "... to its newest step"
    assert len(chunks) == 3, f"one chunk (its two windows and the freshness query), not {3 * steps // CHUNK_STEPS}"
    start, end, step = chunks[0]
    assert step == 10.0 and end == NOW - 10.0
    assert NOW - 300.0 - PROBE_STEP - step < start <= NOW - 300.0, "from one probe step before the first data"
    assert (NOW - start) % step == 0, "on the read's grid"


def test_the_chunks_before_the_first_data_are_not_queried_whatever_the_lookback():
    asked = []
    for lookback in ("1h", "12h"):
        evaluator = _evaluator(lookback)
        prometheus = YoungPrometheus(evaluator.config.prometheus, evaluator.queries.freshness, since=NOW - 2 * 3600)
        read_history(evaluator, NOW, client=prometheus)  # type: ignore[arg-type]
        asked.append(len(prometheus.ranges))
    hour = 1 + 3 * -(-360 // CHUNK_STEPS)  # the probe, then 1 h of 10 s steps in chunks
    assert asked == [hour, 1 + 3 * -(-(720 + 6) // CHUNK_STEPS)], "12h costs the 2 h of data (and a step), not 12 h"


def test_a_lookback_with_no_replica_costs_the_probe_alone_and_is_no_error():
    evaluator = _evaluator("12h")
    prometheus = YoungPrometheus(evaluator.config.prometheus, evaluator.queries.freshness, since=None)
    read = read_history(evaluator, NOW, client=prometheus)  # type: ignore[arg-type]
    assert (read.steps, read.queries, read.error) == (0, 1, None)


def test_the_first_data_step_is_on_the_grid_and_never_before_the_origin():
    evaluator = _evaluator("1h")
    prometheus = YoungPrometheus(evaluator.config.prometheus, evaluator.queries.freshness, since=0.0)
    assert first_data(prometheus, evaluator.queries.freshness, NOW - 3600.0, NOW - 10.0, 10.0) == NOW - 3600.0
    prometheus.since = NOW - 95.0
    begins = first_data(prometheus, evaluator.queries.freshness, NOW - 3600.0, NOW - 10.0, 10.0)
    assert begins is not None and (NOW - begins) % 10.0 == 0 and NOW - 95.0 - PROBE_STEP - 10.0 < begins <= NOW - 95.0


def test_a_replica_that_appeared_after_the_probes_last_step_before_the_end_is_read():
    evaluator = _evaluator("1h")
    prometheus = YoungPrometheus(evaluator.config.prometheus, evaluator.queries.freshness, since=NOW - 30.0)
    begins = first_data(prometheus, evaluator.queries.freshness, NOW - 3600.0, NOW - 10.0, 10.0)
    assert begins is not None and NOW - 30.0 - PROBE_STEP - 10.0 < begins <= NOW - 30.0
