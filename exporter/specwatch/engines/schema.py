"""What an engine's /metrics says, as a table: an EngineSchema per engine.

An engine is one EngineSchema value (engines/<engine>.py) listed in engines/registry.py: its name,
the families it exports and how each becomes canonical counter series (CounterSource), its
running-requests gauge and the labels that name a series. The grouping (engines/grouping.py) and
fleet mode's queries read only this table, so adding an engine adds no code to them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from specwatch.engines.series import Counter, SeriesKey

#: (sample name, labels, series id) -> the sample's series key, or None: not read.
KeyOf = Callable[[str, Mapping[str, str], str], SeriesKey | None]


def plain(counter: str) -> KeyOf:
    """A counter with one series per engine."""
    return lambda name, labels, series: SeriesKey(counter, series)


def per_position(counter: str, label: str = "position") -> KeyOf:
    """A counter with one series per engine and draft position (`label`)."""

    def key_of(name: str, labels: Mapping[str, str], series: str) -> SeriesKey | None:
        try:
            return SeriesKey(counter, series, int(labels.get(label, "")))
        except ValueError:
            return None

    return key_of


def itl_part(name: str, labels: Mapping[str, str], series: str) -> SeriesKey | None:
    """One sample of a per-step inter-token latency histogram."""
    if name.endswith("_bucket"):
        le = float(labels["le"])
        # le="-Inf" bounds no latency (it counts nothing a valid histogram can hold): dropped, or it
        # would be exported as a second `+Inf` bucket.
        return SeriesKey(Counter.ITL_BUCKET, series, le) if le != -math.inf else None
    if name.endswith("_sum"):
        return SeriesKey(Counter.ITL_SUM, series)
    return SeriesKey(Counter.ITL_COUNT, series)  # _count, and _created (whose reset group is the histogram)


def engine_steps(name: str, labels: Mapping[str, str], series: str) -> SeriesKey | None:
    """A histogram observed once per engine step: only its observation count is read."""
    return SeriesKey(Counter.STEPS, series) if name.endswith(("_count", "_created")) else None


@dataclass(frozen=True)
class CounterSource:
    """How one family becomes counter series of a RouteSnapshot."""

    families: tuple[str, ...]  # the first one present is read (a renamed family's old name last)
    key_of: KeyOf
    shows_speculation: bool  # a sample of it means speculation is configured
    names_engines: bool  # its series list the route's engines
    kind: str = "counter"  # its exposition type: "counter" or "histogram"
    skip_in: tuple[str, ...] = ()  # schemas (EngineSchema.schema_of) in which it is not read
    unmatched_labels: tuple[str, ...] = ()  # labels that do not select a route
    counter: str = ""  # the canonical counter it yields: fleet mode's family tag (Counter.ITL: a whole histogram)
    select: tuple[tuple[str, str], ...] = ()  # (label, value) a sample must carry to be read

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(name) == value for name, value in self.select)


def _one_schema(families: Collection[str]) -> str:
    return "v1"


@dataclass(frozen=True)
class EngineSchema:
    """One serving engine's metric schema.

    `schema_of` names the version of the schema a payload speaks (specwatch_route_info{schema});
    `lifetime_gauges` are gauges read as they are (vLLM V0's acceptance gauges: family -> the
    RouteSnapshot field, "v0_acceptance_rate" or "v0_efficiency"). `series_labels` name one
    engine's series (their values joined by ":"), `model_label` the served model. What the engine
    does not export is simply not listed: the numbers built on it are then absent, never zero.
    """

    name: str
    counters: tuple[CounterSource, ...]
    running: str | None = None  # requests in the running batch (gauge): the batch-size fallback
    lifetime_gauges: Mapping[str, str] = field(default_factory=dict)
    # Gauges an engine exports instead of acceptance counters: family -> its series.Gauge. A route
    # of such an engine takes its acceptance from their window means (windows/gauges.py).
    window_gauges: Mapping[str, str] = field(default_factory=dict)
    schema_of: Callable[[Collection[str]], str] = _one_schema  # the payload's family names -> schema
    series_labels: tuple[str, ...] = ("engine",)
    model_label: str = "model_name"
    position_label: str = "position"  # the label its per_position() sources read
    # Whether a model drafter's drafts can be cut short (llama.cpp: by the tokens left to generate
    # and --spec-draft-p-min): p_i is then over all drafts, as the engine itself reports it.
    drafts_vary_in_length: bool = False
    summary: str = ""  # one line for docs and logs

    @property
    def families(self) -> dict[str, str]:
        """Every family read, name -> exposition type."""
        out = {name: source.kind for source in self.counters for name in source.families}
        if self.running is not None:
            out[self.running] = "gauge"
        out.update(dict.fromkeys(self.lifetime_gauges, "gauge"))
        out.update(dict.fromkeys(self.window_gauges, "gauge"))
        return out

    def series_id(self, labels: Mapping[str, str]) -> str:
        """One series of a canonical counter: its engine, and its model when a route spans several
        (a route matched on engine alone). Deltas are taken per series before any sum, so a series
        that appears or vanishes is a new series, never a jump of the sum."""
        engine = ":".join(labels.get(name, "0" if name == "engine" else "") for name in self.series_labels)
        model = labels.get(self.model_label)
        return f"{engine}/{model}" if model else engine

    def counter_family(self, counter: str) -> CounterSource | None:
        """The source of one canonical counter (fleet mode's queries)."""
        return next((s for s in self.counters if s.counter == counter), None)
