"""`specwatch backtest`: fleet mode over history, with range queries.

One evaluation per step for every configured window at exactly start + n·step (the default step
is the shortest window, so windows tile; a smaller step gives overlapping windows), through the
same FleetEvaluator as live fleet mode (so the hold and the hysteresis carry from step to step).
Output: JSON lines with the keys of `specwatch replay` plus "replica" (the replica labels; null
on the fleet rows), then one summary line: time and token share per verdict, verdict changes,
and the decode throughput a user would have gained by following the recommendations.
`--baseline-from` evaluates the steps before --start too, writing nothing for them: the learned
step-time curves then take the spec-off hours before speculation was switched on as their baseline
(fleet/baseline.py).

The query API's limits are respected: a range is split so no series has more than 11,000 points,
and a range the server refuses for its sample limit is split in halves until it fits.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import IO, Any, Protocol

from specwatch import config as config_mod
from specwatch import costmodel
from specwatch.config import Config, ConfigError
from specwatch.fleet import recorded
from specwatch.fleet.client import MAX_POINTS_PER_SERIES, Points, PromClient, PromQueryError, RangeAnswer, Sample
from specwatch.fleet.evaluator import FleetEvaluator, collector_paused
from specwatch.fleet.rows import fleet_record, replica_record
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.view.fleet import ReplicaKey

EXIT_CONFIG = 2
EXIT_QUERY = 1


def parse_time(text: str, key: str) -> float:
    """RFC 3339 (2026-11-30T17:00:00Z) or Unix seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ConfigError(key, f"expected RFC 3339 (2026-11-30T17:00:00Z) or Unix seconds, got {text!r}") from None
    if moment.tzinfo is None:
        raise ConfigError(key, f"give a time zone (Z or +00:00), got {text!r}")
    return moment.timestamp()


@dataclass(frozen=True)
class _Chunk:
    start: float
    end: float


def _chunks(start: float, end: float, step: float, max_points: int) -> list[_Chunk]:
    out = []
    points = math.floor((end - start) / step + 1e-9) + 1
    n = 0
    while n < points:
        last = min(points - 1, n + max_points - 1)
        out.append(_Chunk(start + n * step, start + last * step))
        n = last + 1
    return out


class _Pivot:
    """A chunk's series by step, read step by step in increasing order: each series' points stay
    packed (client.Points) and only one step's Samples exist at a time: a long history's points as
    Samples all at once would cost many times the packed points."""

    def __init__(self, series: Sequence[Any], step_key: Callable[[float], int]) -> None:
        self._series = [(s.labels, _packed(s.points)) for s in series]
        self._cursor = [0] * len(self._series)
        self._key = step_key
        self.steps = {step_key(packed[i]) for _, packed in self._series for i in range(0, len(packed), 2)}

    def __contains__(self, n: int) -> bool:
        return n in self.steps

    def at(self, n: int) -> list[Sample]:
        """Step n's samples (steps are read in increasing order)."""
        out = []
        key, cursor = self._key, self._cursor
        for i, (labels, packed) in enumerate(self._series):
            j = cursor[i]
            while j < len(packed) and key(packed[j]) < n:
                j += 2
            while j < len(packed) and key(packed[j]) == n:
                out.append(Sample(labels, packed[j + 1]))
                j += 2
            cursor[i] = j
        return out


def _packed(points: Sequence[tuple[float, float]]) -> array[float]:
    if isinstance(points, Points):
        return points.packed
    return array("d", (x for point in points for x in point))


#: Deadline of one backtest range query. The live deadline stays below the poll interval so a poll
#: never overruns the next; offline, a query evaluates up to max_points steps at once and nothing
#: waits on it, so it gets at least this long.
RANGE_QUERY_TIMEOUT = 120.0


class RangeClient(Protocol):
    """What a replay needs of the query client (PromClient, or one that bounds each query's time)."""

    def query_range(self, expr: str, start: float, end: float, step: float) -> RangeAnswer: ...


def detect_recorded(evaluator: FleetEvaluator, client: RangeClient, end: float, step: float) -> None:
    """One range query: were the recording rules there at ``end``? The evaluator then reads them, or not."""
    answer = client.query_range(recorded.detection_query(evaluator.source.matchers), end, end, step)
    evaluator.use_recorded(recorded.covers(evaluator.config.windows) and recorded.present_in_range(answer.series))


def replay(
    evaluator: FleetEvaluator,
    client: RangeClient,
    origin: float,
    end: float,
    step: float,
    max_points: int,
    *,
    from_first_data: bool = False,
) -> Iterator[tuple[int, float, list[tuple[ReplicaKey, RouteEvaluation]]]]:
    """Every step origin + n·step up to ``end`` through ``evaluator``, in order, from range queries:
    (n, its time, its evaluations). A range the server refuses for its sample limit is split in
    halves until it fits; any other query error is raised. ``from_first_data``: the steps before
    the first with any window series are skipped (before the fleet existed, an empty answer is no
    selector that matches nothing; evaluating them would change nothing else)."""
    if evaluator.recorded is None:
        detect_recorded(evaluator, client, end, step)
    queries = evaluator.queries
    pending = _chunks(origin, end, step, max_points)
    waiting = from_first_data
    while pending:
        chunk = pending.pop(0)
        try:
            with collector_paused():  # large answers: see fleet.collector_paused
                answers = {
                    label: client.query_range(expr, chunk.start, chunk.end, step).series
                    for label, _, expr in queries.windows
                }
                fresh = client.query_range(queries.freshness, chunk.start, chunk.end, step).series
        except PromQueryError as exc:
            steps = round((chunk.end - chunk.start) / step)
            if exc.reason == "limit" and steps >= 1:
                half = chunk.start + (steps // 2) * step
                pending[:0] = [_Chunk(chunk.start, half), _Chunk(half + step, chunk.end)]
                continue
            raise

        def key(t: float) -> int:
            return round((t - origin) / step)

        windows = {label: _Pivot(series, key) for label, series in answers.items()}
        freshness = _Pivot(fresh, key)
        del answers, fresh
        for n in range(key(chunk.start), key(chunk.end) + 1):
            if waiting and not any(n in w for w in windows.values()):
                continue
            waiting = False
            now = origin + n * step
            with collector_paused():
                results = evaluator.evaluate(now, {label: w.at(n) for label, w in windows.items()}, freshness.at(n))
            yield n, now, results


class Backtest:
    def __init__(self, config: Config, client: PromClient | None = None, *, max_points: int = MAX_POINTS_PER_SERIES):
        self.evaluator = FleetEvaluator(config)
        source = self.evaluator.source
        self.client = client or PromClient(replace(source, timeout=max(source.timeout, RANGE_QUERY_TIMEOUT)))
        self.max_points = max_points
        self.summary = Summary(self.evaluator)

    def run(
        self, start: float, end: float, step: float, baseline_from: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """``baseline_from`` before ``start``: the steps from there (on the same grid) are
        evaluated too, so the learned curves take their spec-off windows (the hours before
        speculation was switched on) as a baseline, but they are neither written nor summed."""
        if end < start:
            raise ConfigError("--end", "must not be before --start")
        if baseline_from is not None and baseline_from > start:
            raise ConfigError("--baseline-from", "must not be after --start")
        warmup = math.floor((start - baseline_from) / step + 1e-9) if baseline_from is not None else 0
        origin = start - warmup * step
        for n, now, results in replay(self.evaluator, self.client, origin, end, step, self.max_points):
            self.evaluator.sent_queries = self.client.queries
            if n < warmup:
                continue  # learning only
            for replica, evaluation in results:
                self.summary.add(replica, evaluation, step)
                yield replica_record(replica, evaluation)
            for row in self.evaluator.state().fleet:
                yield fleet_record(now, row)


class Summary:
    """Time and token share per verdict, verdict changes, and the throughput gain of following them."""

    def __init__(self, evaluator: FleetEvaluator):
        self.evaluator = evaluator
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.tokens: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.changes: dict[str, int] = defaultdict(int)
        self.gained: dict[str, float] = defaultdict(float)  # tokens x (speedup if followed / now - 1)
        self.decoded: dict[str, float] = defaultdict(float)
        self._last: dict[tuple[ReplicaKey, str, str], str | None] = {}
        self.evaluations = 0

    def add(self, replica: ReplicaKey, evaluation: RouteEvaluation, step: float) -> None:
        stats = evaluation.stats
        window = stats.window
        verdict = evaluation.verdict or "none"
        tokens = stats.generation_tokens or 0.0
        self.evaluations += 1
        self.seconds[window][verdict] += step
        self.tokens[window][verdict] += tokens
        key = (replica, stats.route, window)
        if key in self._last and self._last[key] != evaluation.verdict:
            self.changes[window] += 1
        self._last[key] = evaluation.verdict
        if tokens > 0:
            self.decoded[window] += tokens
            self.gained[window] += tokens * (self._gain(evaluation) - 1.0)

    def _gain(self, evaluation: RouteEvaluation) -> float:
        """Decode throughput following the verdict / throughput as is, from the cost model."""
        assessment = evaluation.assessment
        stats = evaluation.stats
        now = evaluation.value("expected_speedup")
        if evaluation.verdict not in ("disable", "shorten") or now is None or now <= 0 or stats.batch_size is None:
            return 1.0
        if evaluation.verdict == "disable":
            return 1.0 / now
        best_k = assessment.recommended_draft_length if assessment is not None else None
        if not best_k:
            return 1.0 / now
        cm = self.evaluator.route_model(stats.engine, stats.schema).with_method(None)
        rates = stats.position_rates or costmodel.position_rates_from_alpha(
            stats.acceptance_rate or 0.0, max(best_k, stats.configured_k or best_k)
        )
        coverage = costmodel.draft_coverage(stats.draft_coverage)
        followed = costmodel.expected_speedup_for_positions(cm, max(stats.batch_size, 1.0), rates[:best_k], coverage)
        return max(followed, 1.0) / now if followed > 0 else 1.0

    def record(self) -> dict[str, Any]:
        windows = {}
        for window in sorted(self.seconds):
            total_s = sum(self.seconds[window].values())
            total_t = sum(self.tokens[window].values())
            windows[window] = {
                "time_share": {v: s / total_s for v, s in sorted(self.seconds[window].items())} if total_s else {},
                "token_share": {v: t / total_t for v, t in sorted(self.tokens[window].items())} if total_t else {},
                "verdict_changes": self.changes[window],
                "throughput_gain_if_followed": (
                    self.gained[window] / self.decoded[window] if self.decoded[window] else None
                ),
            }
        state = self.evaluator.state()
        return {
            "summary": True,
            "evaluations": self.evaluations,
            "queries": state.queries,
            "queries_per_evaluation": state.queries_per_poll,
            "stale_replica_evaluations": state.stale_evaluations,
            "windows": windows,
        }


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    return value


def backtest_to(
    config: Config,
    start: float,
    end: float,
    step: float | None,
    out: IO[str],
    baseline_from: float | None = None,
) -> dict[str, Any]:
    step = step if step is not None else min(config.windows)
    backtest = Backtest(config)
    try:
        for record in backtest.run(start, end, step, baseline_from):
            out.write(json.dumps(_clean(record)) + "\n")
    finally:
        backtest.client.close()
    summary = backtest.summary.record()
    out.write(json.dumps(_clean(summary)) + "\n")
    return summary


def add_parsers(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "backtest",
        help="evaluate history from Prometheus (fleet mode) at start + n*step; JSON lines",
        description="Fleet-mode evaluation over history with range queries: one JSON line per "
        "replica, route and window at every step, fleet rows, then a summary.",
    )
    p.add_argument("--config", required=True, help="YAML config with a prometheus: section")
    p.add_argument("--start", required=True, help="RFC 3339 or Unix seconds")
    p.add_argument("--end", required=True, help="RFC 3339 or Unix seconds")
    p.add_argument("--step", default=None, help="evaluation step (default: the shortest window)")
    p.add_argument(
        "--baseline-from",
        default=None,
        help="RFC 3339 or Unix seconds before --start: learn from there too (spec-off hours before the switch), "
        "writing nothing for it",
    )
    p.set_defaults(func=cmd_backtest)


def cmd_backtest(args: argparse.Namespace) -> int:
    try:
        config = config_mod.load(args.config)
        start = parse_time(args.start, "--start")
        end = parse_time(args.end, "--end")
        step = config_mod.parse_duration(args.step, "--step") if args.step else None
        baseline_from = parse_time(args.baseline_from, "--baseline-from") if args.baseline_from else None
        backtest_to(config, start, end, step, sys.stdout, baseline_from)
    except ConfigError as exc:
        print(f"specwatch: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except PromQueryError as exc:
        print(f"specwatch backtest: query failed ({exc.reason}): {exc}", file=sys.stderr)
        return EXIT_QUERY
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specwatch.fleet.backtest")
    sub = parser.add_subparsers(dest="command")
    add_parsers(sub)
    args = parser.parse_args(["backtest", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
