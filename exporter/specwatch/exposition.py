"""Prometheus text format (0.0.4) -> samples, for the few families specwatch reads.

Why not prometheus_client's parser: it parses every line of a ~55 KB payload (~11 ms, and
super-linear in labels per line), it is a generator that yields families before a later line
fails, and it accepts negative counters, non-cumulative buckets and duplicate series
(RELIABILITY.md V1, V2, V4). Here lines are selected by exact family name first, the whole
payload is parsed before anything is returned (all-or-nothing), and the semantic checks
the exporter needs are applied. prometheus_client stays the test oracle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

Labels = tuple[tuple[str, str], ...]

# Limits on what a selected line may carry: parse cost must stay bounded whatever a target sends.
MAX_LABELS_PER_SERIES = 64
MAX_LABEL_VALUE_LENGTH = 4096
MAX_SELECTED_SERIES = 5_000  # 16 DP engines of vLLM select ~900; memory holds one window of these
LABEL_CACHE_SIZE = 4096  # distinct label texts remembered between polls


class ExpositionError(ValueError):
    """The payload is rejected as a whole. `reason` is 'parse' (syntax) or 'invalid' (semantics)."""

    def __init__(self, reason: str, message: str, line: int | None = None):
        self.reason = reason
        self.line = line
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"{where}{message}")


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Labels
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
    if text[:1] == " " and text.count(" ") == 1:
        try:
            return float(text)  # the common case: " 123.0"
        except ValueError:
            pass
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
        self._label_cache: dict[str, Labels] = {}

    def parse(self, text: str) -> dict[str, Family]:
        """Parse and validate the selected families of `text`. Raises ExpositionError, nothing else."""
        try:
            return self._parse(text)
        except ExpositionError:
            raise
        except Exception as exc:  # noqa: BLE001 - the contract is one error type for any bad input
            raise ExpositionError("parse", f"{type(exc).__name__}: {exc}") from None

    def _parse(self, text: str) -> dict[str, Family]:
        if "\x00" in text:
            raise ExpositionError("parse", "NUL byte: not the Prometheus text format")
        type_lines = 0
        declared: dict[str, str] = {}
        values: dict[str, list[Sample]] = {f: [] for f in self.families}
        created: dict[str, list[Sample]] = {f: [] for f in self.families}
        seen: set[tuple[str, Labels]] = set()
        prefixes = self._prefixes
        by_sample = self._by_sample
        label_cache = self._label_cache
        count = 0
        type_prefix = "# TYPE "
        for lineno, line in enumerate(text.split("\n"), 1):
            if not line.startswith(prefixes):
                if line.startswith(type_prefix):
                    type_lines += 1
                    parts = line.split()
                    if len(parts) != 4:
                        raise ExpositionError("parse", "malformed TYPE line", lineno)
                    family = self._type_names.get(parts[2])
                    if family is not None:
                        if family in declared and declared[family] != parts[3]:
                            raise ExpositionError("invalid", f"{family} declared twice with different types", lineno)
                        declared[family] = parts[3]
                continue
            brace = line.find("{")
            space = line.find(" ")
            has_labels = brace >= 0 and (space < 0 or brace < space)
            name_end = brace if has_labels else space
            if name_end < 0:
                raise ExpositionError("parse", "sample without a value", lineno)
            name = line[:name_end]
            hit = by_sample.get(name)
            if hit is None:
                continue  # a longer name that merely shares a prefix (e.g. ..._per_pos_total)
            family, suffix = hit
            if has_labels:
                # The label set of a series repeats every poll: parse each distinct text once.
                close = line.rfind("}")
                raw = line[brace:close + 1]
                labels = label_cache.get(raw)
                if labels is None:
                    labels, end = _parse_labels(line, brace, lineno)
                    if end != close + 1:
                        raise ExpositionError("parse", "unexpected text after the labels", lineno)
                    labels = tuple(sorted(labels))  # label order is not significant in the format
                    if len(label_cache) >= LABEL_CACHE_SIZE:
                        label_cache.clear()  # bounded, whatever a target sends
                    label_cache[raw] = labels
                rest = line[close + 1:]
            else:
                labels, rest = (), line[space:]
            value = _parse_value(rest, lineno)
            key = (name, labels)
            if key in seen:
                raise ExpositionError("invalid", f"duplicate series {name}{dict(labels)}", lineno)
            seen.add(key)
            count += 1
            if count > MAX_SELECTED_SERIES:
                raise ExpositionError("invalid", f"more than {MAX_SELECTED_SERIES} selected series")
            sample = Sample(name, labels, value)
            if suffix == "_created":
                if not math.isfinite(value):
                    raise ExpositionError("invalid", f"{name} is not a finite timestamp", lineno)
                created[family].append(sample)
            else:
                values[family].append(sample)
        if type_lines == 0 and count == 0 and text.strip():
            # Every real exporter declares its families; text with neither is not an exposition.
            raise ExpositionError("parse", "no TYPE line and no known series: not a Prometheus exposition")
        result: dict[str, Family] = {}
        for family, kind in self.families.items():
            if family in declared and declared[family] not in (kind, "untyped", "unknown"):
                raise ExpositionError("invalid", f"{family} has type {declared[family]}, expected {kind}")
            if not values[family]:
                continue
            samples = tuple(values[family])
            _validate(family, kind, samples)
            result[family] = Family(family, kind, samples, tuple(created[family]))
        return result


def _validate(family: str, kind: str, samples: tuple[Sample, ...]) -> None:
    if kind == "counter":
        for s in samples:
            if not s.name.endswith("_total") or not (s.value >= 0) or math.isinf(s.value):
                raise ExpositionError("invalid", f"counter {s.name} has value {s.value}")
    elif kind == "gauge":
        # Every gauge specwatch reads is a count or a ratio: finite and not negative.
        for s in samples:
            if not math.isfinite(s.value) or s.value < 0:
                raise ExpositionError("invalid", f"gauge {s.name} has value {s.value}")
    elif kind == "histogram":
        _validate_histogram(family, samples)


def _validate_histogram(family: str, samples: tuple[Sample, ...]) -> None:
    groups: dict[Labels, dict[str, object]] = {}
    for s in samples:
        if s.name.endswith("_bucket"):
            le = s.label("le")
            if le is None:
                raise ExpositionError("invalid", f"{s.name} without le")
            try:
                bound = float(le)
            except ValueError:
                raise ExpositionError("invalid", f"{s.name} has non-numeric le={le!r}") from None
            if math.isnan(bound):
                raise ExpositionError("invalid", f"{s.name} has le=NaN")
            key = tuple(kv for kv in s.labels if kv[0] != "le")
            groups.setdefault(key, {}).setdefault("buckets", []).append((bound, s.value))  # type: ignore[union-attr]
        else:
            groups.setdefault(s.labels, {})[s.name.rsplit("_", 1)[1]] = s.value
    for key, parts in groups.items():
        buckets = sorted(parts.get("buckets", []))  # type: ignore[arg-type]
        if not buckets or not math.isinf(buckets[-1][0]):
            raise ExpositionError("invalid", f"{family}{dict(key)} has no +Inf bucket")
        previous = 0.0
        for bound, value in buckets:
            if not (value >= previous) or math.isinf(value):
                raise ExpositionError("invalid", f"{family}{dict(key)} buckets are not cumulative at le={bound}")
            previous = value
        count = parts.get("count")
        if count is None or parts.get("sum") is None:
            raise ExpositionError("invalid", f"{family}{dict(key)} lacks _count or _sum")
        if count != buckets[-1][1]:
            raise ExpositionError("invalid", f"{family}{dict(key)} _count differs from the +Inf bucket")
        if not math.isfinite(parts["sum"]):  # type: ignore[arg-type]
            raise ExpositionError("invalid", f"{family}{dict(key)} _sum is not finite")


def select(families: Mapping[str, str]) -> Selector:
    return Selector(families)


def family_names(text: str) -> Iterable[str]:
    """All family names declared by TYPE lines (for diagnostics and schema detection in tests)."""
    for line in text.split("\n"):
        if line.startswith("# TYPE "):
            parts = line.split()
            if len(parts) >= 3:
                yield parts[2]
