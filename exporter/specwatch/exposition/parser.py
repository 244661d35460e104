"""Selector: parse one payload into the selected families, all or nothing (see the package docstring)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from specwatch.exposition.checks import bucket_bound, validate_histogram, validate_values
from specwatch.exposition.lastpoll import LastPoll
from specwatch.exposition.samples import (
    MAX_SELECTED_SERIES,
    SERIES_CACHE_CHARS,
    SERIES_CACHE_SIZE,
    SKIP,
    ExpositionError,
    Family,
    Labels,
    Sample,
    Series,
)
from specwatch.exposition.syntax import (
    TYPE_PREFIX,
    Line,
    every_line,
    line_finder,
    parse_labels,
    parse_value,
    suffixes,
    whole_line_finder,
)


class Selector:
    """Which families to keep, built once and reused for every poll (the hot path)."""

    def __init__(self, families: Mapping[str, str]):
        self.families = dict(families)
        # sample name -> (family, suffix)
        self._by_sample: dict[str, tuple[str, str]] = {}
        for family, kind in self.families.items():
            for suffix in suffixes(kind):
                self._by_sample[family + suffix] = (family, suffix)
        # TYPE lines name the family with _total for counters in prometheus_client output,
        # and without it in some older or other clients: accept both.
        self._type_names: dict[str, str] = {}
        for family, kind in self.families.items():
            self._type_names[family] = family
            if kind == "counter":
                self._type_names[family + "_total"] = family
        self._prefixes = tuple(sorted(self.families))
        self._first_line_starts = (*self._prefixes, TYPE_PREFIX)
        self._series: dict[str, Series] = {}
        self._series_chars = 0  # characters of the series texts in _series
        self._keys_chars = 0  # ... and of those that made the keys in _keys
        self._keys: dict[tuple[str, Labels], int] = {}
        self._last: LastPoll | None = None
        # The layout of the last parse's families when it was read from a remembered poll: two
        # parses with the same (identical) shape hold the same series in the same order. None:
        # read in full (the layout is not vouched for).
        self.shape: LastPoll | None = None
        self._lines = line_finder(self._prefixes, tuple(self._type_names))
        # whole_line_finder's pattern, compiled on the first poll that has a last poll to compare
        # with: a selector that never reads a second poll (a process's start-up) does not pay for it.
        self._whole_lines: re.Pattern[str] | None = None

    def parse(self, text: str) -> dict[str, Family]:
        """Parse and validate the selected families of `text`. Raises ExpositionError, nothing else."""
        families, values = self.parse_values(text)
        if families is None:
            assert self.shape is not None and values is not None
            return self.shape.families_of(values)
        return families

    def parse_values(self, text: str) -> tuple[dict[str, Family] | None, list[float] | None]:
        """parse(), except that a poll read from the remembered last poll (`shape` set) comes as
        its sample values alone, (None, values): `shape.families_of(values)` are its families,
        for a reader that only needs the values. Otherwise (families, None).

        With a remembered last poll the lines are first found whole, which is cheaper than finding
        them cut, and compared with it (LastPoll.reread_lines); any difference or doubt reads the
        poll as `parse_values_plain` does, which gives the same answer in every case
        (tests/unit/exposition/test_lastpoll_whole_lines.py)."""
        last = self._last
        if last is not None and "\x00" not in text:
            finder = self._whole_lines
            if finder is None:
                finder = self._whole_lines = whole_line_finder(self._prefixes, tuple(self._type_names))
            lines: list[str] = finder.findall(text)
            if text.startswith(self._first_line_starts):
                lines.insert(0, text.split("\n", 1)[0])  # as _selected_lines
            values = last.reread_lines(lines)
            if values is not None:
                self.shape = last
                return None, values
        return self.parse_values_plain(text)

    def parse_values_plain(self, text: str) -> tuple[dict[str, Family] | None, list[float] | None]:
        """parse_values with the lines found cut, compared with the last poll's as such."""
        self.shape = None
        try:
            if "\x00" in text:
                raise ExpositionError("parse", "NUL byte: not the Prometheus text format")
            try:
                found = self._selected_lines(text)
                if self._last is not None:
                    values = self._last.reread_values(found)
                    if values is not None:
                        self.shape = self._last
                        return None, values
                return self._read_found(found, text), None
            except ExpositionError:
                pass  # rejected: the line scan says why, with the line number
            return self._read(every_line(text), text), None
        except ExpositionError:
            raise
        except Exception as exc:  # noqa: BLE001 - the contract is one error type for any bad input
            raise ExpositionError("parse", f"{type(exc).__name__}: {exc}") from None

    def parse_by_lines(self, text: str) -> dict[str, Family]:
        """The reference: the same parse, looking at every line in Python (tests compare the two)."""
        try:
            if "\x00" in text:
                raise ExpositionError("parse", "NUL byte: not the Prometheus text format")
            return self._read(every_line(text), text)
        except ExpositionError:
            raise
        except Exception as exc:  # noqa: BLE001 - as parse()
            raise ExpositionError("parse", f"{type(exc).__name__}: {exc}") from None

    def _selected_lines(self, text: str) -> list[Line]:
        """The lines `_read` acts on, in order, except other families' TYPE lines of the usual shape
        (`# TYPE name type`, which `_read` would pass over)."""
        lines: list[Line] = self._lines.findall(text)
        if text.startswith(self._first_line_starts):
            lines.insert(0, ("", "", text.split("\n", 1)[0]))  # the pattern anchors on the newline before a line
        return lines

    def _read_found(self, found: list[Line], text: str) -> dict[str, Family]:
        """Read the lines the pattern found in full and remember them as the last good poll: the
        next poll with the same lines and new values (the usual case: vLLM prints the same series
        in the same order every time) only has its values converted and checked."""
        result = self._read(found, text)
        self._last = LastPoll.remember(found, result, self._series, self.families)
        return result

    def _read(self, lines: list[Line], text: str) -> dict[str, Family]:
        """Apply every line: a plain sample comes as (series, value, ""), any other as ("", "", line).
        Line numbers are right only when `lines` holds every line (the line scan)."""
        declared: dict[str, str] = {}
        values: dict[str, list[Sample]] = {f: [] for f in self.families}
        created: dict[str, list[Sample]] = {f: [] for f in self.families}
        parts: dict[str, list[tuple[Series, float]]] = {f: [] for f, k in self.families.items() if k == "histogram"}
        seen: set[int] = set()
        prefixes = self._prefixes
        type_names = self._type_names
        cache = self._series
        if len(self._keys) > SERIES_CACHE_SIZE or self._keys_chars > SERIES_CACHE_CHARS:
            cache.clear()  # bounded, whatever targets send; only here, so keys stay unique within a parse
            self._keys.clear()
            self._series_chars = self._keys_chars = 0
        count = 0
        new_sample = tuple.__new__  # Sample(...) without the Python-level __new__ of a NamedTuple
        for lineno, (head, rest, line) in enumerate(lines, 1):
            if rest:
                pass  # `name{labels} value`, already cut by the pattern
            elif not line.startswith(prefixes):
                if line.startswith(TYPE_PREFIX):
                    fields = line.split()
                    if len(fields) != 4:
                        raise ExpositionError("parse", "malformed TYPE line", lineno)
                    family = type_names.get(fields[2])
                    if (
                        family is not None
                        and fields[2] == family
                        and fields[3] == "gauge"
                        and self.families[family] == "counter"
                    ):
                        # A gauge under a counter's bare name is another metric (Ray exports one beside
                        # each counter for compatibility): its unsuffixed samples are never read.
                        family = None
                    if family is not None:
                        if family in declared and declared[family] != fields[3]:
                            raise ExpositionError("invalid", f"{family} declared twice with different types", lineno)
                        declared[family] = fields[3]
                continue
            else:
                brace = line.find("{")
                space = line.find(" ")
                if brace >= 0 and (space < 0 or brace < space):
                    close = line.rfind("}")
                    if close < brace:
                        if line[:brace] in self._by_sample:
                            raise ExpositionError("parse", "unterminated labels", lineno)
                        continue  # a longer name that merely shares a prefix
                    head, rest = line[: close + 1], line[close + 1 :]
                elif space < 0:
                    raise ExpositionError("parse", "sample without a value", lineno)
                else:
                    head, rest = line[:space], line[space:]
            series = cache.get(head)
            if series is None:
                series = self._new_series(head, lineno)
            if series is SKIP:
                continue  # a longer name that merely shares a prefix (e.g. ..._per_pos_total)
            try:
                value = float(rest)  # the common case, " 123.0": float() strips what split() would
            except ValueError:
                value = parse_value(rest, lineno)
            key = series.key
            if key in seen:
                raise ExpositionError("invalid", f"duplicate series {series.name}{dict(series.labels)}", lineno)
            seen.add(key)
            count += 1
            if count > MAX_SELECTED_SERIES:
                raise ExpositionError("invalid", f"more than {MAX_SELECTED_SERIES} selected series")
            sample = new_sample(Sample, (series.name, series.labels, value))
            if series.suffix == "_created":
                if not math.isfinite(value):
                    raise ExpositionError("invalid", f"{series.name} is not a finite timestamp", lineno)
                created[series.family].append(sample)
            else:
                values[series.family].append(sample)
                if series.family in parts:
                    parts[series.family].append((series, value))
        if count == 0 and text.strip() and not (text.startswith(TYPE_PREFIX) or "\n" + TYPE_PREFIX in text):
            # Every real exporter declares its families; text with neither is not an exposition.
            raise ExpositionError("parse", "no TYPE line and no known series: not a Prometheus exposition")
        result: dict[str, Family] = {}
        for family, kind in self.families.items():
            if family in declared and declared[family] not in (kind, "untyped", "unknown"):
                raise ExpositionError("invalid", f"{family} has type {declared[family]}, expected {kind}")
            if not values[family]:
                continue
            samples = tuple(values[family])
            if kind == "histogram":
                validate_histogram(family, parts[family])
            else:
                validate_values(kind, samples)
            result[family] = Family(family, kind, samples, tuple(created[family]))
        return result

    def _new_series(self, head: str, lineno: int) -> Series:
        """Work out what `name{labels}` (or a bare `name`) means and remember it."""
        brace = head.find("{")  # a bare name holds no brace: it ends before the first space and any brace
        name = head[:brace] if brace >= 0 else head
        hit = self._by_sample.get(name)
        if hit is None:
            series = SKIP
        else:
            family, suffix = hit
            labels: Labels = ()
            if brace >= 0:
                parsed, end = parse_labels(head, brace, lineno)
                if end != len(head):
                    raise ExpositionError("parse", "unexpected text after the labels", lineno)
                labels = tuple(sorted(parsed))  # label order is not significant in the format
            known = len(self._keys)
            key = self._keys.setdefault((name, labels), known)
            if key == known:
                self._keys_chars += len(head)  # about the characters of its labels
            group, bound, le_error = labels, math.nan, ""
            if suffix == "_bucket":
                group = tuple(kv for kv in labels if kv[0] != "le")
                bound, le_error = bucket_bound(name, labels)
            series = Series(name, family, suffix, labels, key, group, bound, le_error)
        if len(self._series) >= SERIES_CACHE_SIZE or self._series_chars + len(head) > SERIES_CACHE_CHARS:
            self._series.clear()  # bounded, whatever a target sends
            self._series_chars = 0
        self._series[head] = series
        self._series_chars += len(head)
        return series
