"""/metrics bytes from collected families (export/families.py): the Prometheus text format, and
OpenMetrics 1.0.0 when a scraper's Accept header asks for `application/openmetrics-text`
(serve/http_server.wants_openmetrics).

Both write exactly what prometheus_client's `generate_latest` (text, and its OpenMetrics one with
underscore escaping) writes for the same families: the tests render a polled sidecar's families,
every sidecar and fleet case of the contract tests (test_contract.py), every special case of the
formats and arbitrary names, labels and values (test_metrics_text.py) through both and compare
the bytes. Names come from the metric contract and cannot change between polls, so each
name's escaping and each family's HELP/TYPE lines are built once per process (a label *value* is
escaped per sample, as it must be).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence

from specwatch.export.families import Collector, Metric

__all__ = ["CONTENT_TYPE", "OPENMETRICS_CONTENT_TYPE", "collect", "render_openmetrics", "render_text"]

#: The content types of the two formats, as prometheus_client names its latest ones.
CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"

_needs_escape = re.compile(r'[\\\n"]').search  # label value characters escaped with a backslash
_LEGACY_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*").fullmatch
_LEGACY_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*").fullmatch
_NOT_METRIC_RUNE = re.compile(r"[^a-zA-Z0-9_:]")
_NOT_LABEL_RUNE = re.compile(r"[^a-zA-Z0-9_]")
_Match = Callable[[str], "re.Match[str] | None"]
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")
_TYPE_RENAME = {"counter": ("_total", "counter"), "info": ("_info", "gauge"), "stateset": ("", "gauge")}
_TYPE_RENAME |= {"gaugehistogram": ("", "histogram"), "unknown": ("", "untyped")}

# Escaped names and HELP/TYPE heads, built once per distinct name (bounded by the contract's names;
# a label name or family outside it is escaped each time once these are full).
_MAX_CACHED = 4096
_metric_names: dict[str, str] = {}
_label_names: dict[str, str] = {}
_om_sample_names: dict[str, str] = {}
_heads: dict[tuple[str, str, str], tuple[str, tuple[str, ...], str]] = {}
_om_heads: dict[tuple[str, str, str, str], str] = {}


def collect(registry: Collector) -> list[Metric]:
    """The registry's families now (their values as of this call)."""
    return list(registry.collect())


def go_float(value: float) -> str:
    """A value as Go's strconv formats it ('+Inf', 'NaN', exponents from 1e7 on), as Prometheus writes it."""
    d = float(value)
    if math.isinf(d):
        return "+Inf" if d > 0 else "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _underscored(name: str, valid: re.Pattern[str]) -> str:
    """A name with every character outside the legacy set (`valid`: what is not in it) replaced by
    `_`, and a leading digit too (underscore escaping)."""
    escaped = valid.sub("_", name)
    return "_" + escaped[1:] if escaped[:1].isdigit() else escaped


def _cached(name: str, cache: dict[str, str], legacy: _Match | None, invalid: re.Pattern[str]) -> str:
    """`name` escaped with underscores, unchanged when `legacy` (the legacy name set) matches it."""
    escaped = cache.get(name)
    if escaped is None:
        escaped = name if not name or (legacy is not None and legacy(name)) else _underscored(name, invalid)
        if len(cache) < _MAX_CACHED:
            cache[name] = escaped
    return escaped


def _metric_name(name: str) -> str:
    """A metric name as both formats write it in HELP/TYPE lines and the text format in samples."""
    return _cached(name, _metric_names, _LEGACY_METRIC, _NOT_METRIC_RUNE)


def _label_name(name: str) -> str:
    return _cached(name, _label_names, _LEGACY_LABEL, _NOT_LABEL_RUNE)


def _om_sample_name(name: str) -> str:
    """A sample's name as OpenMetrics writes it: every character outside a label name's set
    replaced, `:` included (prometheus_client escapes sample names so)."""
    return _cached(name, _om_sample_names, None, _NOT_LABEL_RUNE)


def _escape_value(raw: str) -> str:
    return raw.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"") if _needs_escape(raw) else raw


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{_label_name(k)}="{_escape_value(v)}"' for k, v in sorted(labels.items())) + "}"


def _head(metric: Metric) -> tuple[str, tuple[str, ...], str]:
    """The family's HELP and TYPE lines, the names of its OpenMetrics-only samples and its escaped
    HELP text (theirs too)."""
    key = (metric.name, metric.type, metric.documentation)
    head = _heads.get(key)
    if head is None:
        suffix, mtype = _TYPE_RENAME.get(metric.type, ("", metric.type))
        mname = _metric_name(metric.name + suffix)
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        om_names = tuple(metric.name + s for s in _OM_SUFFIXES)
        head = (f"# HELP {mname} {doc}\n# TYPE {mname} {mtype}\n", om_names, doc)
        if len(_heads) < _MAX_CACHED:
            _heads[key] = head
    return head


def _sample_line(name: str, labels: dict[str, str], value: float, timestamp: float | None) -> str:
    ts = "" if timestamp is None else f" {int(float(timestamp) * 1000):d}"
    return f"{_metric_name(name)}{_labels(labels)} {go_float(value)}{ts}\n"


def render_text(*family_lists: Sequence[Metric]) -> bytes:
    """The families, in order, in the Prometheus text format (prometheus_client's generate_latest):
    a counter's TYPE line names it with `_total`, its `_created` samples a gauge of their own after it."""
    output: list[str] = []
    for families in family_lists:
        for metric in families:
            head, om_names, doc = _head(metric)
            output.append(head)
            om_samples: dict[str, list[str]] = {}
            for s in metric.samples:
                line = _sample_line(s.name, s.labels, s.value, s.timestamp)
                if s.name in om_names:  # OpenMetrics-only samples: a gauge of their own after the family
                    om_samples.setdefault(s.name[len(metric.name) :], []).append(line)
                else:
                    output.append(line)
            for suffix, lines in sorted(om_samples.items()):
                mname = _metric_name(metric.name + suffix)
                output.append(f"# HELP {mname} {doc}\n# TYPE {mname} gauge\n")
                output.extend(lines)
    return "".join(output).encode("utf-8")


def _om_head(metric: Metric) -> str:
    key = (metric.name, metric.type, metric.documentation, metric.unit)
    head = _om_heads.get(key)
    if head is None:
        mname = _metric_name(metric.name)
        doc = _escape_value(metric.documentation)
        head = f"# HELP {mname} {doc}\n# TYPE {mname} {metric.type}\n"
        if metric.unit:
            head += f"# UNIT {mname} {metric.unit}\n"
        if len(_om_heads) < _MAX_CACHED:
            _om_heads[key] = head
    return head


def _om_lines(metric: Metric) -> Iterable[str]:
    yield _om_head(metric)
    for s in metric.samples:
        ts = "" if s.timestamp is None else f" {s.timestamp}"
        yield f"{_om_sample_name(s.name)}{_labels(s.labels)} {go_float(s.value)}{ts}\n"


def render_openmetrics(*family_lists: Sequence[Metric]) -> bytes:
    """The families, in order, in OpenMetrics 1.0.0 (prometheus_client's openmetrics generate_latest
    with underscore escaping): types and names as the families hold them, ending in `# EOF`."""
    output = [line for families in family_lists for metric in families for line in _om_lines(metric)]
    output.append("# EOF\n")
    return "".join(output).encode("utf-8")
