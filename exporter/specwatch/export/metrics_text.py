"""/metrics bytes from collected families: prometheus_client's text rendering and a fast path.

The sidecar's registry is collected once per poll (collect: the families hold that poll's values)
and its bytes rendered on the first scrape after it (serve/http_server.Rendered). Two renderings
of the same families sit side by side, compared byte for byte by tests/unit/export/test_metrics_text.py:

- plain_text: prometheus_client's `generate_latest`, which escapes (and so re-validates) every
  metric and label name of every sample on every call;
- render_text: the same bytes, with each name's escaping computed once per process (names come
  from the metric contract and cannot change between polls; a label *value* is escaped per sample,
  as it must be), the HELP/TYPE lines of a family kept once built. It is what /metrics serves.

render_openmetrics is prometheus_client's OpenMetrics rendering (served when a scraper's Accept
header asks for `application/openmetrics-text`, serve/http_server.wants_openmetrics).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import cast

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["collect", "plain_text", "render_openmetrics", "render_text"]

_needs_escape = re.compile(r'[\\\n"]').search  # label value characters escaped with a backslash
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")
_TYPE_RENAME = {"counter": ("_total", "counter"), "info": ("_info", "gauge"), "stateset": ("", "gauge")}
_TYPE_RENAME |= {"gaugehistogram": ("", "histogram"), "unknown": ("", "untyped")}

# Escaped names and HELP/TYPE heads, built once per distinct name (bounded by the contract's names;
# a label name or family outside it is escaped each time once these are full).
_MAX_CACHED = 4096
_metric_names: dict[str, str] = {}
_label_names: dict[str, str] = {}
_heads: dict[tuple[str, str, str], tuple[str, tuple[str, ...], str]] = {}


class _Families(Collector):
    """Already collected families as a collector (what prometheus_client's renderers take)."""

    def __init__(self, families: Iterable[Metric]):
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def collect(registry: Collector) -> list[Metric]:
    """The registry's families now (their values as of this call)."""
    return list(registry.collect())


def plain_text(*family_lists: Sequence[Metric]) -> bytes:
    """prometheus_client's text rendering of the families, in order."""
    families = [f for fams in family_lists for f in fams]
    return generate_latest(_Families(families))


def render_openmetrics(*family_lists: Sequence[Metric]) -> bytes:
    """prometheus_client's OpenMetrics 1.0.0 rendering of the families, in order (ends in # EOF)."""
    families = [f for fams in family_lists for f in fams]
    text = openmetrics.generate_latest(  # type: ignore[no-untyped-call]
        _Families(families), escaping=openmetrics.UNDERSCORES, version="1.0.0"
    )
    return cast(bytes, text)


def _escaped(name: str, cache: dict[str, str], escape: Callable[[str, str], str]) -> str:
    """A metric name (cache _metric_names, escape_metric_name) or a label name (_label_names,
    escape_label_name) as the text format writes it, escaped once while the cache has room."""
    escaped = cache.get(name)
    if escaped is None:
        escaped = escape(name, openmetrics.UNDERSCORES)
        if len(cache) < _MAX_CACHED:
            cache[name] = escaped
    return escaped


def _metric_name(name: str) -> str:
    return _escaped(name, _metric_names, openmetrics.escape_metric_name)


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


def _sample_line(name: str, labels: dict[str, str], value: float, timestamp: object) -> str:
    if labels:
        parts = []
        for k, raw in sorted(labels.items()):
            v = raw.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"") if _needs_escape(raw) else raw
            parts.append(f'{_escaped(k, _label_names, openmetrics.escape_label_name)}="{v}"')
        labelstr = "{" + ",".join(parts) + "}"
    else:
        labelstr = ""
    ts = "" if timestamp is None else f" {int(float(timestamp) * 1000):d}"  # type: ignore[arg-type]
    value_text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return f"{_metric_name(name)}{labelstr} {value_text}{ts}\n"


def render_text(*family_lists: Sequence[Metric]) -> bytes:
    """The bytes of plain_text (prometheus_client's text format), names escaped once per process."""
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
