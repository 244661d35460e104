"""The families /metrics is built from: a metric family (name, type, HELP, samples), the collectors
that yield them and the registry that collects them, in registration order.

The shape is prometheus_client's (a Metric's name, documentation, type, unit and samples; a Sample's
name, labels, value, timestamp, exemplar and native_histogram), so prometheus_client's renderers
and parser read these families as they read their own: the tests render the same families through
it and compare the bytes with export/metrics_text.py's. specwatch's serving path imports none of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, Protocol

__all__ = ["Collector", "Metric", "Registry", "Sample"]


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float
    timestamp: float | None = None
    #: Always None here (specwatch exports neither); there for the renderers that read them.
    exemplar: None = None
    native_histogram: None = None


class Metric:
    """One family: gauge, counter or histogram. A counter's name is kept without `_total` (its
    samples carry it), as the OpenMetrics type line names it."""

    __slots__ = ("_labelnames", "documentation", "name", "samples", "type", "unit")

    def __init__(self, name: str, documentation: str, typ: str, labels: Sequence[str] = ()):
        if typ == "counter" and name.endswith("_total"):
            name = name[: -len("_total")]
        self.name = name
        self.documentation = documentation
        self.type = typ
        self.unit = ""
        self.samples: list[Sample] = []
        self._labelnames = tuple(labels)

    def add_metric(self, labels: Sequence[str], value: float, timestamp: float | None = None) -> None:
        """A gauge's or a counter's sample, its label values in the family's label order."""
        name = self.name + "_total" if self.type == "counter" else self.name
        self.samples.append(Sample(name, dict(zip(self._labelnames, labels, strict=False)), value, timestamp))

    def add_histogram(self, labels: Sequence[str], buckets: Sequence[tuple[str, float]], sum_value: float) -> None:
        """A histogram's buckets (sorted, +Inf last: its value is the count), count and sum."""
        own = dict(zip(self._labelnames, labels, strict=False))
        for bound, value in buckets:
            self.samples.append(Sample(self.name + "_bucket", {**own, "le": bound}, value))
        if float(buckets[0][0]) >= 0:  # no sum and count beside negative buckets
            self.samples.append(Sample(self.name + "_count", dict(own), buckets[-1][1]))
            self.samples.append(Sample(self.name + "_sum", dict(own), sum_value))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Metric) and (self.name, self.documentation, self.type, self.unit, self.samples) == (
            other.name,
            other.documentation,
            other.type,
            other.unit,
            other.samples,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return f"Metric({self.name}, {self.documentation}, {self.type}, {self.unit}, {self.samples})"


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class Registry:
    """Collectors, collected in the order they were registered."""

    def __init__(self) -> None:
        self._collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        self._collectors.append(collector)

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()
