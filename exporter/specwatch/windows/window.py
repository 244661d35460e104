"""Rolling windows of route snapshots, with counter deltas that survive vLLM restarts.

Each ingested snapshot is folded into a reset-aware running total per series (the "mirror"):
the Prometheus rule (a value below its predecessor restarted from 0, so the new value is the
increase), plus a changed `_created` timestamp counts as a reset, and a histogram resets as a
whole. A window's increase is then the difference of two mirrors, so evaluating a 5m window
costs O(series), not O(series x snapshots). The mirrors are also what the sidecar exports as
its own monotonic counters.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from itertools import islice

from specwatch.engines.vllm import (
    K_ACCEPTED,
    K_DRAFT_TOKENS,
    K_DRAFTS,
    K_ITL,
    K_ITL_BUCKET,
    K_POS,
    RouteSnapshot,
    SeriesKey,
    reset_group,
)


@dataclass(frozen=True)
class Entry:
    t: float
    totals: Mapping[SeriesKey, float]  # mirrored cumulative increase per series since first seen
    snapshot: RouteSnapshot


@dataclass(frozen=True)
class WindowView:
    """The snapshots of one window: the oldest at or after now - width, the newest at or before now."""

    first: Entry
    last: Entry
    entries: tuple[Entry, ...]

    @property
    def samples(self) -> int:
        return len(self.entries)

    @property
    def span_seconds(self) -> float:
        return self.last.t - self.first.t

    def increase(self, key: SeriesKey) -> float:
        last = self.last.totals.get(key)
        if last is None:
            return 0.0
        first = self.first.totals.get(key)
        # A series born inside the window counts from its first sighting (mirror starts at 0);
        # a histogram whose buckets were re-laid out restarted its mirror inside the window.
        return last if first is None or last < first else last - first

    def increases(self) -> dict[SeriesKey, float]:
        """increase() of every series of the window's last snapshot (one pass, no call per series)."""
        first = self.first.totals
        return {
            key: last if (before := first.get(key)) is None or last < before else last - before
            for key, last in self.last.totals.items()
        }


class RouteWindow:
    """Snapshots of one route, kept for the longest window."""

    def __init__(self, horizon_seconds: float):
        self.horizon = horizon_seconds
        self.entries: deque[Entry] = deque()
        self._times: deque[float] = deque()  # entries' times, for view()'s bisection in C
        self._raw: dict[SeriesKey, float] = {}
        self._created: dict[SeriesKey, float] = {}
        self._le_sets: dict[str, frozenset[float]] = {}  # ITL bucket bounds per series
        self.totals: dict[SeriesKey, float] = {}
        self.resets = 0
        # Entries are in time order (ingest drops any snapshot not after the last) unless a time
        # was NaN, which compares false with everything: then view() looks at every entry.
        self._unordered = False

    def ingest(self, snap: RouteSnapshot) -> bool:
        """Fold a new snapshot in; return True when it showed a counter reset."""
        if self.entries and snap.t <= self.entries[-1].t:
            return False  # out-of-order or duplicate time: ignore rather than corrupt deltas
        self._unordered = self._unordered or math.isnan(snap.t)
        reset_groups: set[SeriesKey] = set()
        raw = self._raw
        counters = snap.counters
        # Deltas as if nothing reset (the usual poll), found in the same pass as the drops; a
        # reset below recomputes them by the full rule.
        deltas: dict[SeriesKey, float] = {}
        if raw:
            for key, value in counters.items():
                previous = raw.get(key)
                if previous is None:
                    deltas[key] = 0.0  # first sighting: its history before we started is not ours to count
                else:
                    if value < previous:
                        reset_groups.add(reset_group(key))
                    deltas[key] = value - previous
            for group, created in snap.created.items():
                previous = self._created.get(group)
                if previous is not None and created != previous:
                    reset_groups.add(group)
        else:
            deltas = dict.fromkeys(counters, 0.0)
        # A histogram whose bucket layout changed restarts as a whole, and so does its mirror. The
        # same series as the last poll have the same layouts (each was recorded from that poll).
        if counters.keys() != raw.keys():
            self._relayout(counters, reset_groups)
        if reset_groups:
            deltas = {}
            for key, value in counters.items():
                previous = raw.get(key)
                if reset_group(key) in reset_groups:
                    deltas[key] = value
                elif previous is None:
                    deltas[key] = 0.0
                else:
                    deltas[key] = value - previous
        if raw and not snap.created:
            # Without _created (multiprocess vLLM) a restart can hide: counters that grew past their
            # old values within one poll show no drop. The interval then breaks vLLM's identities
            # (accepted <= draft tokens, drafts <= draft tokens, accepted at a position <= drafts), so
            # the engine restarted: count its values from 0, all together, like a visible reset.
            for engine in _broken_engines(deltas, _one_step_slack(snap, self.latest)):
                for key, value in snap.counters.items():
                    if key.series == engine:
                        reset_groups.add(reset_group(key))
                        deltas[key] = value
        totals = self.totals
        for key, delta in deltas.items():
            totals[key] = totals.get(key, 0.0) + delta
        self._raw = dict(snap.counters)
        self._created.update(snap.created)
        self.entries.append(Entry(snap.t, dict(totals), snap))
        self._times.append(snap.t)
        self._prune(snap.t)
        if reset_groups:
            self.resets += 1
        return bool(reset_groups)

    def _relayout(self, counters: Mapping[SeriesKey, float], reset_groups: set[SeriesKey]) -> None:
        """Record each engine's ITL bucket bounds; a changed layout resets that histogram."""
        le_sets: dict[str, set[float]] = {}
        for key in counters:
            if key.counter == K_ITL_BUCKET:
                le_sets.setdefault(key.series, set()).add(key.le)
        for engine, les in le_sets.items():
            frozen = frozenset(les)
            previous_les = self._le_sets.get(engine)
            if previous_les is not None and previous_les != frozen:
                group = SeriesKey(K_ITL, engine)
                reset_groups.add(group)
                for key in [k for k in self.totals if reset_group(k) == group]:
                    del self.totals[key]
            self._le_sets[engine] = frozen

    def forget(self, series: Collection[str]) -> None:
        """Drop every mirror, last value, `_created` and bucket layout of these series (engines gone
        from the payload, past the pipeline's bound on engines per route). Entries already kept
        hold them until they leave the horizon; a series seen again starts anew (first sighting)."""
        gone = set(series)
        for held in (self.totals, self._raw, self._created):
            for key in [k for k in held if k.series in gone]:
                del held[key]
        for name in gone:
            self._le_sets.pop(name, None)

    def _prune(self, now: float) -> None:
        while self.entries and self.entries[0].t < now - self.horizon:
            self.entries.popleft()
            self._times.popleft()

    @property
    def latest(self) -> RouteSnapshot | None:
        return self.entries[-1].snapshot if self.entries else None

    def view(self, now: float, width: float) -> WindowView | None:
        """The window [now - width, now]; None when it holds fewer than 2 snapshots."""
        lo = now - width
        entries = self.entries
        if self._unordered:
            chosen = tuple([e for e in entries if lo <= e.t <= now])
        elif math.isnan(lo) or math.isnan(now):
            # Newest first, stop at the window's start (which a NaN bound never is).
            scanned = []
            for entry in reversed(entries):
                if entry.t < lo:
                    break
                if entry.t <= now:
                    scanned.append(entry)
            chosen = tuple(reversed(scanned))
        else:
            # Times strictly increase (ingest drops any snapshot not after the last): the entries
            # with lo <= t <= now are one run, found by bisection.
            start = bisect_left(self._times, lo)
            end = bisect_right(self._times, now)
            if end - start < 2:
                return None
            chosen = tuple(islice(entries, start, end))
        if len(chosen) < 2:
            return None
        return WindowView(chosen[0], chosen[-1], chosen)


def _one_step_slack(snap: RouteSnapshot, previous: RouteSnapshot | None) -> float:
    """How far one engine step's counter updates can be caught half-applied. In multiprocess mode a
    scrape reads the counters while another process is still incrementing them one after the
    other, so a poll can hold drafts of a step whose tokens are not counted yet: up to the batch
    times the draft length on each counter."""
    running = [v for s in (snap, previous) if s is not None for v in s.running.values()]
    batch = max(running, default=0.0)
    k = snap.configured_k or 1
    return 2.0 * max(batch, 1.0) * (k + 1)


def _broken_engines(deltas: Mapping[SeriesKey, float], slack: float = 0.0) -> set[str]:
    """Engines whose deltas over one poll are impossible for one vLLM process (it restarted),
    beyond what one half-applied step can explain."""
    broken = set()
    engines = {key.series for key in deltas if key.counter == K_DRAFT_TOKENS}
    for engine in engines:
        tokens = deltas[SeriesKey(K_DRAFT_TOKENS, engine)]
        drafts = deltas.get(SeriesKey(K_DRAFTS, engine))
        accepted = deltas.get(SeriesKey(K_ACCEPTED, engine))
        if (
            tokens < -slack
            or (accepted is not None and accepted > tokens + slack)
            or (drafts is not None and drafts > tokens + slack)
        ):
            broken.add(engine)
            continue
        if drafts is not None and any(
            key.counter == K_POS and key.series == engine and d > drafts + slack for key, d in deltas.items()
        ):
            broken.add(engine)
    return broken
