"""Live fleet mode's start: the history before it, replayed through the evaluator.

A fleet mode that starts (a new pod, or a reload that builds a new FleetEvaluator) would otherwise
learn only from what it sees after its start, although the hours before are in Prometheus: a fleet
that ran spec-off yesterday and spec-on since this morning would have no measured baseline. So the
steps over ``prometheus.history_lookback`` before the first live poll are evaluated first, exactly
as `specwatch backtest --baseline-from` evaluates the steps before --start (the same grid, range
queries, the same FleetEvaluator path): the learners, the verdicts' hysteresis and the rollout
grader all carry them, and nothing is written or served for them.

Bounded: at most MAX_STEPS steps (the newest), MAX_QUERIES range queries and DEADLINE seconds of
wall time, queries and evaluation together. Memory, like a poll's: the range is read in chunks of
CHUNK_STEPS steps, each answer decoded in place with its points packed (16 bytes a point, client.
MatrixDecoder) and pivoted one step at a time (backtest._Pivot), so the read holds one chunk's
points and one answer's body at a time: about HISTORY_BYTES_PER_REPLICA a replica, whatever the
lookback (the chart adds it to fleet mode's memory, docs/kubernetes.md). A query that fails, or the deadline, ends the read; what
was evaluated by then stays learned, and the reason is reported (HistoryRead.error). The live polls
then start as they would without it.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

from specwatch.costmodel import learned
from specwatch.fleet.backtest import RANGE_QUERY_TIMEOUT, RangeClient, detect_recorded, replay
from specwatch.fleet.client import (
    MAX_POINTS_PER_SERIES,
    PromClient,
    PromQueryError,
    RangeAnswer,
)
from specwatch.fleet.evaluator import FleetEvaluator
from specwatch.view.fleet import QUERY_ERROR_REASONS, HistoryRead

#: Steps replayed at most: the learner's horizon for spec-off windows at the default half-life
#: (they are dropped BASELINE_HALF_LIVES half-lives after the last) at a 1m window: two days.
MAX_STEPS = round(learned.BASELINE_HALF_LIVES * learned.DEFAULT_HALF_LIFE_SECONDS / 60.0)
#: Steps of one chunk of range queries: 1 h at a 1m window, so a chunk's answer stays small
#: (its size per replica: docs/benchmarks.md, "Chart defaults and constants").
CHUNK_STEPS = 60
#: Range queries at most (a chunk is one query per window plus the freshness query; a server's
#: sample limit splits chunks in halves): MAX_STEPS in chunks of CHUNK_STEPS at three queries each.
MAX_QUERIES = 3 * (-(-MAX_STEPS // CHUNK_STEPS)) + 16
#: What the read costs a replica at its peak, with margin (docs/benchmarks.md, "Chart defaults and
#: constants"): the chart adds it per expected replica to fleet mode's memory.
HISTORY_BYTES_PER_REPLICA = 192 * 1024
#: The reason a read ends when MAX_QUERIES were taken: not the server's "limit", which replay
#: answers by splitting the chunk (here every half would be refused again).
BUDGET = "budget"
#: What HistoryRead.error may say: a query error reason, or BUDGET.
HISTORY_ERROR_REASONS = (*QUERY_ERROR_REASONS, BUDGET)
#: Wall-time budget of the whole read. It comes before the first live poll (the service keeps /healthz
#: ticking meanwhile; /readyz says starting), so the budget bounds how late that poll comes.
DEADLINE = 120.0
#: Step of the one range query that finds where the fleet's data begins (first_data): no longer than
#: Prometheus' default lookback delta (5m), so a replica scraped in between is seen at some step.
PROBE_STEP = 60.0


class _QueryBudgetSpent(Exception):
    """MAX_QUERIES were taken: the read ends (raised past replay, which retries only query errors)."""


class _BoundedClient:
    """A PromClient whose every query gets the budget left (and no more than MAX_QUERIES of them)."""

    def __init__(self, client: PromClient, deadline: float, max_queries: int):
        self.client = client
        self.base = client.config  # restored when the read ends
        self._deadline = deadline
        self._max_queries = max_queries
        self.queries = 0

    def left(self) -> float:
        return self._deadline - time.monotonic()

    def query_range(self, expr: str, start: float, end: float, step: float) -> RangeAnswer:
        left = self.left()
        if left <= 0:
            raise PromQueryError("timeout", "the history read ran out of time")
        if self.queries >= self._max_queries:
            raise _QueryBudgetSpent(f"the history read took {self._max_queries} queries")
        self.client.config = replace(self.base, timeout=min(left, RANGE_QUERY_TIMEOUT))
        self.queries += 1
        return self.client.query_range(expr, start, end, step)


def history_grid(now: float, lookback: float, step: float, max_steps: int = MAX_STEPS) -> tuple[float, int]:
    """The first step and the number of steps before ``now`` on backtest's grid (now - k·step)."""
    steps = min(math.floor(lookback / step + 1e-9), max_steps) if lookback > 0 and step > 0 else 0
    return now - steps * step, steps


def first_data(client: RangeClient, expr: str, origin: float, end: float, step: float) -> float | None:
    """The first step origin + k·step (up to ``end``) whose windows may hold data, from one range
    query of the freshness expression ``expr`` at PROBE_STEP (or ``step``, if longer); None: no
    replica in the range. A read of a history that began minutes ago then costs the queries of
    those minutes, not those of the whole lookback (at a loaded Prometheus, seconds each)."""
    probe = max(step, PROBE_STEP)
    last = origin + math.ceil((end - origin) / probe - 1e-9) * probe  # at or after `end`: its newest step too
    seen = [t for series in client.query_range(expr, origin, last, probe).series for t, _ in series.points]
    if not seen:
        return None
    start = max(origin, min(seen) - probe)  # a replica seen at t was first scraped after t - probe
    return origin + math.floor((start - origin) / step + 1e-9) * step


def read_history(
    evaluator: FleetEvaluator,
    now: float,
    *,
    client: PromClient | None = None,
    step: float | None = None,
    deadline: float = DEADLINE,
    max_steps: int = MAX_STEPS,
    max_queries: int = MAX_QUERIES,
) -> HistoryRead:
    """Evaluate the steps now - k·step (k = steps..1) into ``evaluator``; what was read. ``step``
    defaults to the shortest window (backtest's default)."""
    source = evaluator.config.prometheus
    assert source is not None  # a FleetEvaluator's config has a Prometheus source
    lookback = source.history_lookback
    step = step if step is not None else min(evaluator.config.windows)
    origin, steps = history_grid(now, lookback, step, max_steps)
    if steps == 0:
        return HistoryRead(lookback, None, None, 0, 0, 0.0)
    started = time.monotonic()
    own = client is None
    raw = client if client is not None else PromClient(source)
    bounded = _BoundedClient(raw, started + deadline, max_queries)
    done, first, last, error = 0, None, None, None
    try:
        if evaluator.recorded is None:  # first: the probe reads the series the read will
            detect_recorded(evaluator, bounded, now - step, step)
        begins = first_data(bounded, evaluator.queries.freshness, origin, now - step, step)
        if begins is None:  # no replica in the lookback: nothing to evaluate
            return HistoryRead(lookback, None, None, 0, bounded.queries, time.monotonic() - started)
        for _, t, _ in replay(
            evaluator, bounded, begins, now - step, step, min(CHUNK_STEPS, MAX_POINTS_PER_SERIES), from_first_data=True
        ):
            done += 1
            first = t if first is None else first
            last = t
            if bounded.left() <= 0 and t < now - step:
                error = "timeout"  # out of time between steps: what was evaluated stays learned
                break
    except PromQueryError as exc:
        error = exc.reason
    except _QueryBudgetSpent:
        error = BUDGET
    finally:
        raw.config = bounded.base
        if own:
            raw.close()
    return HistoryRead(lookback, first, last, done, bounded.queries, time.monotonic() - started, error)
