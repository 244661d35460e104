"""The grouped PromQL that fleet mode evaluates: a constant number of queries per poll.

One query per window returns, for every replica at once, each counter's increase over the window
grouped by the replica labels + model_name + engine (+ position, + le), tagged with a
`specwatch_family` label and the `specwatch_engine` whose names it read (every engine of
engines/registry.py is asked, by the names its EngineSchema lists); one more query returns each
replica's newest sample time. The count is len(windows) + 1 whatever the number of replicas,
models, data-parallel engines or serving engines. A counter source's label filter (`select`) is a
matcher of its selector; an engine whose acceptance is gauges only (SGLang) adds its gauge means,
computed in PromQL as windows/gauges.py computes them (_gauge_parts; docs/engines.md lists where
PromQL cannot match the sidecar exactly). Those parts give the same in Prometheus 2.x and 3.x:
idelta reads the last two samples of its range whether or not the range holds its left end, and
the subquery's range starts half a step away from its points.

Counter increase. The sidecar's window increase is the plain difference between the first and the
last sample inside [now - w, now] (reset-aware). `increase()` is not that: it extrapolates the
difference to the window edges (by up to 1.1 average scrape intervals on each side, or half an
interval past a gap), so at w = 5m and a 30s scrape it reports ~10/9 of the counted tokens, and
its "do not extrapolate below zero" clamp differs per series right after a counter starts. The
factor cancels in alpha, tau, K, p_i, the batch and the ITL quantiles (ratios of counters scraped
together), but not in the min_drafts guard or the exported window draft count. So a series with
no reset in the window is read exactly as the sidecar reads it, max_over_time − min_over_time of a
monotonic counter; only a series that reset inside the window falls back to increase()
(Prometheus's reset rule: a drop restarts from 0). Lookback: `timestamp()` of the running gauge
is the newest sample at or before `now` within the query lookback (5m by default) and disappears
at once when Prometheus wrote a staleness marker (a failed scrape, a vanished target).
Step alignment: a range query evaluates exactly at start + n·step, so backtest windows are the
same closed intervals the sidecar uses. Prometheus 2.x range selectors are closed at both ends,
as the sidecar's window; Prometheus 3.x excludes a sample exactly at now − w (with aligned
timestamps, one sample fewer than the sidecar).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from specwatch.config import format_duration
from specwatch.engines import registry
from specwatch.engines.schema import EngineSchema
from specwatch.engines.series import POSITION_COUNTERS, Counter
from specwatch.windows.gauges import BATCH, PLAUSIBLE

FAMILY_LABEL = "specwatch_family"
SCHEMA_LABEL = "specwatch_schema"
ENGINE_LABEL = "specwatch_engine"  # the EngineSchema.name whose series a part reads

# The family tags of the answer's series.
DRAFTS = "drafts"
DRAFT_TOKENS = "draft_tokens"
ACCEPTED = "accepted"
ACCEPTED_PER_POS = "accepted_per_pos"
DRAFTED_PER_POS = "drafted_per_pos"
GENERATION = "generation"
ITL_BUCKET = "itl_bucket"
ITL_SUM = "itl_sum"
ITL_COUNT = "itl_count"
STEPS = "steps"
RUNNING_MEAN = "running_mean"
SAMPLES = "samples"
GAUGE_PREFIX = "gauge_"  # + a Gauge (or BATCH): a gauge-only engine's window mean over its active polls

#: The subquery step of the gauge means when prometheus.scrape_interval is not set.
DEFAULT_SCRAPE_INTERVAL = 15.0

#: The canonical counters fleet mode reads, and their family tags (prefill tokens are not read:
#: the learned step-time curve is the sidecar's).
COUNTER_TAGS: dict[str, str] = {
    Counter.DRAFTS: DRAFTS,
    Counter.DRAFT_TOKENS: DRAFT_TOKENS,
    Counter.ACCEPTED: ACCEPTED,
    Counter.POS: ACCEPTED_PER_POS,
    Counter.POS_DRAFTS: DRAFTED_PER_POS,
    Counter.GEN: GENERATION,
    Counter.STEPS: STEPS,
}


@dataclass(frozen=True)
class QuerySet:
    """The queries of one evaluation: one per window label, plus the freshness query."""

    windows: tuple[tuple[str, float, str], ...]  # (label, seconds, PromQL)
    freshness: str

    @property
    def count(self) -> int:
        return len(self.windows) + 1


def selector(name: str, matchers: str, select: tuple[tuple[str, str], ...] = ()) -> str:
    every = ",".join([*filter(None, [matchers]), *(f'{label}="{value}"' for label, value in select)])
    return f"{name}{{{every}}}" if every else name


def exact_increase(series: str, window: str) -> str:
    """last − first sample of a counter inside the window; increase() only across a reset."""
    ranged = f"{series}[{window}]"
    return f"(max_over_time({ranged}) - min_over_time({ranged}) unless resets({ranged}) > 0) or increase({ranged})"


def _tag(expr: str, family: str, engine: str) -> str:
    tagged = f'label_replace({expr}, "{ENGINE_LABEL}", "{engine}", "", "")'
    return f'label_replace({tagged}, "{FAMILY_LABEL}", "{family}", "", "")'


def _gauge_parts(engine: EngineSchema, seconds: float, matchers: str, group: str, interval: float) -> list[str]:
    """A gauge-only engine's window means (windows/gauges.py in PromQL): each gauge's route mean,
    kept where plausible, averaged over the window's scrapes after an active interval (a counter
    moved or a gauge changed since the scrape before), one subquery point per scrape; the window's
    first scrape closes the interval before it and is left out, as the sidecar leaves it out."""
    pair = format_duration(2 * interval)  # the scrape and the one before it: idelta's two samples
    changed = [f"(abs(idelta({selector(name, matchers)}[{pair}])) > 0)" for name in engine.window_gauges]
    moved = [
        f"(idelta({selector(source.families[0] + '_total', matchers, source.select)}[{pair}]) > 0)"
        for source in engine.counters
        if source.kind == "counter"
    ]
    active = f"max by ({group}) ({' or '.join(changed + moved)})"
    span = f"[{format_duration(seconds - interval / 2)}:{format_duration(interval)}]"
    readings = {
        name: f"avg by ({group}) ({selector(name, matchers)}) >= {PLAUSIBLE[gauge][0]} <= {PLAUSIBLE[gauge][1]}"
        for name, gauge in engine.window_gauges.items()
    }
    tags = {name: GAUGE_PREFIX + gauge for name, gauge in engine.window_gauges.items()}
    if engine.running is not None:
        readings[engine.running] = f"sum by ({group}) ({selector(engine.running, matchers)}) >= 0"
        tags[engine.running] = GAUGE_PREFIX + BATCH
    return [
        _tag(f"avg_over_time(({reading} and {active}){span})", tags[name], engine.name)
        for name, reading in readings.items()
    ]


#: How a window part reads one stored series: (name, window, extra group labels, the source's
#: select) -> the PromQL of its window increase summed by the group (+ extra).
Reader = Callable[[str, str, str, tuple[tuple[str, str], ...]], str]
#: How a window part reads the running gauge: (name, window, "avg" | "count") -> the PromQL of
#: its window mean or sample count by the group.
GaugeReader = Callable[[str, str, str], str]


def raw_readers(matchers: str, group: str) -> tuple[Reader, GaugeReader]:
    """Reading the engine's own series, as stored: each replica's exact window increase."""

    def counter(name: str, window: str, extra: str, select: tuple[tuple[str, str], ...]) -> str:
        return f"sum by ({group}{extra}) ({exact_increase(selector(name, matchers, select), window)})"

    def gauge(name: str, window: str, how: str) -> str:
        return f"sum by ({group}) ({how}_over_time({selector(name, matchers)}[{window}]))"

    return counter, gauge


def engine_parts(engine: EngineSchema, window: str, read: Reader, read_gauge: GaugeReader) -> list[str]:
    """One engine's part of a window query: each counter it exports (as Prometheus stores it:
    counters with _total, a per-step histogram by its _count), its ITL histogram, its running gauge."""
    parts = []
    for source in engine.counters:
        name = source.families[0]
        if source.counter == Counter.ITL:
            # A renamed histogram: the new name wins where both exist, the old one is marked legacy.
            for tag, suffix, extra in (
                (ITL_BUCKET, "_bucket", ", le"),
                (ITL_SUM, "_sum", ""),
                (ITL_COUNT, "_count", ""),
            ):
                current, *older = (read(family + suffix, window, extra, ()) for family in source.families)
                legacy = "".join(
                    f' or ignoring({SCHEMA_LABEL}) label_replace({old}, "{SCHEMA_LABEL}", "legacy", "", "")'
                    for old in older
                )
                parts.append(_tag(f"({current}{legacy})", tag, engine.name))
        elif source.counter in COUNTER_TAGS:
            series = f"{name}_count" if source.kind == "histogram" else f"{name}_total"
            label = engine.position_label
            extra = f", {label}" if source.counter in POSITION_COUNTERS else ""
            increase = read(series, window, extra, source.select)
            if extra and label != "position":  # the grouping reads the position as `position`
                increase = f'label_replace({increase}, "position", "$1", "{label}", "(.*)")'
            parts.append(_tag(increase, COUNTER_TAGS[source.counter], engine.name))
    if engine.running is not None:
        parts.append(_tag(read_gauge(engine.running, window, "avg"), RUNNING_MEAN, engine.name))
        parts.append(_tag(read_gauge(engine.running, window, "count"), SAMPLES, engine.name))
    return parts


def window_query(
    window_seconds: float,
    matchers: str,
    replica_labels: tuple[str, ...],
    engines: tuple[EngineSchema, ...] = registry.ENGINES,
    scrape_interval: float | None = None,
) -> str:
    """Every engine's every family's window increase (and the running gauge's mean and sample
    count, and a gauge-only engine's gauge means), one query: its length grows with the engines
    known, never with the fleet."""
    window = format_duration(window_seconds)
    group = ", ".join((*replica_labels, "model_name", "engine"))
    interval = scrape_interval or DEFAULT_SCRAPE_INTERVAL
    counter, gauge = raw_readers(matchers, group)
    parts = []
    for engine in engines:
        parts += engine_parts(engine, window, counter, gauge)
        if engine.window_gauges:
            parts += _gauge_parts(engine, window_seconds, matchers, group, interval)
    return "\n or ".join(parts)


def freshness_query(
    matchers: str, replica_labels: tuple[str, ...], engines: tuple[EngineSchema, ...] = registry.ENGINES
) -> str:
    """Each replica's newest sample time (absent once Prometheus marked the replica stale)."""
    group = ", ".join(replica_labels)
    newest = " or ".join(
        f"timestamp({selector(engine.running, matchers)})" for engine in engines if engine.running is not None
    )
    return f"max by ({group}) ({newest})"


def query_set(
    windows: tuple[float, ...],
    labels: tuple[str, ...],
    matchers: str,
    replica_labels: tuple[str, ...],
    scrape_interval: float | None = None,
) -> QuerySet:
    return QuerySet(
        tuple(
            (label, seconds, window_query(seconds, matchers, replica_labels, scrape_interval=scrape_interval))
            for label, seconds in zip(labels, windows, strict=False)
        ),
        freshness_query(matchers, replica_labels),
    )
