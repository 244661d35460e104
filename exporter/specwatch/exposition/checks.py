"""The semantic checks on the selected families: counters and gauges finite and not negative,
histograms with usable le bounds, cumulative buckets, a +Inf bucket equal to _count, a finite _sum."""

from __future__ import annotations

import math

from specwatch.exposition.samples import ExpositionError, Labels, Sample, Series


def bucket_bound(name: str, labels: Labels) -> tuple[float, str]:
    le = next((v for k, v in labels if k == "le"), None)
    if le is None:
        return math.nan, f"{name} without le"
    try:
        bound = float(le)
    except ValueError:
        return math.nan, f"{name} has non-numeric le={le!r}"
    if math.isnan(bound):
        return math.nan, f"{name} has le=NaN"
    return bound, ""


def validate_values(kind: str, samples: tuple[Sample, ...]) -> None:
    if kind == "counter":
        for s in samples:
            if not s.name.endswith("_total") or not (s.value >= 0) or math.isinf(s.value):
                raise ExpositionError("invalid", f"counter {s.name} has value {s.value}")
    elif kind == "gauge":
        # Every gauge specwatch reads is a count or a ratio: finite and not negative.
        for s in samples:
            if not math.isfinite(s.value) or s.value < 0:
                raise ExpositionError("invalid", f"gauge {s.name} has value {s.value}")


class _Histogram:
    __slots__ = ("buckets", "count", "sum")

    def __init__(self) -> None:
        self.buckets: list[tuple[float, float]] = []
        self.sum: float | None = None
        self.count: float | None = None


def validate_histogram(family: str, parts: list[tuple[Series, float]]) -> None:
    groups: dict[Labels, _Histogram] = {}
    for series, value in parts:
        group = groups.get(series.group)
        if group is None:
            group = groups[series.group] = _Histogram()
        if series.suffix == "_bucket":
            if series.le_error:
                raise ExpositionError("invalid", series.le_error)
            group.buckets.append((series.bound, value))
        elif series.suffix == "_sum":
            group.sum = value
        else:
            group.count = value
    for key, group in groups.items():
        buckets = sorted(group.buckets)
        if not buckets or not math.isinf(buckets[-1][0]):
            raise ExpositionError("invalid", f"{family}{dict(key)} has no +Inf bucket")
        previous = 0.0
        previous_bound = math.nan
        for bound, value in buckets:
            if not (value >= previous) or math.isinf(value):
                raise ExpositionError("invalid", f"{family}{dict(key)} buckets are not cumulative at le={bound}")
            if bound == previous_bound:  # e.g. le="1" and le="1.0", or "+Inf" and "Inf": one bucket twice
                raise ExpositionError("invalid", f"{family}{dict(key)} has two buckets with le={bound}")
            previous, previous_bound = value, bound
        if group.count is None or group.sum is None:
            raise ExpositionError("invalid", f"{family}{dict(key)} lacks _count or _sum")
        if group.count != buckets[-1][1]:
            raise ExpositionError("invalid", f"{family}{dict(key)} _count differs from the +Inf bucket")
        if not math.isfinite(group.sum):
            raise ExpositionError("invalid", f"{family}{dict(key)} _sum is not finite")
