"""Sidecar read-back: at start, what the previous pod of the same routes exported, from the
Prometheus that scraped it (config `readback:`, docs/rollouts.md).

Applying a recommendation in Kubernetes replaces the pod, and the sidecar with it. The old sidecar
exported the window a change would be graded against (`specwatch_advice_before_window`,
`specwatch_advice_before_position_acceptance_rate`); the new one reads them back with one range
query over `lookback`, picked by the route label under the configured selector (the pod label is
new with each pod). Per route the series group (every label but the quantity's) with the newest
sample wins: the last pod before this one. It runs once, on its own thread, under one deadline:
the first poll never waits for it. A failure is counted by reason and logged once; the sidecar then
starts from nothing, as without `readback:`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from specwatch.base.units import format_duration
from specwatch.config import ReadbackConfig
from specwatch.export.collector import BEFORE_POSITIONS_GAUGE, BEFORE_WINDOW_GAUGE
from specwatch.fleet.client import QUERY_ERROR_REASONS, PromClient, PromQueryError, Series
from specwatch.verdict.grading import WindowSummary, restored_summary

log = structlog.get_logger("specwatch.readback")

#: Points of the range query: the newest sample is found to within lookback / this.
_POINTS = 120
_FAMILIES = (BEFORE_WINDOW_GAUGE[0], BEFORE_POSITIONS_GAUGE[0])
_OWN_LABELS = ("__name__", "quantity", "position", "method")


def readback_query(config: ReadbackConfig) -> str:
    matchers = config.as_prometheus().matchers
    names = "|".join(_FAMILIES)
    return "{" + f'__name__=~"{names}"' + (f", {matchers}" if matchers else "") + "}"


def summaries_from_series(series: Iterable[Series]) -> dict[str, WindowSummary]:
    """Per route, the newest series group's summary (groups that do not make one are skipped)."""
    groups: dict[tuple[tuple[str, str], ...], dict[str, object]] = {}
    for item in series:
        labels = item.labels
        route = labels.get("route")
        if not isinstance(route, str) or not item.points:
            continue
        identity = tuple(sorted((k, str(v)) for k, v in labels.items() if k not in _OWN_LABELS))
        group = groups.setdefault(identity, {"route": route, "t": -1.0, "q": {}, "p": {}, "method": "auto:unknown"})
        t, value = item.points[-1]
        group["t"] = max(float(group["t"]), t)  # type: ignore[arg-type]
        if labels.get("__name__") == BEFORE_WINDOW_GAUGE[0] and isinstance(labels.get("quantity"), str):
            group["q"][labels["quantity"]] = (t, value)  # type: ignore[index]
            group["method"] = str(labels.get("method", "auto:unknown"))
        elif labels.get("__name__") == BEFORE_POSITIONS_GAUGE[0] and str(labels.get("position", "")).isdigit():
            group["p"][int(labels["position"])] = (t, value)  # type: ignore[index]
    out: dict[str, tuple[float, WindowSummary]] = {}
    for group in groups.values():
        quantities: Mapping[str, tuple[float, float]] = group["q"]  # type: ignore[assignment]
        if not quantities:
            continue
        newest = max(t for t, _ in quantities.values())
        # One scrape's values only: a quantity that stopped earlier belongs to another window.
        values = {q: v for q, (t, v) in quantities.items() if t == newest}
        positions = {p: v for p, (t, v) in group["p"].items() if t == newest}  # type: ignore[attr-defined]
        span = values.get("span_seconds", 0.0)
        summary = restored_summary(values, positions, str(group["method"]), format_duration(span) if span > 0 else "")
        route = str(group["route"])
        if summary is not None and (route not in out or newest > out[route][0]):
            out[route] = (newest, summary)
    return {route: summary for route, (_, summary) in out.items()}


class Readback:
    """One read-back, on its own thread; `take` hands its result to the poll thread once."""

    def __init__(self, config: ReadbackConfig, client: PromClient | None = None) -> None:
        self.config = config
        self._client = client or PromClient(config.as_prometheus())
        self.errors = dict.fromkeys(QUERY_ERROR_REASONS, 0)
        self.restored: int | None = None  # routes restored (None: not done yet)
        self._result: dict[str, WindowSummary] | None = None
        self._thread: threading.Thread | None = None

    def start(self, now: float | None = None) -> None:
        at = time.time() if now is None else now
        self._thread = threading.Thread(target=self.run, args=(at,), name="specwatch-readback", daemon=True)
        self._thread.start()

    def run(self, now: float) -> None:
        lookback = self.config.lookback
        try:
            answer = self._client.query_range(readback_query(self.config), now - lookback, now, lookback / _POINTS)
            result = summaries_from_series(answer.series)
        except PromQueryError as exc:
            self.errors[exc.reason if exc.reason in self.errors else "invalid"] += 1
            log.warning("readback_failed", reason=exc.reason, message=str(exc), action="starting from nothing")
            result = {}
        finally:
            self._client.close()
        self.restored = len(result)
        if result:
            log.info("readback_restored", routes=sorted(result))
        self._result = result

    def take(self) -> dict[str, WindowSummary] | None:
        """The result once, when done (the poll thread applies it between polls)."""
        result, self._result = self._result, None
        return result


class ReadbackCollector(Collector):
    """specwatch_readback_errors_total{reason} and specwatch_readback_restored_routes."""

    def __init__(self, get: Callable[[], Readback | None]) -> None:
        self._get = get

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        readback = self._get()
        if readback is None:
            return
        errors = CounterMetricFamily(
            "specwatch_readback_errors", "Failed read-backs of the previous pod's series, by reason.", labels=["reason"]
        )
        for reason, count in readback.errors.items():
            errors.add_metric([reason], count)
        yield errors
        if readback.restored is not None:
            restored = GaugeMetricFamily(
                "specwatch_readback_restored_routes",
                "Routes whose before-window was read back from the previous pod at start.",
            )
            restored.add_metric([], readback.restored)
            yield restored
