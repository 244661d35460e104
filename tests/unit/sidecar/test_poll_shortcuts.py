"""The per-poll shortcuts of the window and derive stages give exactly what the plain
computation gives: each is compared with the code it replaced (kept here as the reference) on the
real vLLM recording and on random sequences with resets, re-laid-out histograms, series that come
and go, and polls without `_created`."""

import math
import random
import re
from dataclasses import dataclass, field, replace

import pytest

from specwatch.config import from_mapping
from specwatch.config.cost_model import cost_model_from_config
from specwatch.engines import vllm
from specwatch.engines.grouping import Grouping
from specwatch.engines.series import Counter, RouteSnapshot, SeriesKey, reset_group
from specwatch.exposition.lastpoll import picker
from specwatch.exposition.syntax import line_finder
from specwatch.verdict.evaluation import evaluate_route, update_route_method
from specwatch.windows.derive import (
    SCHEMA_V0,
    WindowStats,
    _finite,
    _merged_buckets,
    _quantile,
    _ratio,
    _v0_acceptance,
    drafts_reaching_positions,
    position_rates,
    window_stats,
)
from specwatch.windows.window import Entry, RouteWindow, WindowView, _broken_engines, _one_step_slack
from support.counter_sequences import random_snapshots
from support.paths import fixture_path


def reference_position_rates(accepted_by_position, drafts, draft_tokens, *, variable_length, schedule_ks=None):
    """position_rates as the loop over n_i (drafts_reaching_positions) it shortcuts."""
    reached = drafts_reaching_positions(
        drafts,
        draft_tokens,
        len(accepted_by_position),
        variable_length=variable_length,
        schedule_ks=schedule_ks,
        accepted_by_position=accepted_by_position,
    )
    rates = []
    for accepted, n in zip(accepted_by_position, reached, strict=False):
        if n <= 0:
            break
        rates.append(min(accepted / n, 1.0))
    return tuple(rates)


class ReferenceWindow(RouteWindow):
    """RouteWindow with the ingest it had before the one-pass version (and the view scan)."""

    def view(self, now, width):
        found = reference_view(self, now, width)
        return None if found is None else WindowView(*found)

    def ingest(self, snap):
        """RouteWindow.ingest before the one-pass version: every step over every series."""
        if self.entries and snap.t <= self.entries[-1].t:
            return False  # out-of-order or duplicate time: ignore rather than corrupt deltas
        self._unordered = self._unordered or math.isnan(snap.t)
        reset_groups = set()
        raw = self._raw
        below = []
        if raw:
            for key, value in snap.counters.items():
                previous = raw.get(key)
                if previous is not None and value < previous:
                    below.append(key)
            for group, created in snap.created.items():
                previous = self._created.get(group)
                if previous is not None and created != previous:
                    reset_groups.add(group)
        # A histogram whose bucket layout changed restarts as a whole, and so does its mirror.
        le_sets = {}
        for key in snap.counters:
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
        # A drop is a dip (no restart) with the same _created, or without it within noise (0.1 %, one
        # count; the ITL sum only the 0.1 %); else it restarts its group (docs/architecture.md §3).
        # Without _created, once one counter of an engine restarted, its other drops are that restart.
        unstamped_small = []
        for key in below:
            group = reset_group(key)
            same_process = group in snap.created and snap.created[group] == self._created.get(group)
            noise = max(1e-3 * raw[key], 0.0 if key.counter == Counter.ITL_SUM else 1.0)
            if not same_process and raw[key] - snap.counters[key] > noise:
                reset_groups.add(group)
            elif not same_process and group not in snap.created:
                unstamped_small.append(key)
        restarted = {group.series for group in reset_groups}
        for key in unstamped_small:
            if key.series in restarted:
                reset_groups.add(reset_group(key))
        dips = [key for key in below if reset_group(key) not in reset_groups]
        deltas = {}
        for key, value in snap.counters.items():
            previous = raw.get(key)
            if reset_groups and reset_group(key) in reset_groups:
                deltas[key] = value
            elif previous is None:
                deltas[key] = 0.0  # first sighting: its history before we started is not ours to count
            elif key in dips:
                deltas[key] = 0.0
            else:
                deltas[key] = value - previous
        if raw and not snap.created:
            # Without _created (multiprocess vLLM) a restart can hide: counters that grew past their
            # old values within one poll show no drop. The interval then breaks vLLM's identities
            # (accepted <= draft tokens, drafts <= draft tokens, accepted at a position <= drafts), so
            # the engine restarted: count its values from 0, all together, like a visible reset.
            for engine in _broken_engines(deltas, _one_step_slack(snap, self.latest)):
                dips = [key for key in dips if key.series != engine]
                for key, value in snap.counters.items():
                    if key.series == engine:
                        reset_groups.add(reset_group(key))
                        deltas[key] = value
        # The route's mirror: every (counter, sub) seen, a new bucket bound from the next lower one.
        for key in sorted(snap.counters, key=lambda k: (k.counter, -math.inf if k.sub is None else k.sub)):
            mkey = (key.counter, key.sub)
            if mkey not in self.mirror:
                lower = [le for (c, le) in self.mirror if c == Counter.ITL_BUCKET == key.counter and le < key.sub]
                self.mirror[mkey] = self.mirror[(Counter.ITL_BUCKET, max(lower))] if lower else 0.0
        # A poll is one unit per engine: an engine with a dip (not restarting) is held back
        # whole (all its deltas 0, all its bases kept) unless, held the poll before, it moved on from
        # the held values everywhere (it went backwards then: count from those).
        new_raw = dict(snap.counters)
        held = getattr(self, "_plain_held", {})
        restarted = {group.series for group in reset_groups}
        dipped = {key.series for key in dips}
        for key in dips:
            if key.series in restarted:
                new_raw[key] = raw[key]
        for series in list(held):
            if series not in dipped:
                del held[series]
        for series in sorted(dipped - restarted):
            keys = [key for key in snap.counters if key.series == series]
            before = held.pop(series, None)
            if before is not None and all(snap.counters[k] >= before.get(k, snap.counters[k]) for k in keys):
                for key in keys:
                    deltas[key] = snap.counters[key] - before.get(key, snap.counters[key])
                continue
            held[series] = {key: snap.counters[key] for key in keys}
            for key in keys:
                deltas[key] = 0.0
                if key in raw:
                    new_raw[key] = raw[key]
        self._plain_held = held
        totals = self.totals
        for key, delta in deltas.items():
            totals[key] = totals.get(key, 0.0) + delta
            self.mirror[(key.counter, key.sub)] += delta
        self._raw = new_raw
        self._created.update(snap.created)
        self.entries.append(Entry(snap.t, dict(totals), snap))
        self._prune(snap.t)
        if reset_groups:
            self.resets += 1
        if dips:
            self.dips += 1
        return bool(reset_groups)

    def _prune(self, now: float) -> None:
        while self.entries and self.entries[0].t < now - self.horizon:
            del self.entries[0]


def reference_window_stats(view, route, window, now, *, configured_k_hint=None):
    """window_stats as it was: the window's values, then dataclasses.replace with V1's counters."""
    latest = view.last.snapshot
    drafts = draft_tokens = accepted = gen = itl_sum = 0.0
    itl_count_by_engine, steps_by_engine, pos, itl_buckets = {}, {}, {}, {}
    for key, delta in view.increases().items():
        kind = key[0]
        if kind == Counter.DRAFTS:
            drafts += delta
        elif kind == Counter.DRAFT_TOKENS:
            draft_tokens += delta
        elif kind == Counter.ACCEPTED:
            accepted += delta
        elif kind == Counter.POS:
            pos[key.position] = pos.get(key.position, 0.0) + delta
        elif kind == Counter.GEN:
            gen += delta
        elif kind == Counter.ITL_BUCKET:
            itl_buckets[key.le] = itl_buckets.get(key.le, 0.0) + delta
        elif kind == Counter.ITL_SUM:
            itl_sum += delta
        elif kind == Counter.ITL_COUNT:
            itl_count_by_engine[key[1]] = itl_count_by_engine.get(key[1], 0.0) + delta
        elif kind == Counter.STEPS:
            steps_by_engine[key[1]] = steps_by_engine.get(key[1], 0.0) + delta
    draft_coverage = None
    request_steps = sum(itl_count_by_engine.values())
    if latest.spec_present and drafts > 0 and request_steps > 0 and latest.schema != SCHEMA_V0:
        draft_coverage = min(drafts / request_steps, 1.0)
    batch_size = None
    per_engine = [itl_count_by_engine.get(e, 0.0) / s for e, s in steps_by_engine.items() if s > 0]
    if per_engine:
        batch_size = sum(per_engine) / len(per_engine)
    else:
        gauges = [
            sum(e.snapshot.running.values()) / len(e.snapshot.running) for e in view.entries if e.snapshot.running
        ]
        if gauges:
            batch_size = sum(gauges) / len(gauges)
    itl_p50 = itl_p99 = itl_per_token = None
    if itl_buckets:
        buckets = sorted(itl_buckets.items())
        if buckets[-1][1] > 0:
            merged = _merged_buckets(buckets)
            itl_p50 = _finite(_quantile(0.5, merged))
            itl_p99 = _finite(_quantile(0.99, merged))
    if gen > 0 and (itl_count_by_engine or itl_sum):
        itl_per_token = itl_sum / gen
    measured = WindowStats(
        route=route,
        window=window,
        t=now,
        samples=view.samples,
        span_seconds=view.span_seconds,
        spec_present=latest.spec_present,
        configured_k=latest.configured_k or configured_k_hint,
        batch_size=batch_size,
        itl_p50_seconds=itl_p50,
        itl_p99_seconds=itl_p99,
        itl_per_token_mean_seconds=itl_per_token,
        generation_tokens=gen,
        draft_coverage=draft_coverage,
        schema=latest.schema,
        engines=max(len(latest.engines), 1),
    )
    if latest.schema == SCHEMA_V0:
        return _v0_acceptance(measured, latest, configured_k_hint)
    if not latest.spec_present:
        return measured
    alpha = _ratio(accepted, draft_tokens)
    consistent = alpha is None or alpha <= 1.0
    if not (drafts > 0 and draft_tokens > 0 and consistent):  # drafts without draft tokens: no tau, no K
        return replace(
            measured,
            drafts=drafts,
            draft_tokens=draft_tokens,
            accepted_tokens=accepted,
            acceptance_rate=alpha if consistent else None,
        )
    k = latest.configured_k
    by_position = tuple(pos.get(i, 0.0) for i in range(k)) if k else None
    return replace(
        measured,
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        acceptance_rate=alpha,
        mean_acceptance_length=1.0 + accepted / drafts,
        draft_length=draft_tokens / drafts,
        position_rates=(
            reference_position_rates(by_position, drafts, draft_tokens, variable_length=True) if by_position else None
        ),
        accepted_by_position=by_position,
    )


def _same(a, b):
    return repr(a) == repr(b)  # NaN equals NaN, 0.0 differs from -0.0


ACCEPTED_GRID = [(), (0.0,), (5.0, 3.0), (900.0, 700.0, 20.0, 0.0), (1200.0, math.nan, 3.0), (10.0, 20.0, 30.0)]


@pytest.mark.parametrize("accepted_by_position", ACCEPTED_GRID)
def test_position_rates_equal_the_loop_over_the_drafts_reaching_each_position(accepted_by_position):
    for drafts in (-1.0, 0.0, 0.5, 10.0, 1000.0, math.nan):
        for tokens_per_draft in (0.0, 0.5, 1.0, 1.7, 2.0, 2.9999999, 3.0, 4.0, math.nan):
            for variable_length in (True, False):
                for schedule_ks in (None, (), (1, 3), (4, 2, 0), (8,)):
                    args = (accepted_by_position, drafts, drafts * tokens_per_draft)
                    kwargs = {"variable_length": variable_length, "schedule_ks": schedule_ks}
                    assert _same(position_rates(*args, **kwargs), reference_position_rates(*args, **kwargs))


def _window_state(w):
    return (w.totals, [(e.t, e.totals) for e in w.entries], w.resets, w._le_sets, w._raw, w._created, w.dips, w.mirror)


def test_window_ingest_and_window_stats_equal_the_plain_computation_on_random_sequences():
    rng = random.Random(17)
    for _ in range(150):
        window, reference = RouteWindow(300.0), ReferenceWindow(300.0)
        for snap in random_snapshots(rng, rng.randint(2, 40), drafted_by_position=False):
            assert window.ingest(snap) == reference.ingest(snap)
            assert _window_state(window) == _window_state(reference)
            for width in (60.0, 300.0):
                view, reference_view = window.view(snap.t, width), reference.view(snap.t, width)
                assert (view is None) == (reference_view is None)
                if view is not None:
                    got = window_stats(view, "r", "w", snap.t, configured_k_hint=4)
                    assert _same(got, reference_window_stats(reference_view, "r", "w", snap.t, configured_k_hint=4))


def test_window_ingest_and_window_stats_equal_the_plain_computation_on_the_real_recording():
    grouping = Grouping()
    window, reference = RouteWindow(300.0), ReferenceWindow(300.0)
    payloads = sorted(fixture_path("vllm-cpu-real").glob("*.prom"))
    assert payloads
    for i, path in enumerate(payloads):
        t = 1_795_952_400.0 + 5.0 * i
        for snap in grouping.parse(path.read_text(), t=t, target="vllm"):
            assert window.ingest(snap) == reference.ingest(snap)
            assert _window_state(window) == _window_state(reference)
            for width in (60.0, 300.0):
                view, reference_view = window.view(t, width), reference.view(t, width)
                if view is not None:
                    assert _same(window_stats(view, "r", "1m", t), reference_window_stats(reference_view, "r", "1m", t))


def reference_merged_buckets(buckets):
    """_merged_buckets with ensureMonotonic written as max(), as it was."""
    merged = []
    for bound, count in sorted(buckets):
        if merged and merged[-1][0] == bound:
            merged[-1][1] += count
        else:
            merged.append([bound, count])
    if len(merged) < 2 or not math.isinf(merged[-1][0]) or merged[-1][0] < 0:
        return None
    highest = merged[0][1]
    for item in merged:
        item[1] = max(item[1], highest)
        highest = item[1]
    observations = merged[-1][1]
    if observations == 0 or math.isnan(observations):
        return None
    return merged


def test_merged_buckets_equal_the_max_form_with_dips_ties_nans_and_signed_zeros():
    rng = random.Random(5)
    counts = (0.0, -0.0, 1.0, 2.0, 2.0, 3.5, math.nan, 7.0, 1e300)
    bounds = (0.0, -0.0, 0.01, 0.01, 0.1, 1.0, math.inf, math.inf)
    for _ in range(3000):
        buckets = [(rng.choice(bounds), rng.choice(counts)) for _ in range(rng.randint(0, 6))]
        assert _same(_merged_buckets(buckets), reference_merged_buckets(buckets))


def reference_view(window, now, width):
    """RouteWindow.view as the scan it was: newest first, stop at the window's start."""
    lo = now - width
    if window._unordered:
        chosen = [e for e in window.entries if lo <= e.t <= now]
    else:
        chosen = []
        for entry in reversed(window.entries):
            if entry.t < lo:
                break
            if entry.t <= now:
                chosen.append(entry)
        chosen.reverse()
    return None if len(chosen) < 2 else (chosen[0], chosen[-1], tuple(chosen))


def test_window_views_by_bisection_equal_the_scan_for_any_now_and_width():
    rng = random.Random(3)
    for _ in range(300):
        window = RouteWindow(rng.choice((30.0, 300.0)))
        t = 1000.0
        for _ in range(rng.randint(0, 30)):
            t += rng.choice((0.5, 2.0, 5.0, 60.0))
            window.ingest(RouteSnapshot(t, "vllm", "r", "m", "v1", True, ("0",), None, {}, {}))
            if rng.random() < 0.02:
                window.ingest(RouteSnapshot(math.nan, "vllm", "r", "m", "v1", True, ("0",), None, {}, {}))
            for now in (t, t - 3.0, t + 7.0, t - 200.0, math.nan, math.inf):
                for width in (0.0, 1.0, 5.0, 59.9, 60.0, 300.0, -5.0, math.nan, math.inf):
                    view = window.view(now, width)
                    got = None if view is None else (view.first, view.last, view.entries)
                    assert got == reference_view(window, now, width)


@pytest.mark.parametrize("positions", [(), (3,), (0, 2), (5, 1, 1, 4), tuple(range(40))])
def test_a_picker_selects_exactly_what_the_position_loop_selects(positions):
    items = [float(i) * 1.5 for i in range(40)]
    assert picker(positions)(items) == tuple([items[i] for i in positions])
    assert type(picker(positions)(items)) is tuple


@dataclass
class _Memory:
    method: str = "auto:unknown"
    verdicts: dict = field(default_factory=dict)
    advice: dict = field(default_factory=dict)


def test_evaluate_route_given_the_resolved_method_equals_resolving_it_itself():
    """The pipeline resolves the route's method before learning and hands it to evaluate_route,
    which otherwise resolves it again (update_route_method is idempotent)."""
    config = from_mapping({"poll_interval": "2s", "windows": ["1m", "5m"], "log": {"level": "warning"}})
    cost_model = cost_model_from_config(config)
    grouping, window = Grouping(), RouteWindow(300.0)
    given, resolving = _Memory(), _Memory()
    for i, path in enumerate(sorted(fixture_path("vllm-cpu-real").glob("*.prom"))):
        t = 1_795_952_400.0 + 2.0 * i
        for snap in grouping.parse(path.read_text(), t=t, target="vllm"):
            window.ingest(snap)
        windows = []
        for width, label in zip(config.windows, config.window_labels, strict=True):
            view = window.view(t, width)
            if view is not None:
                windows.append((width, label, view, window_stats(view, "r", label, t)))
        method = update_route_method(config, given, windows, None)
        a = evaluate_route(config, cost_model, None, given, windows, t, fresh=True, method=method)
        b = evaluate_route(config, cost_model, None, resolving, windows, t, fresh=True)
        assert _same(a, b)
        assert (given.method, given.verdicts, given.advice) == (resolving.method, resolving.verdicts, resolving.advice)
    assert given.method.startswith("auto:") and given.method != "auto:unknown"  # a drafter was inferred


class _HalvedView(WindowView):
    """A view class with its own increases(), as fleet mode has."""

    def increases(self):
        return {key: value / 2 for key, value in super().increases().items()}


def test_window_stats_reads_a_view_class_with_its_own_increases_through_them():
    rng = random.Random(11)
    for _ in range(40):
        window = RouteWindow(300.0)
        for snap in random_snapshots(rng, rng.randint(3, 20), drafted_by_position=False):
            window.ingest(snap)
            view = window.view(snap.t, 300.0)
            if view is not None:
                halved = _HalvedView(view.first, view.last, view.entries)
                got = window_stats(halved, "r", "5m", snap.t)
                assert _same(got, reference_window_stats(halved, "r", "5m", snap.t))


def _unguarded(pattern):
    """The line finder's pattern without its leading guard (the lookahead its branches imply)."""
    source = pattern.pattern
    assert source.startswith("\\n(?=")
    return re.compile("\\n" + source[source.index(")(?:") + 1 :])


@pytest.mark.parametrize(
    "prefixes", [(), ("a",), ("ab", "abc"), ("x_1", "y_2"), tuple(sorted(vllm.VLLM.families))], ids=str
)
def test_the_line_finders_guard_changes_no_match(prefixes):
    type_names = (*prefixes, "t_total")
    guarded = line_finder(prefixes, type_names)
    unguarded = _unguarded(guarded)
    rng = random.Random(9)
    texts = [path.read_text() for path in sorted(fixture_path("vllm-cpu-real").glob("*.prom"))[:5]]
    pieces = [
        *(f'{p}{{a="1"}} 2' for p in prefixes),
        *(f"{p}_total 3 123" for p in prefixes),
        *(f"# TYPE {p} counter" for p in type_names),
        "# TYPE  x  gauge  extra",
        "# TYPE",
        "# HELP a b",
        "ab",
        "xy_1 4",
        "",
        " a 1",
        "vllm:spec 1",
    ]
    for _ in range(300):
        texts.append("\n".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))))
    for text in texts:
        assert guarded.findall(text) == unguarded.findall(text)
