"""The last hour of each route-window's headline values, kept in memory for the page (page.py).

The poller records one point per poll (PageHistory.record, from the View it just published); nothing here does I/O or is read by /metrics. Memory is bounded three ways: at most
MAX_SERIES route-windows are kept (a new one past that replaces the one updated longest ago, and
none is added while every kept one is current), each keeps at most `max_points` points (an hour at
the default 5 s poll; a faster poll is thinned to one point per horizon/max_points seconds, the
newest point replacing the last one inside that step), and values are stored as C doubles in
arrays (absent = NaN), 72 bytes a point: 50 series x 720 points is under 3 MB.

A plot reads a column as a fixed number of buckets (Series.cut: each bucket's points found by
bisection on the time column, once per plot; Series.buckets: min, max and last per bucket), so what it draws is the same size at 5
minutes of history as at an hour, and a one-poll spike still shows as its bucket's max.

It also remembers what the published states do not carry: since when a window's candidate verdict
has differed from the verdict (its hold), and each target's last error with its message.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, count
from operator import itemgetter

from specwatch.verdict.decide import VERDICTS
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.view import View
from specwatch.view.routes import RouteRow

__all__ = [
    "COLUMNS",
    "MAX_SERIES",
    "Bucket",
    "Cut",
    "LastError",
    "PageHistory",
    "Series",
    "SeriesKey",
    "buckets_plain",
    "edges",
    "page_order",
    "verdict_code",
    "verdict_of",
]

#: The values kept per point, in this order (t: the evaluation time, seconds; verdict: its index
#: in VERDICTS, NaN for none).
COLUMNS = ("t", "alpha", "breakeven", "speedup", "speedup_lower", "speedup_upper", "itl_p50", "itl_p99", "verdict")
MAX_SERIES = 50  # route-windows with a history (the page shows at most this many routes anyway)
HORIZON = 3600.0
MAX_POINTS = 720

SeriesKey = tuple[str, str, str]  # (target or replica, route, window)


def _num(x: float | None) -> float:
    return math.nan if x is None or not math.isfinite(x) else float(x)


def verdict_code(verdict: str | None) -> float:
    """A verdict as a number a column can hold (NaN for none or an unknown one)."""
    return float(VERDICTS.index(verdict)) if verdict in VERDICTS else math.nan


def verdict_of(code: float) -> str | None:
    """The verdict a column's number stands for."""
    return VERDICTS[int(code)] if math.isfinite(code) and 0 <= code < len(VERDICTS) else None


#: One plot bucket: its index, then min, max and last of the finite values in it (all None when
#: every point in it is absent: a gap).
Bucket = tuple[int, float | None, float | None, float | None]


#: A span cut into buckets: (bucket index, first point, end point) for each non-empty bucket.
Cut = list[tuple[int, int, int]]


def _bucket(i: int, values: Sequence[float]) -> Bucket:
    if len(values) == 1:  # the common case while the points are fewer than the buckets
        v = values[0]
        return (i, None, None, None) if math.isnan(v) else (i, v, v, v)
    finite = [v for v in values if not math.isnan(v)]  # NaN: absent
    if not finite:
        return (i, None, None, None)
    return (i, min(finite), max(finite), finite[-1])


def edges(t0: float, t1: float, n: int) -> list[float]:
    """The n - 1 inner edges of `n` equal buckets over [t0, t1]: a point at an edge is in the later
    bucket."""
    width = (t1 - t0) / n
    return [t0 + k * width for k in range(1, n)]


def buckets_plain(points: Iterable[tuple[float, float]], t0: float, t1: float, n: int) -> list[Bucket]:
    """Series.buckets over (t, value) pairs, one point at a time: the reference the fast path is
    tested against."""
    if n <= 0 or t1 <= t0:
        return []
    inner = edges(t0, t1, n)
    grouped: dict[int, list[float]] = {}
    for t, v in points:
        if t0 <= t <= t1:
            grouped.setdefault(sum(1 for e in inner if e <= t), []).append(v)
    return [_bucket(i, grouped[i]) for i in sorted(grouped)]


class Series:
    """One route-window's points, oldest first, in one array per column (trimmed in bulk)."""

    __slots__ = ("_cap", "_cols", "updated")

    def __init__(self, cap: int):
        self._cap = cap
        self._cols = tuple(array("d") for _ in COLUMNS)
        self.updated = 0  # the record() call that last appended here

    def __len__(self) -> int:
        return len(self._cols[0])

    def add(self, values: tuple[float, ...], *, replace_last: bool) -> None:
        for col, v in zip(self._cols, values, strict=True):
            if replace_last and col:
                col[-1] = v
            else:
                col.append(v)
        if len(self._cols[0]) > self._cap + self._cap // 8:  # trim an eighth at a time: O(1) amortised
            for col in self._cols:
                del col[: len(col) - self._cap]

    def last_t(self) -> float | None:
        return self.t_at(-1)

    def t_at(self, index: int) -> float | None:
        t = self._cols[0]
        return t[index] if -len(t) <= index < len(t) else None

    def column(self, name: str, since: float = -math.inf) -> list[tuple[float, float]]:
        """(t, value) for the points at or after `since`; absent values are NaN (gaps)."""
        t, col = self._cols[0], self._cols[COLUMNS.index(name)]
        start = bisect_left(t, since)
        return list(zip(t[start:], col[start:], strict=True))

    def cut(self, t0: float, t1: float, n: int) -> Cut:
        """The points in [t0, t1] cut into `n` equal time buckets, found by one bisection per edge:
        computed once per plot, read by every column (buckets)."""
        t = self._cols[0]
        if n <= 0 or t1 <= t0:
            return []
        bounds = [bisect_left(t, t0)]
        for edge in edges(t0, t1, n):
            bounds.append(bisect_left(t, edge, bounds[-1]))
        bounds.append(max(bisect_right(t, t1), bounds[-1]))
        return [(k, bounds[k], bounds[k + 1]) for k in range(n) if bounds[k] < bounds[k + 1]]

    def buckets(self, name: str, cut: Cut) -> list[Bucket]:
        """The column over a cut: per non-empty bucket its index, min, max and last value.

        The values are read as array slices and min, max and the sum of every slice taken by `map`
        (in C, no Python per bucket); a slice whose sum is NaN holds an absent value (or infinities
        of both signs) and only that bucket goes through `_bucket`, which skips the absent ones.
        `buckets_plain` is the reference it is tested against."""
        col = self._cols[COLUMNS.index(name)]
        index = [i for i, _, _ in cut]
        slices = [col[start:end] for _, start, end in cut]
        out: list[Bucket] = list(
            zip(index, map(min, slices), map(max, slices), map(itemgetter(-1), slices), strict=True)
        )
        for k in compress(count(), map(math.isnan, map(sum, slices))):
            out[k] = _bucket(index[k], slices[k])
        return out


@dataclass(frozen=True)
class LastError:
    t: float  # the poll's time (the state's clock)
    reason: str
    message: str


def page_order(rows: Iterable[RouteRow]) -> list[RouteRow]:
    """The route rows the page shows (not a route missing from its target's latest good poll),
    grouped by route in order of first appearance (a route's targets or replicas side by side):
    the order the history fills its series in too, so the series cap never leaves a plotted row
    without its history."""
    groups: dict[str, list[RouteRow]] = {}
    for row in rows:
        if row.current:
            groups.setdefault(row.route, []).append(row)
    return [row for group in groups.values() for row in group]


class PageHistory:
    def __init__(self, *, horizon: float = HORIZON, max_points: int = MAX_POINTS, max_series: int = MAX_SERIES):
        self.horizon = horizon
        self.max_points = max_points
        self.max_series = max_series
        self.step = horizon / max_points  # the finest spacing kept
        self._series: dict[SeriesKey, Series] = {}
        self._pending: dict[SeriesKey, tuple[str, float]] = {}  # candidate != verdict: (candidate, since)
        self.errors: dict[str, LastError] = {}  # target (or "prometheus") -> its last error
        self._counts: dict[str, Mapping[str, int]] = {}
        self._noted: set[str] = set()  # targets whose error (with its message) was noted since the last record
        self._records = 0
        self.dropped_series = 0  # route-windows seen that got no history (MAX_SERIES reached)

    # -- input (the poll thread) ------------------------------------------------------------
    def record(self, view: View) -> None:
        """One published View: a point per route-window evaluated, the holds, the errors."""
        self._records += 1
        fleet, state = view.fleet, view.targets
        if fleet is not None:
            self._note_counts("prometheus", fleet.errors, fleet.t)
        for target in state.targets:
            self._note_counts(target.name, target.errors, state.t)
        if fleet is None or fleet.up:  # a failed query poll has no rows, and ends no hold
            self._record_evaluations(
                (r.target, r.route, e) for r in page_order(view.route_rows()) for e in r.evaluations
            )
        self._noted.clear()

    def note_error(self, target: str, t: float, reason: str | None, message: str) -> None:
        """A target's failed poll, with the message the page shows (bounded to 300 characters)."""
        self.errors[target] = LastError(t, reason or "invalid", message[:300])
        self._noted.add(target)

    def _note_counts(self, name: str, counts: Mapping[str, int], t: float | None) -> None:
        """A reason whose count went up since the last record is the last error (when nobody
        noted one with its message, as in fleet mode)."""
        before = self._counts.get(name)
        if before is not None and t is not None:
            for reason, n in counts.items():
                if n > before.get(reason, 0) and name not in self._noted:
                    self.errors[name] = LastError(t, reason, "")
        self._counts[name] = dict(counts)
        if len(self._counts) > 4 * self.max_series:  # target churn: forget, at worst a reason is missed
            self._counts.clear()
        if len(self.errors) > 4 * self.max_series:
            self.errors.clear()

    def _record_evaluations(self, items: Iterable[tuple[str, str, RouteEvaluation]]) -> None:
        seen: set[SeriesKey] = set()
        for where, route, e in items:
            key = (where, route, e.stats.window)
            seen.add(key)
            self._hold(key, e)
            series = self._series.get(key)
            if series is None:
                series = self._new_series()
            if series is None:
                self.dropped_series += 1
                continue
            self._series[key] = series
            t = e.stats.t
            last = series.last_t()
            if last is not None and t < last:
                continue  # an older evaluation (never expected): the series stays in time order
            # Points stay at least a step apart but the newest: it replaces the last one while that
            # is within a step of the point before it (and the same evaluation published again).
            anchor = series.t_at(-2)
            replace_last = t == last or (anchor is not None and t - anchor < self.step)
            values = (
                float(t),
                _num(e.acceptance_rate),
                _num(e.breakeven_acceptance_rate),
                _num(e.expected_speedup),
                _num(e.expected_speedup_lower),
                _num(e.expected_speedup_upper),
                _num(e.itl_p50_seconds),
                _num(e.itl_p99_seconds),
                verdict_code(e.verdict),
            )
            series.add(values, replace_last=replace_last)
            series.updated = self._records
        for key in [k for k in self._pending if k not in seen]:
            del self._pending[key]

    def _hold(self, key: SeriesKey, e: RouteEvaluation) -> None:
        candidate = getattr(e.assessment, "candidate", None)
        if candidate is None or candidate == e.verdict:
            self._pending.pop(key, None)
            return
        previous = self._pending.get(key)
        if previous is None or previous[0] != candidate:
            self._pending[key] = (candidate, e.stats.t)

    def _new_series(self) -> Series | None:
        if len(self._series) < self.max_series:
            return Series(self.max_points)
        oldest = min(self._series, key=lambda k: self._series[k].updated)
        if self._series[oldest].updated >= self._records:
            return None  # every kept series is current: the new one gets none
        del self._series[oldest]
        return Series(self.max_points)

    # -- output (the page, rendered by the same thread) -----------------------------------------
    def series(self, key: SeriesKey) -> Series | None:
        return self._series.get(key)

    def candidate_since(self, key: SeriesKey) -> float | None:
        """When the window's current candidate (differing from its verdict) first appeared."""
        pending = self._pending.get(key)
        return None if pending is None else pending[1]

    def __iter__(self) -> Iterator[SeriesKey]:
        return iter(self._series)

    def __len__(self) -> int:
        return len(self._series)
