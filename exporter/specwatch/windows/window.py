"""Rolling windows of route snapshots, with counter deltas that survive vLLM restarts.

Each ingested snapshot is folded into a reset-aware running total per series (the "mirror").
A changed `_created` timestamp is a restart (vLLM's counters are monotonic per process and
`_created` names the process), and a histogram resets as a whole. A value below its base (the
highest value seen since the process started) is a *dip*, not a restart, when the series'
`_created` is present and unchanged, or, without `_created`, when the drop is within measurement
noise (`dip_tolerance`). Only a larger drop without `_created` is a restart (Prometheus's rule: the
new value is the increase).

A poll is one unit per engine: when any counter of an engine dips, that engine's whole poll is held
back (every counter of it adds 0 and keeps its base), so no window pairs its drafts of one moment
with its accepted tokens of another. The next poll settles it: back at or above the bases, it counts
the whole interval from them (nothing lost, nothing twice); still below them but at or above the
held values, the engine really went backwards (a data-parallel engine's sum losing a rank's part)
and it counts from the held values on, losing one poll of that engine rather than everything up to
its old high-water mark. A window's increase is then the difference of two mirrors, so evaluating a 5m window
costs O(series), not O(series x snapshots).

The route's exported counters are `RouteWindow.mirror`: this poll's deltas summed over the
route's series, added up and never taken back, so they cannot decrease when an engine departs,
a histogram is re-laid out, or a reload rebuilds the pipeline (`RouteWindow.adopt`).
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise

from specwatch.engines.series import Counter, Gauge, RouteSnapshot, SeriesKey, reset_group

#: Without `_created` a drop is a restart only when it is beyond measurement noise. A restarted
#: process counts from 0, so its first value is what it counted since it started (about one poll's
#: increase); it lands within DIP_RELATIVE of the old value only if the old process counted its
#: whole lifetime in about one poll, i.e. lived one poll. Noise, on the other hand, is tiny relative
#: to a lifetime value: a float `_sum` summed in another order across processes moves by a few ULP
#: (n processes: <= n * 2**-53 relative, so 1e-3 covers any realistic n), and a count can read one
#: below (DIP_COUNTS, whatever the value). The two errors are not symmetric: a restart taken for a
#: dip loses at most about one poll's increase, once; a dip taken for a restart adds the series'
#: whole lifetime to one poll (alpha 0.8 read as 0.1, a verdict flipped). Hence a tolerance that
#: clamps all noise and misses only restarts of one-poll-old processes.
DIP_RELATIVE = 1e-3
DIP_COUNTS = 1.0


def dip_tolerance(key: SeriesKey, base: float) -> float:
    """The largest drop below `base` that a series without `_created` may show and still be the same
    process: DIP_RELATIVE of its value, and at least DIP_COUNTS for a count (not for `_sum`, in seconds)."""
    return max(DIP_RELATIVE * base, 0.0 if key.counter == Counter.ITL_SUM else DIP_COUNTS)


#: Key of a route-level mirror: (canonical counter, sub), summed over the route's engines and models.
MirrorKey = tuple[str, float | None]


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
        # Lists, not deques: a view is a slice (a copy in C), where a deque's islice walks from the
        # oldest entry to the window's start; the few pruned from the front each poll are one
        # memmove of a few hundred pointers.
        self.entries: list[Entry] = []
        self._times: list[float] = []  # entries' times, for view()'s bisection in C
        self._raw: dict[SeriesKey, float] = {}
        self._created: dict[SeriesKey, float] = {}
        self._le_sets: dict[str, frozenset[float]] = {}  # ITL bucket bounds per series
        self.totals: dict[SeriesKey, float] = {}
        # The route's exported counters: per (counter, sub), every poll's deltas summed over its
        # series. Only ever added to, so they never decrease (an engine departing takes nothing back).
        self.mirror: dict[MirrorKey, float] = {}
        self._mirror_keys: dict[SeriesKey, MirrorKey] = {}  # each series' key in the mirror
        self.resets = 0
        self.dips = 0  # polls with a series below its base that was no restart (clamped)
        self.last_dips = 0  # such series in the last ingested poll
        # Per engine whose last poll was held back (a dip): the values it held then.
        self._held: dict[str, dict[SeriesKey, float]] = {}
        # Entries are in time order (ingest drops any snapshot not after the last) unless a time
        # was NaN, which compares false with everything: then view() looks at every entry.
        self._unordered = False

    def ingest(self, snap: RouteSnapshot) -> bool:
        """Fold a new snapshot in; return True when it showed a counter reset. `last_dips` is then
        the number of series that dipped below their base without a restart (clamped).

        What ingest_plain does, taking a shorter way for the usual poll: the same series in the
        same order as the last one, none below its base, every `_created` unchanged. Then nothing
        resets, dips or is held, and each delta is the value less its base."""
        raw, counters, created = self._raw, snap.counters, snap.created
        if not (raw and created and len(counters) == len(raw)) or (self.entries and snap.t <= self.entries[-1].t):
            return self.ingest_plain(snap)
        keys = tuple(counters)
        if keys != tuple(raw) or any(map(operator.lt, counters.values(), raw.values())):
            return self.ingest_plain(snap)
        known = self._created
        for group, stamp in created.items():
            if known.get(group, stamp) != stamp:
                return self.ingest_plain(snap)
        self._unordered = self._unordered or math.isnan(snap.t)
        totals, mirror, mirror_keys = self.totals, self.mirror, self._mirror_keys
        for key, delta in zip(keys, map(operator.sub, counters.values(), raw.values()), strict=True):
            totals[key] = totals.get(key, 0.0) + delta
            if delta:
                mirror[mirror_keys[key]] += delta  # deltas are >= 0: it never goes down
        self._held.clear()  # none dipped: a held engine's poll is settled by this one's deltas
        self._raw = dict(counters)
        known.update(created)
        self.entries.append(Entry(snap.t, dict(totals), snap))
        self._times.append(snap.t)
        self._prune(snap.t)
        self.last_dips = 0
        return False

    def ingest_plain(self, snap: RouteSnapshot) -> bool:
        """ingest(), every step taken (the reference its shortcut is tested against)."""
        if self.entries and snap.t <= self.entries[-1].t:
            return False  # out-of-order or duplicate time: ignore rather than corrupt deltas
        self._unordered = self._unordered or math.isnan(snap.t)
        reset_groups: set[SeriesKey] = set()
        raw = self._raw  # per series: its base, the highest value seen since its process started
        counters = snap.counters
        below: list[SeriesKey] = []  # series below their base: a dip or a restart, told apart below
        # Deltas as if nothing reset (the usual poll), found in the same pass as the drops; a
        # reset below overwrites those of its groups.
        deltas: dict[SeriesKey, float] = {}
        if raw:
            for key, value in counters.items():
                previous = raw.get(key)
                if previous is None:
                    deltas[key] = 0.0  # first sighting: its history before we started is not ours to count
                else:
                    if value < previous:
                        below.append(key)
                    deltas[key] = value - previous
            for group, created in snap.created.items():
                previous_created = self._created.get(group)
                if previous_created is not None and created != previous_created:
                    reset_groups.add(group)
        else:
            deltas = dict.fromkeys(counters, 0.0)
        # A histogram whose bucket layout changed restarts as a whole, and so does its mirror. The
        # same series as the last poll have the same layouts (each was recorded from that poll).
        if counters.keys() != raw.keys():
            self._relayout(counters, reset_groups)
            self._seed_mirror(counters)
        dips = self._classify_drops(below, snap, reset_groups) if below else []
        for key in dips:
            deltas[key] = 0.0  # held back with its engine's whole poll below (_hold_dipped)
        if reset_groups:
            for key, value in counters.items():
                if reset_group(key) in reset_groups:
                    deltas[key] = value
        if raw and not snap.created:
            # Without _created (multiprocess vLLM) a restart can hide: counters that grew past their
            # old values within one poll show no drop. The interval then breaks vLLM's identities
            # (accepted <= draft tokens, drafts <= draft tokens, accepted at a position <= drafts), so
            # the engine restarted: count its values from 0, all together, like a visible reset.
            broken = _broken_engines(deltas, _one_step_slack(snap, self.latest))
            for engine in broken:
                for key, value in counters.items():
                    if key.series == engine:
                        reset_groups.add(reset_group(key))
                        deltas[key] = value
            if broken:
                dips = [key for key in dips if key.series not in broken]
        base = dict(counters)
        self._hold_dipped(dips, counters, deltas, base, reset_groups)
        totals = self.totals
        mirror = self.mirror
        mirror_keys = self._mirror_keys
        for key, delta in deltas.items():
            totals[key] = totals.get(key, 0.0) + delta
            if delta:
                mirror[mirror_keys[key]] += delta  # deltas are >= 0: it never goes down
        self._raw = base
        self._created.update(snap.created)
        self.entries.append(Entry(snap.t, dict(totals), snap))
        self._times.append(snap.t)
        self._prune(snap.t)
        self.last_dips = len(dips)
        if dips:
            self.dips += 1
        if reset_groups:
            self.resets += 1
        return bool(reset_groups)

    def _classify_drops(
        self, below: list[SeriesKey], snap: RouteSnapshot, reset_groups: set[SeriesKey]
    ) -> list[SeriesKey]:
        """Of the series below their base, return the dips (clamped); add the restarts to reset_groups.
        With the same `_created` as the last poll the process is the same, so any drop is a dip;
        without it, a drop within dip_tolerance is. A dip in a group that restarts is no dip."""
        raw, counters, created = self._raw, snap.counters, snap.created
        dips, unstamped = [], []
        for key in below:
            group = reset_group(key)
            if group in reset_groups:
                continue
            stamp = created.get(group)
            if stamp is not None and stamp == self._created.get(group):
                dips.append(key)  # the same process: any drop is a dip
            elif stamp is None and raw[key] - counters[key] <= dip_tolerance(key, raw[key]):
                unstamped.append(key)
            else:
                reset_groups.add(group)
        # Without `_created`, a restart is the whole process's: once one counter of an engine drops
        # past the tolerance, every drop of that engine in this poll is the same restart (a small
        # counter's one-count drop there is a restart, not noise).
        restarted = {group.series for group in reset_groups}
        for key in unstamped:
            if key.series in restarted:
                reset_groups.add(reset_group(key))
            else:
                dips.append(key)
        return [key for key in dips if reset_group(key) not in reset_groups]

    def _hold_dipped(
        self,
        dips: list[SeriesKey],
        counters: Mapping[SeriesKey, float],
        deltas: dict[SeriesKey, float],
        base: dict[SeriesKey, float],
        reset_groups: set[SeriesKey],
    ) -> None:
        """Hold back the poll of every engine with a dip, as a whole (module docstring): its deltas
        become 0 and its bases stay, unless it went backwards for good at the held poll (then it
        counts from the held values). An engine that restarted in this poll keeps its reset deltas,
        its dips in other groups add 0."""
        raw, held = self._raw, self._held
        restarted = {group.series for group in reset_groups}
        dipped = {key.series for key in dips}
        for key in dips:
            if key.series in restarted:
                deltas[key], base[key] = 0.0, raw[key]  # the high-water mark stays: counted once
        for series in [s for s in held if s not in dipped]:
            del held[series]  # back at or above its bases: this poll's deltas span the held one too
        for series in dipped - restarted:
            keys = [key for key in counters if key.series == series]
            before = held.pop(series, None)
            if before is not None and all(counters[k] >= before.get(k, counters[k]) for k in keys):
                # Below its bases twice, and moving on from the held values: it went backwards then.
                for key in keys:
                    deltas[key] = counters[key] - before.get(key, counters[key])
                continue
            held[series] = {key: counters[key] for key in keys}
            for key in keys:
                deltas[key] = 0.0
                if key in raw:
                    base[key] = raw[key]

    def _seed_mirror(self, counters: Mapping[SeriesKey, float]) -> None:
        """Give the route's mirror every (counter, sub) of the poll, at 0; but a bucket bound it has not
        had yet starts at the mirror of the next lower bound (0 below all), so the exported
        histogram stays cumulative when a layout changes."""
        mirror = self.mirror
        new = set()
        for key in counters:
            mkey = self._mirror_keys[key] = (key[0], key[2])
            if mkey not in mirror:
                if key[0] == Counter.ITL_BUCKET:
                    new.add(key.le)
                else:
                    mirror[mkey] = 0.0
        if not new:
            return
        known = sorted(
            (float(sub), v) for (kind, sub), v in mirror.items() if kind == Counter.ITL_BUCKET and sub is not None
        )
        for le in sorted(new):
            at = bisect_left(known, (float(le), -math.inf))
            value = known[at - 1][1] if at else 0.0
            mirror[(Counter.ITL_BUCKET, le)] = value
            known.insert(at, (float(le), value))

    def adopt(self, old: RouteWindow, *, baseline: bool) -> None:
        """Continue the exported mirrors of `old` (the same route before a reload rebuilt the
        pipeline), so they never go down. baseline: the route reads the same series of the same
        target (same URL and matchers), so its bases are kept too and the first poll after the
        reload counts its real increase; else every series counts from its first sighting."""
        self.mirror = dict(old.mirror)
        self._mirror_keys = dict(old._mirror_keys)
        if baseline:
            self._raw = dict(old._raw)
            self._created = dict(old._created)
            self._le_sets = dict(old._le_sets)

    def _relayout(self, counters: Mapping[SeriesKey, float], reset_groups: set[SeriesKey]) -> None:
        """Record each engine's ITL bucket bounds; a changed layout resets that histogram."""
        le_sets: dict[str, set[float]] = {}
        for key in counters:
            if key.counter == Counter.ITL_BUCKET:
                le_sets.setdefault(key.series, set()).add(key.le)
        for engine, les in le_sets.items():
            frozen = frozenset(les)
            previous_les = self._le_sets.get(engine)
            if previous_les is not None and previous_les != frozen:
                group = SeriesKey(Counter.ITL, engine)
                reset_groups.add(group)
                for key in [k for k in self.totals if reset_group(k) == group]:
                    del self.totals[key]
            self._le_sets[engine] = frozen

    def forget(self, series: Collection[str]) -> None:
        """Drop every total, last value, `_created` and bucket layout of these series (engines gone
        from the payload, past the pipeline's bound on engines per route). Entries already kept
        hold them until they leave the horizon; a series seen again starts anew (first sighting)."""
        gone = set(series)
        for held in (self.totals, self._raw, self._created, self._mirror_keys):
            for key in [k for k in held if k.series in gone]:
                del held[key]
        for name in gone:
            self._le_sets.pop(name, None)
            self._held.pop(name, None)

    def _prune(self, now: float) -> None:
        entries, cutoff = self.entries, now - self.horizon
        gone = 0
        while gone < len(entries) and entries[gone].t < cutoff:
            gone += 1
        if gone:
            del entries[:gone]
            del self._times[:gone]

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
            chosen = tuple(entries[start:end])
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
    engines = {key.series for key in deltas if key.counter == Counter.DRAFT_TOKENS}
    for engine in engines:
        tokens = deltas[SeriesKey(Counter.DRAFT_TOKENS, engine)]
        drafts = deltas.get(SeriesKey(Counter.DRAFTS, engine))
        accepted = deltas.get(SeriesKey(Counter.ACCEPTED, engine))
        if (
            tokens < -slack
            or (accepted is not None and accepted > tokens + slack)
            or (drafts is not None and drafts > tokens + slack)
        ):
            broken.add(engine)
            continue
        if drafts is not None and any(
            key.counter == Counter.POS and key.series == engine and d > drafts + slack for key, d in deltas.items()
        ):
            broken.add(engine)
    return broken


def increases_by_counter(increases: Mapping[SeriesKey, float], counters: Iterable[str]) -> dict[str, float]:
    """A window's increases summed over series and subs, for each of ``counters``."""
    out = dict.fromkeys(counters, 0.0)
    for key, delta in increases.items():
        if key.counter in out:
            out[key.counter] += delta
    return out


#: A gauge pair may disagree by this much (relative) and still be the same engine's estimate.
GAUGE_AGREEMENT = 0.25


def implausible(snap: RouteSnapshot, stated_k: int | None = None) -> str | None:
    """Why one poll's values cannot be one engine's at one moment, or None. Checked on the
    poll as read, before any window takes it: an engine's counters obey vLLM's identities over its
    whole life (accepted at a position <= accepted at the position before; accepted at a position
    <= drafted there; accepted <= K x drafts, i.e. tau <= K + 1), within one half-applied step
    (multiprocess); an engine's gauges agree with each other (tau = 1 + K x alpha: an acceptance
    rate well above 0 with an acceptance length of 1 is no estimate, nor a length above K + 1).

    The same answer as `implausible_plain`, with the comparisons each series' keys call for worked
    out once per layout of keys (`_identities`; a target sends the same keys every poll)."""
    gauges = snap.gauges
    k_gauge = gauges.get(Gauge.DRAFT_LENGTH)
    k = k_gauge if k_gauge is not None and k_gauge >= 1 else (snap.configured_k or stated_k)
    why = _gauges_disagree(gauges, k)
    counters = snap.counters
    identities = _identities(tuple(counters)) if why is None else None
    if identities is None:
        return why if why is not None or not counters else implausible_plain(snap, stated_k)
    if not identities:
        return None
    values = list(counters.values())
    slack = _one_step_slack(snap, None)
    for series, positions, drafted_at, accepted_at, drafts_at in identities:
        # beyond(value, bound) of implausible_plain, written out: value > bound + max(slack, rel x bound)
        for (i, before_at), (j, at) in pairwise(positions):
            before, value = values[before_at], values[at]
            if j == i + 1 and value > before + max(slack, DIP_RELATIVE * before):
                return f"engine {series}: {value:g} accepted at position {j} above {before:g} at position {i}"
        for (position, at), drafted_index in zip(positions, drafted_at, strict=True):
            if drafted_index >= 0:
                value, drafted = values[at], values[drafted_index]
                if value > drafted + max(slack, DIP_RELATIVE * drafted):
                    return f"engine {series}: {value:g} accepted at position {position} of {drafted:g} drafted there"
        k_counted = len(positions) or k
        if accepted_at >= 0 and drafts_at >= 0 and k_counted:
            accepted, bound = values[accepted_at], k_counted * values[drafts_at]
            if accepted > bound + max(slack, DIP_RELATIVE * bound):
                drafts = values[drafts_at]
                return (
                    f"engine {series}: {accepted:g} accepted in {drafts:g} drafts of K={k_counted:g} (tau above K + 1)"
                )
    return None


#: Per series (sorted): its name, its POS keys' (position, index in the values) by position, the
#: index of the POS_DRAFTS key at each of those positions (-1: none), of ACCEPTED and of DRAFTS.
_SeriesIdentities = tuple[str, tuple[tuple[int, int], ...], tuple[int, ...], int, int]


#: The layouts _identities remembers: about one per route, bounded in number and in the keys they
#: keep alive together (a target that sends new series every poll must not grow the process).
IDENTITIES_CACHE_SIZE = 64
IDENTITIES_CACHE_KEYS = 16_384
_identities_cache: dict[tuple[SeriesKey, ...], tuple[_SeriesIdentities, ...] | None] = {}
_UNKNOWN = object()


def _identities(keys: tuple[SeriesKey, ...]) -> tuple[_SeriesIdentities, ...] | None:
    """_identities_of(keys), remembered (the oldest layouts forgotten first past the bounds)."""
    cache = _identities_cache
    found = cache.get(keys, _UNKNOWN)
    if found is not _UNKNOWN:
        return found  # type: ignore[return-value]
    found = cache[keys] = _identities_of(keys)
    while len(cache) > IDENTITIES_CACHE_SIZE or sum(map(len, cache)) > IDENTITIES_CACHE_KEYS:
        del cache[next(iter(cache))]
        if not cache:
            break
    return found


def _identities_of(keys: tuple[SeriesKey, ...]) -> tuple[_SeriesIdentities, ...] | None:
    """What implausible() compares for a poll with these counter keys, in implausible_plain's
    order: () when no key is checked, None when the plain version must decide (two keys of one
    series at the same position, which it orders by value)."""
    if not any(key.counter in (Counter.POS, Counter.ACCEPTED) for key in keys):
        return ()
    index = {key: at for at, key in enumerate(keys)}
    out = []
    for series in sorted({key.series for key in keys}):
        positions = sorted(
            (key.position, at) for at, key in enumerate(keys) if key.series == series and key.counter == Counter.POS
        )
        if len({position for position, _ in positions}) != len(positions):
            return None
        drafted_at = tuple(index.get(SeriesKey(Counter.POS_DRAFTS, series, position), -1) for position, _ in positions)
        accepted_at = index.get(SeriesKey(Counter.ACCEPTED, series), -1)
        drafts_at = index.get(SeriesKey(Counter.DRAFTS, series), -1)
        out.append((series, tuple(positions), drafted_at, accepted_at, drafts_at))
    return tuple(out)


def implausible_plain(snap: RouteSnapshot, stated_k: int | None = None) -> str | None:
    """implausible(), comparing key by key (the reference its shortcut is tested against)."""
    gauges = snap.gauges
    k_gauge = gauges.get(Gauge.DRAFT_LENGTH)
    k = k_gauge if k_gauge is not None and k_gauge >= 1 else (snap.configured_k or stated_k)
    why = _gauges_disagree(gauges, k)
    if why is not None or not any(key.counter in (Counter.POS, Counter.ACCEPTED) for key in snap.counters):
        return why
    slack = _one_step_slack(snap, None)
    for series in sorted({key.series for key in snap.counters}):
        why = _counts_impossible(snap.counters, series, k, slack)
        if why is not None:
            return f"engine {series}: {why}"
    return None


def _gauges_disagree(gauges: Mapping[str, float], k: float | None) -> str | None:
    length, rate = gauges.get(Gauge.ACCEPTANCE_LENGTH), gauges.get(Gauge.ACCEPTANCE_RATE)
    if length is None or length < 1:  # SGLang's unset value is 0
        return None
    if k is not None and length > (k + 1) * (1 + 1e-6):
        return f"acceptance length {length:g} above K + 1 = {k + 1:g}"
    if rate is not None and 0 < rate <= 1 and length - 1 < rate * (1 - GAUGE_AGREEMENT) - 0.05:
        return f"acceptance rate {rate:g} with acceptance length {length:g} (tau = 1 + K x alpha)"
    return None


def _counts_impossible(counters: Mapping[SeriesKey, float], series: str, k: float | None, slack: float) -> str | None:
    def beyond(value: float, bound: float) -> bool:
        return value > bound + max(slack, DIP_RELATIVE * bound)

    positions = sorted(
        (key.position, value) for key, value in counters.items() if key.series == series and key.counter == Counter.POS
    )
    for (i, before), (j, value) in pairwise(positions):
        if j == i + 1 and beyond(value, before):
            return f"{value:g} accepted at position {j} above {before:g} at position {i}"
    for position, value in positions:
        drafted = counters.get(SeriesKey(Counter.POS_DRAFTS, series, position))
        if drafted is not None and beyond(value, drafted):
            return f"{value:g} accepted at position {position} of {drafted:g} drafted there"
    accepted = counters.get(SeriesKey(Counter.ACCEPTED, series))
    drafts = counters.get(SeriesKey(Counter.DRAFTS, series))
    k_counted = len(positions) or k
    if accepted is not None and drafts is not None and k_counted and beyond(accepted, k_counted * drafts):
        return f"{accepted:g} accepted in {drafts:g} drafts of K={k_counted:g} (tau above K + 1)"
    return None
