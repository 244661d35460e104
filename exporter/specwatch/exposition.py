"""Prometheus text format (0.0.4) -> samples, for the few families specwatch reads.

Why not prometheus_client's parser: it parses every line of a ~55 KB payload (~8 ms, and
super-linear in labels per line), it is a generator that yields families before a later line
fails, and it accepts negative counters, non-cumulative buckets and duplicate series. Here the
whole payload is parsed before anything is returned (all-or-nothing), the semantic checks the
exporter needs are applied, and only the lines that can matter are looked at in Python.
prometheus_client stays the test oracle.

How the lines are found: a line-by-line scan acts on two kinds of lines only, sample lines that
begin with a selected family's name and `# TYPE` lines. One compiled regular expression finds,
in C, exactly the lines of the first kind, the TYPE lines that name a selected family and the
TYPE lines that are malformed; the other ~90 % of a vLLM payload (process and Python metrics,
other families, HELP lines) is never split into lines. Because lines are found wherever they
sit, exporters that omit HELP/TYPE, interleave families or put a sample far from its header are
read exactly as the line scan reads them. When the payload is rejected it is re-read by the
line scan (`Selector.parse_by_lines`), which raises the same error with its line number.

A target prints the same series in the same order every poll: when the lines found are the last
good poll's lines with new values, only the values are converted and checked (`_LastPoll`).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import NamedTuple, TypeVar

Labels = tuple[tuple[str, str], ...]
_T = TypeVar("_T")

# Limits on what a selected line may carry: parse cost must stay bounded whatever a target sends.
MAX_LABELS_PER_SERIES = 64
MAX_LABEL_VALUE_LENGTH = 4096
MAX_SELECTED_SERIES = 5_000  # 16 DP engines of vLLM select ~900; memory holds one window of these
SERIES_CACHE_SIZE = 4096  # distinct `name{labels}` texts remembered between polls

TYPE_PREFIX = "# TYPE "
_WS = r"[^\S\n]"  # whitespace inside one line, as str.split() sees it (\n ends the line)


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
    name: str      # base family name: counters without _total, histograms without suffixes
    type: str      # counter | gauge | histogram
    samples: tuple[Sample, ...]       # the value samples (counter _total, gauge, histogram parts)
    created: tuple[Sample, ...] = ()  # <name>_created samples, epoch seconds


class _Series(NamedTuple):
    """What one distinct `name{labels}` text means, worked out once and remembered between polls."""

    name: str
    family: str     # "" for a name that merely shares a selected prefix (the line is skipped)
    suffix: str
    labels: Labels  # sorted
    key: int        # equal for equal (name, labels): duplicate detection with one int hash
    group: Labels   # histogram parts: the labels without le, which tie buckets, _sum and _count
    bound: float    # a bucket's le
    le_error: str   # why a bucket's le is unusable ("" if it is usable), raised at validation


_SKIP = _Series("", "", "", (), -1, (), math.nan, "")

# One line for Selector._read: (`name{labels}`, value text, "") when already cut, else ("", "", line).
_Line = tuple[str, str, str]


def _suffixes(kind: str) -> tuple[str, ...]:
    if kind == "counter":
        return ("_total", "_created")
    if kind == "histogram":
        return ("_bucket", "_sum", "_count", "_created")
    return ("",)


def _parse_labels(text: str, start: int, lineno: int) -> tuple[Labels, int]:
    """Parse `{a="b",c="d"}` beginning at text[start] == '{'; return labels and the index after '}'."""
    labels: list[tuple[str, str]] = []
    i = start + 1
    n = len(text)
    while True:
        while i < n and text[i] == " ":
            i += 1
        if i < n and text[i] == "}":
            return tuple(labels), i + 1
        eq = text.find("=", i)
        if eq < 0:
            raise ExpositionError("parse", "label without '='", lineno)
        name = text[i:eq].strip()
        if not name or not (name[0].isalpha() or name[0] == "_") or not name.replace("_", "a").isalnum():
            raise ExpositionError("parse", f"bad label name {name[:40]!r}", lineno)
        i = eq + 1
        if i >= n or text[i] != '"':
            raise ExpositionError("parse", "label value must be quoted", lineno)
        i += 1
        close = text.find('"', i)
        if close < 0:
            raise ExpositionError("parse", "unterminated label value", lineno)
        if "\\" in text[i:close] or text[close - 1] == "\\":
            value, i = _parse_escaped(text, i, lineno)
        else:
            value, i = text[i:close], close + 1
        if len(value) > MAX_LABEL_VALUE_LENGTH:
            raise ExpositionError("invalid", f"label {name} value longer than {MAX_LABEL_VALUE_LENGTH}", lineno)
        labels.append((name, value))
        if len(labels) > MAX_LABELS_PER_SERIES:
            raise ExpositionError("invalid", f"more than {MAX_LABELS_PER_SERIES} labels on one series", lineno)
        while i < n and text[i] == " ":
            i += 1
        if i < n and text[i] == ",":
            i += 1
            continue
        if i < n and text[i] == "}":
            return tuple(labels), i + 1
        raise ExpositionError("parse", "expected ',' or '}' after a label", lineno)


def _parse_escaped(text: str, i: int, lineno: int) -> tuple[str, int]:
    out = []
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            if i + 1 >= n:
                break
            nxt = text[i + 1]
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
            i += 2
        elif ch == '"':
            return "".join(out), i + 1
        else:
            out.append(ch)
            i += 1
    raise ExpositionError("parse", "unterminated label value", lineno)


def _parse_value(text: str, lineno: int) -> float:
    """The text after the series when float() alone refused it: `value [timestamp]`, or an error."""
    parts = text.split()
    if not parts or len(parts) > 2:
        raise ExpositionError("parse", "expected 'value [timestamp]' after the series", lineno)
    if len(parts) == 2:
        try:
            int(parts[1])
        except ValueError:
            raise ExpositionError("parse", f"bad timestamp {parts[1][:40]!r}", lineno) from None
    raw = parts[0]
    try:
        return float(raw)
    except ValueError:
        raise ExpositionError("parse", f"bad sample value {raw[:40]!r}", lineno) from None


class Selector:
    """Which families to keep, built once and reused for every poll (the hot path)."""

    def __init__(self, families: Mapping[str, str]):
        self.families = dict(families)
        # sample name -> (family, suffix)
        self._by_sample: dict[str, tuple[str, str]] = {}
        for family, kind in self.families.items():
            for suffix in _suffixes(kind):
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
        self._series: dict[str, _Series] = {}
        self._keys: dict[tuple[str, Labels], int] = {}
        self._last: _LastPoll | None = None
        self._lines = _line_finder(self._prefixes, tuple(self._type_names))

    def parse(self, text: str) -> dict[str, Family]:
        """Parse and validate the selected families of `text`. Raises ExpositionError, nothing else."""
        try:
            if "\x00" in text:
                raise ExpositionError("parse", "NUL byte: not the Prometheus text format")
            try:
                return self._read_found(self._selected_lines(text), text)
            except ExpositionError:
                pass  # rejected: the line scan says why, with the line number
            return self._read(_every_line(text), text)
        except ExpositionError:
            raise
        except Exception as exc:  # noqa: BLE001 - the contract is one error type for any bad input
            raise ExpositionError("parse", f"{type(exc).__name__}: {exc}") from None

    def parse_by_lines(self, text: str) -> dict[str, Family]:
        """The reference: the same parse, looking at every line in Python (tests compare the two)."""
        try:
            if "\x00" in text:
                raise ExpositionError("parse", "NUL byte: not the Prometheus text format")
            return self._read(_every_line(text), text)
        except ExpositionError:
            raise
        except Exception as exc:  # noqa: BLE001 - as parse()
            raise ExpositionError("parse", f"{type(exc).__name__}: {exc}") from None

    def _selected_lines(self, text: str) -> list[_Line]:
        """The lines `_read` acts on, in order, except well-formed TYPE lines of other families."""
        lines: list[_Line] = self._lines.findall(text)
        if text.startswith(self._first_line_starts):
            lines.insert(0, ("", "", text.split("\n", 1)[0]))  # the pattern anchors on the newline before a line
        return lines

    def _read_found(self, found: list[_Line], text: str) -> dict[str, Family]:
        """Read the lines the pattern found; when they are the last good poll's lines with new
        values (the usual case: vLLM prints the same series in the same order every time), only
        the values are converted and checked."""
        if self._last is not None:
            result = self._last.reread(found)
            if result is not None:
                return result
        result = self._read(found, text)
        self._last = _LastPoll.remember(found, result, self._series, self.families)
        return result

    def _read(self, lines: list[_Line], text: str) -> dict[str, Family]:
        """Apply every line: a plain sample comes as (series, value, ""), any other as ("", "", line).
        Line numbers are right only when `lines` holds every line (the line scan)."""
        declared: dict[str, str] = {}
        values: dict[str, list[Sample]] = {f: [] for f in self.families}
        created: dict[str, list[Sample]] = {f: [] for f in self.families}
        parts: dict[str, list[tuple[_Series, float]]] = {f: [] for f, k in self.families.items() if k == "histogram"}
        seen: set[int] = set()
        prefixes = self._prefixes
        type_names = self._type_names
        cache = self._series
        if len(self._keys) > SERIES_CACHE_SIZE:
            cache.clear()  # bounded, whatever targets send; only here, so keys stay unique within a parse
            self._keys.clear()
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
                    head, rest = line[:close + 1], line[close + 1:]
                elif space < 0:
                    raise ExpositionError("parse", "sample without a value", lineno)
                else:
                    head, rest = line[:space], line[space:]
            series = cache.get(head)
            if series is None:
                series = self._new_series(head, lineno)
            if series is _SKIP:
                continue  # a longer name that merely shares a prefix (e.g. ..._per_pos_total)
            try:
                value = float(rest)  # the common case, " 123.0": float() strips what split() would
            except ValueError:
                value = _parse_value(rest, lineno)
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
                _validate_histogram(family, parts[family])
            else:
                _validate(kind, samples)
            result[family] = Family(family, kind, samples, tuple(created[family]))
        return result

    def _new_series(self, head: str, lineno: int) -> _Series:
        """Work out what `name{labels}` (or a bare `name`) means and remember it."""
        brace = head.find("{")  # a bare name holds no brace: it ends before the first space and any brace
        name = head[:brace] if brace >= 0 else head
        hit = self._by_sample.get(name)
        if hit is None:
            series = _SKIP
        else:
            family, suffix = hit
            labels: Labels = ()
            if brace >= 0:
                parsed, end = _parse_labels(head, brace, lineno)
                if end != len(head):
                    raise ExpositionError("parse", "unexpected text after the labels", lineno)
                labels = tuple(sorted(parsed))  # label order is not significant in the format
            key = self._keys.setdefault((name, labels), len(self._keys))
            group, bound, le_error = labels, math.nan, ""
            if suffix == "_bucket":
                group = tuple(kv for kv in labels if kv[0] != "le")
                bound, le_error = _bucket_bound(name, labels)
            series = _Series(name, family, suffix, labels, key, group, bound, le_error)
        if len(self._series) >= SERIES_CACHE_SIZE:
            self._series.clear()  # bounded, whatever a target sends
        self._series[head] = series
        return series


_head, _value_text, _whole_line = itemgetter(0), itemgetter(1), itemgetter(2)
_make_sample = partial(tuple.__new__, Sample)  # Sample from a (name, labels, value) tuple, all in C


def _pick(items: Sequence[_T], positions: tuple[int, ...]) -> tuple[_T, ...]:
    return tuple([items[i] for i in positions])


@dataclass(frozen=True)
class _HistogramPlan:
    buckets: tuple[int, ...]  # positions of the buckets, by increasing le
    count: int
    sum: int


@dataclass(frozen=True)
class _LastPoll:
    """The shape of the last good poll: which lines, which series, where each sample goes, which
    value checks apply. A poll with exactly the same lines apart from the values (same series
    texts, same TYPE lines, same order) only needs its values converted and checked; anything
    else, or any doubt about a value, goes through `Selector._read`."""

    heads: list[str]
    lines: list[str]
    plain: tuple[int, ...]          # positions in the found lines of the samples, in order
    names: tuple[str, ...]
    labels: tuple[Labels, ...]
    families: tuple[tuple[str, str, tuple[int, ...], tuple[int, ...]], ...]  # name, kind, values, created
    not_negative: tuple[int, ...]   # counters and gauges: finite and >= 0
    timestamps: tuple[int, ...]     # _created: finite
    histograms: tuple[_HistogramPlan, ...]

    @staticmethod
    def remember(found: list[_Line], result: Mapping[str, Family], cache: Mapping[str, _Series],
                 kinds: Mapping[str, str]) -> _LastPoll | None:
        plain: list[int] = []
        series: list[_Series] = []
        for i, (head, value, line) in enumerate(found):
            if not value:
                if not line.startswith(TYPE_PREFIX):
                    return None  # a sample line the pattern did not cut: keep to the general path
                continue
            known = cache.get(head)
            if known is None:
                return None  # the cache was cleared during the poll
            if known is not _SKIP:
                plain.append(i)
                series.append(known)
        if not series:
            return None  # with no sample, whether the text is an exposition at all depends on more
        slots: dict[tuple[str, bool], list[int]] = {}
        for position, s in enumerate(series):
            slots.setdefault((s.family, s.suffix == "_created"), []).append(position)
        families = []
        not_negative: list[int] = []
        timestamps: list[int] = []
        histograms: list[_HistogramPlan] = []
        for name, family in result.items():
            values = tuple(slots.get((name, False), ()))
            created = tuple(slots.get((name, True), ()))
            if len(values) != len(family.samples) or len(created) != len(family.created):
                return None
            families.append((name, kinds[name], values, created))
            timestamps += created
            if kinds[name] != "histogram":
                not_negative += values
                continue
            groups: dict[Labels, dict[str, list[tuple[float, int]]]] = {}
            for position in values:
                s = series[position]
                groups.setdefault(s.group, {}).setdefault(s.suffix, []).append((s.bound, position))
            for parts in groups.values():
                if len(parts.get("_count", ())) != 1 or len(parts.get("_sum", ())) != 1 or not parts.get("_bucket"):
                    return None
                histograms.append(_HistogramPlan(tuple(p for _, p in sorted(parts["_bucket"])),
                                                 parts["_count"][0][1], parts["_sum"][0][1]))
        return _LastPoll(list(map(_head, found)), list(map(_whole_line, found)), tuple(plain),
                         tuple(s.name for s in series), tuple(s.labels for s in series), tuple(families),
                         tuple(not_negative), tuple(timestamps), tuple(histograms))

    def reread(self, found: list[_Line]) -> dict[str, Family] | None:
        """The families of `found` if it has this poll's lines with valid values, else None."""
        if list(map(_head, found)) != self.heads or list(map(_whole_line, found)) != self.lines:
            return None
        texts = list(map(_value_text, found))
        try:
            values = list(map(float, _pick(texts, self.plain)))
        except ValueError:
            return None
        if self.not_negative:
            checked = _pick(values, self.not_negative)
            if not (math.isfinite(sum(checked)) and min(checked) >= 0):
                return None  # a NaN, an infinity or a negative value (or a sum overflow): look closer
        if self.timestamps and not math.isfinite(sum(_pick(values, self.timestamps))):
            return None
        for plan in self.histograms:
            buckets = _pick(values, plan.buckets)
            if not (buckets[0] >= 0 and all(map(operator.ge, buckets[1:], buckets[:-1]))
                    and not math.isinf(buckets[-1]) and values[plan.count] == buckets[-1]
                    and math.isfinite(values[plan.sum])):
                return None
        samples = list(map(_make_sample, zip(self.names, self.labels, values)))
        return {name: Family(name, kind, _pick(samples, value_at), _pick(samples, created_at))
                for name, kind, value_at, created_at in self.families}


def _every_line(text: str) -> list[_Line]:
    return [("", "", line) for line in text.split("\n")]


def _line_finder(prefixes: tuple[str, ...], type_names: tuple[str, ...]) -> re.Pattern[str]:
    """A pattern whose findall() returns, in order, as `_Line`s, every line (after the first) that
    starts with one of `prefixes`, every TYPE line naming one of `type_names`, and every TYPE line
    that str.split() would not cut into exactly four fields.

    A plain sample line, `name{labels} value` or `name value` with no brace in the name or value,
    no `}` inside the labels and no timestamp, comes already cut: (`name{labels}`, `value`, "").
    That is the cut the line scan makes (the first brace opens the labels, the last `}` closes
    them, the value follows). Any other selected line comes whole: ("", "", line)."""

    def alternatives(words: tuple[str, ...]) -> str:
        return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))

    branches = []
    if prefixes:
        names = f"(?:{alternatives(prefixes)})"
        plain = rf"({names}[^ {{}}\n]*(?:\{{[^}}\n]*\}})?) ([^ {{}}\n]+)(?=\n|\Z)"
        branches.append(rf"{names}[^\n]*")
    else:
        plain = "()()(?!)"
    type_branches = []
    if type_names:
        type_branches.append(rf"{_WS}*(?:{alternatives(type_names)}){_WS}[^\n]*")
    type_branches.append(rf"(?!{_WS}*\S+{_WS}+\S+{_WS}*(?:\n|\Z))[^\n]*")
    branches.append(re.escape(TYPE_PREFIX) + "(?:" + "|".join(type_branches) + ")")
    return re.compile(r"\n(?:" + plain + "|(" + "|".join(branches) + "))")


def _bucket_bound(name: str, labels: Labels) -> tuple[float, str]:
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


def _validate(kind: str, samples: tuple[Sample, ...]) -> None:
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


def _validate_histogram(family: str, parts: list[tuple[_Series, float]]) -> None:
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
        for bound, value in buckets:
            if not (value >= previous) or math.isinf(value):
                raise ExpositionError("invalid", f"{family}{dict(key)} buckets are not cumulative at le={bound}")
            previous = value
        if group.count is None or group.sum is None:
            raise ExpositionError("invalid", f"{family}{dict(key)} lacks _count or _sum")
        if group.count != buckets[-1][1]:
            raise ExpositionError("invalid", f"{family}{dict(key)} _count differs from the +Inf bucket")
        if not math.isfinite(group.sum):
            raise ExpositionError("invalid", f"{family}{dict(key)} _sum is not finite")
