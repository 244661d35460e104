"""What a parse returns (Sample, Family), its one error, the limits on a payload, and the
remembered meaning of one series text (Series) that the selector, the checks and the fast path share."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

Labels = tuple[tuple[str, str], ...]

# Limits on what a selected line may carry: parse cost must stay bounded whatever a target sends.
MAX_LABELS_PER_SERIES = 64
MAX_LABEL_VALUE_LENGTH = 4096
MAX_SELECTED_SERIES = 5_000  # several times the largest payload's; memory holds one window of these
SERIES_CACHE_SIZE = 4096  # distinct `name{labels}` texts remembered between polls
# ... and their characters together: ever-new long series texts must not pile up across polls
# (one poll's are bounded by the scrape's max_bytes; sizes: docs/benchmarks.md, "Chart defaults...").
SERIES_CACHE_CHARS = 4 << 20


class ExpositionError(ValueError):
    """The payload is rejected as a whole. `reason` is 'parse' (syntax) or 'invalid' (semantics)."""

    def __init__(self, reason: str, message: str, line: int | None = None):
        self.reason = reason
        self.line = line
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"{where}{message}")


class Sample(NamedTuple):
    """One sample of a selected family (a tuple: cheap to build, immutable)."""

    name: str
    labels: Labels  # sorted by label name
    value: float

    def label(self, key: str, default: str | None = None) -> str | None:
        for k, v in self.labels:
            if k == key:
                return v
        return default


@dataclass(frozen=True)
class Family:
    name: str  # base family name: counters without _total, histograms without suffixes
    type: str  # counter | gauge | histogram
    samples: tuple[Sample, ...]  # the value samples (counter _total, gauge, histogram parts)
    created: tuple[Sample, ...] = ()  # <name>_created samples, epoch seconds


class Series(NamedTuple):
    """What one distinct `name{labels}` text means, worked out once and remembered between polls."""

    name: str
    family: str  # "" for a name that merely shares a selected prefix (the line is skipped)
    suffix: str
    labels: Labels  # sorted
    key: int  # equal for equal (name, labels): duplicate detection with one int hash
    group: Labels  # histogram parts: the labels without le, which tie buckets, _sum and _count
    bound: float  # a bucket's le
    le_error: str  # why a bucket's le is unusable ("" if it is usable), raised at validation


SKIP = Series("", "", "", (), -1, (), math.nan, "")
