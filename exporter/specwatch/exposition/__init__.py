"""Prometheus text format (0.0.4) -> samples, for the few families specwatch reads.

Why not prometheus_client's parser: it parses every line of a payload (its cost grows
super-linearly in labels per line; docs/benchmarks.md has the figures), it is a generator that yields families before a later line
fails, and it accepts negative counters, non-cumulative buckets and duplicate series. Here the
whole payload is parsed before anything is returned (all-or-nothing), the semantic checks the
exporter needs are applied, and only the lines that can matter are looked at in Python.
prometheus_client stays the test oracle.

How the lines are found: a line-by-line scan acts on two kinds of lines only, sample lines that
begin with a selected family's name and `# TYPE` lines. One compiled regular expression finds,
in C, exactly the lines of the first kind, the TYPE lines that name a selected family and every
other TYPE line but the usual `# TYPE name type` (among them the malformed ones, which the read
rejects; the others it passes over, as the scan does); the bulk of a vLLM payload (process and Python metrics,
other families, HELP lines) is never split into lines. Because lines are found wherever they
sit, exporters that omit HELP/TYPE, interleave families or put a sample far from its header are
read exactly as the line scan reads them. When the payload is rejected it is re-read by the
line scan (`Selector.parse_by_lines`), which raises the same error with its line number.

A target prints the same series in the same order every poll: when the lines found are the last
good poll's lines with new values, only the values are converted and checked (`LastPoll`).

- samples.py   Sample, Family, ExpositionError, the limits, Series (what one series text means)
- syntax.py    label sets, values, the line-finding pattern and the line scan's lines
- parser.py    Selector: the pattern path, the line scan (`parse_by_lines`) and the read itself
- lastpoll.py  LastPoll: the values-only re-read of an unchanged poll
- checks.py    the semantic checks: counters, gauges, histogram buckets
"""

from specwatch.exposition.parser import Selector
from specwatch.exposition.samples import (
    MAX_LABEL_VALUE_LENGTH,
    MAX_LABELS_PER_SERIES,
    MAX_SELECTED_SERIES,
    SERIES_CACHE_SIZE,
    ExpositionError,
    Family,
    Labels,
    Sample,
)
from specwatch.exposition.syntax import TYPE_PREFIX

__all__ = [
    "MAX_LABELS_PER_SERIES",
    "MAX_LABEL_VALUE_LENGTH",
    "MAX_SELECTED_SERIES",
    "SERIES_CACHE_SIZE",
    "TYPE_PREFIX",
    "ExpositionError",
    "Family",
    "Labels",
    "Sample",
    "Selector",
]
