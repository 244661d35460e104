"""The engine-neutral values of the engine layer: canonical counters, series keys, route snapshots.

Whatever an engine calls its families, a poll becomes RouteSnapshots keyed by these names, so the
windows, the derivations and the export read every engine the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

#: The engine a snapshot comes from when nothing says otherwise.
DEFAULT_ENGINE = "vllm"


class Counter(StrEnum):
    """The canonical counters of a route, whatever the engine or the source calls them: the
    `counter` of a SeriesKey, the family tag of fleet mode's queries and what the learner reads."""

    DRAFTS = "drafts"
    DRAFT_TOKENS = "draft_tokens"
    ACCEPTED = "accepted"
    POS = "pos"  # accepted tokens at one draft position (SeriesKey.sub = the position)
    POS_DRAFTS = "pos_drafts"  # draft tokens proposed at one position: p_i's exact denominator
    GEN = "gen"  # generated output tokens
    ITL_BUCKET = "itl_bucket"  # SeriesKey.sub = the bucket's upper bound `le`
    ITL_SUM = "itl_sum"
    ITL_COUNT = "itl_count"
    STEPS = "steps"  # engine steps (the iteration-tokens histogram's count)
    ITL = "itl"  # the reset group (and `_created`) of one engine's whole ITL histogram
    PROMPT = "prompt"  # prefill tokens: the learned step-time curve counts them per step


class Gauge(StrEnum):
    """The canonical gauges of an engine that exports its acceptance only as gauges (SGLang): the
    engine's own estimate at each poll, read as a window mean (windows/gauges.py)."""

    ACCEPTANCE_RATE = "acceptance_rate"
    ACCEPTANCE_LENGTH = "acceptance_length"  # tokens per verify step, bonus included
    DRAFT_LENGTH = "draft_length"  # the draft length the engine runs with


_ITL_PARTS = (Counter.ITL_BUCKET, Counter.ITL_SUM, Counter.ITL_COUNT)
#: Counters whose SeriesKey.sub is a draft position.
POSITION_COUNTERS = (Counter.POS, Counter.POS_DRAFTS)


class SeriesKey(NamedTuple):
    """One counter series of a route, e.g. SeriesKey(Counter.POS, "0", 2): engine 0's accepted tokens at
    position 2. Deltas are taken per series, before any sum over engines or positions."""

    counter: str  # a Counter: DRAFTS, POS, ITL_BUCKET, ...
    series: str  # the engine, or "engine/model" when a route spans several models
    sub: float | None = None  # the position of Counter.POS(_DRAFTS), the upper bound `le` of Counter.ITL_BUCKET

    @property
    def position(self) -> int:
        assert self.counter in POSITION_COUNTERS and self.sub is not None
        return int(self.sub)

    @property
    def le(self) -> float:
        assert self.counter == Counter.ITL_BUCKET and self.sub is not None
        return float(self.sub)


def reset_group(key: SeriesKey) -> SeriesKey:
    """Series that reset together: a histogram resets as a whole (per engine)."""
    if key.counter in _ITL_PARTS:
        return SeriesKey(Counter.ITL, key.series)
    return key


@dataclass(frozen=True)
class RouteSnapshot:
    t: float
    target: str
    route: str
    model_name: str
    schema: str
    spec_present: bool
    engines: tuple[str, ...]  # the server's data-parallel engines (its `engine` label values)
    configured_k: int | None
    counters: Mapping[SeriesKey, float]
    created: Mapping[SeriesKey, float]  # `_created` timestamp per reset group
    running: Mapping[str, float] = field(default_factory=dict)
    v0_acceptance_rate: float | None = None
    v0_efficiency: float | None = None
    engine: str = DEFAULT_ENGINE  # the serving engine spoken: an EngineSchema.name ("vllm", "llamacpp", ...)
    # A Gauge -> this poll's reading (mean over the route's series), for an engine whose acceptance
    # is gauges only (gauge_acceptance): its window values are gauge means, never counter ratios.
    gauges: Mapping[str, float] = field(default_factory=dict)
    gauge_acceptance: bool = False


@dataclass(frozen=True)
class RouteMatcher:
    route: str
    match: Mapping[str, str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match.items())
