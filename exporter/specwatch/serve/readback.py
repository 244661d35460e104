"""Sidecar read-back: at start, what the previous pod of the same routes exported, from the
Prometheus that scraped it (config `readback:`, docs/rollouts.md).

Applying a recommendation in Kubernetes replaces the pod, and the sidecar with it. The old sidecar
exported the window a change would be graded against (the `specwatch_advice_before_*` families,
one per quantity) and its learned step-time curve (`specwatch_step_time_curve_seconds`); the new
one reads them back with one range query over `lookback`, picked by the route label under the
configured selector (the pod label is new with each pod). Per route the series group (every label
but the name and the family's own) with the newest
sample wins: the last pod before this one. It runs on its own thread, each try under one deadline:
the first poll never waits for it. A failure that passes (Prometheus unreachable, slow or answering
5xx: a new pod's network is often not ready in its first seconds, and Prometheus restarts) is
tried again after the pauses of RETRY_PAUSES; each failed try is counted by reason, the first and
the last are logged; after the last the sidecar starts from nothing, as without `readback:`.

Bounded like a poll: the answer (at most `max_bytes`) is decoded in place and only the newest point
of each series inside [now - lookback, now] is kept (client.MatrixDecoder), at most MAX_SERIES
series; a sample stamped in the future, at +Inf or before the lookback is dropped and counted
(`implausible`). Whatever the answer holds (a 400-digit number, JSON nested 100,000 deep), the
thread ends with a result: anything unforeseen is counted as `invalid` and logged once.

What is restored is evidence, not truth: a before-window or curve out of the magnitudes a server
can have is dropped here (`implausible`); the pipeline checks the rest against this process's
first live windows before using it (`disagrees`, sidecar/pipeline.py).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specwatch.base.logsetup import get_logger
from specwatch.base.units import format_duration
from specwatch.config import ReadbackConfig
from specwatch.export.contract import BEFORE_POSITIONS, BEFORE_WINDOW
from specwatch.serve.start_read import StartRead, StartReadCollector
from specwatch.verdict.grading import WindowSummary, restored_summary
from specwatch.view.fleet import QUERY_ERROR_REASONS

if TYPE_CHECKING:
    # Imported where a read-back is configured: a sidecar without `readback:` loads no Prometheus client.
    from specwatch.fleet.client import PromClient, Series

#: Reasons of specwatch_readback_errors_total besides the query's: restored state dropped as out
#: of range (times outside the lookback, impossible magnitudes), or disagreeing with live windows.
IMPLAUSIBLE, DISAGREES = "implausible", "disagrees"
READBACK_ERROR_REASONS = (*QUERY_ERROR_REASONS, IMPLAUSIBLE, DISAGREES)
#: Seconds between the tries of a read-back that failed for a reason that passes (TRANSIENT): about
#: 40 s in all, well inside the default lookback, so the previous pod's last window is still there.
RETRY_PAUSES = (2.0, 5.0, 10.0, 20.0)
TRANSIENT = frozenset({"timeout", "connect", "http_5xx"})
#: Series of one read-back answer at most: 50 routes over several pods in the lookback (a route's
#: series: its quantities, positions and 65 knots; docs/benchmarks.md, "Chart defaults and constants").
MAX_SERIES = 20_000
#: A restored before-window's plain magnitudes: ITL per token and batch a server can have.
ITL_PER_TOKEN_RANGE = (1e-5, 10.0)
MAX_BATCH = 65536.0
#: A restored curve's step time at any knot, seconds.
STEP_SECONDS_RANGE = (1e-5, 60.0)

log = get_logger("specwatch.readback")

#: Points of the range query: the newest sample is found to within lookback / this.
_POINTS = 120
_CURVE = "specwatch_step_time_curve_seconds"
_QUANTITY = {family: quantity for quantity, family in BEFORE_WINDOW.items()}
_FAMILIES = (*BEFORE_WINDOW.values(), BEFORE_POSITIONS, _CURVE)
_OWN_LABELS = ("__name__", "position", "method", "tokens")
#: A learned curve has at most this many knots (one per learner bin).
MAX_KNOTS = 65

Knots = tuple[tuple[float, float], ...]


def readback_query(config: ReadbackConfig) -> str:
    matchers = config.as_prometheus().matchers
    names = "|".join(_FAMILIES)
    return "{" + f'__name__=~"{names}"' + (f", {matchers}" if matchers else "") + "}"


@dataclass
class _Group:
    """One old sidecar's series of one route (every label but the family's own)."""

    route: str
    method: str = "auto:unknown"
    quantities: dict[str, tuple[float, float]] = field(default_factory=dict)  # name: (t, value)
    positions: dict[int, tuple[float, float]] = field(default_factory=dict)
    knots: dict[float, tuple[float, float]] = field(default_factory=dict)  # tokens: (t, seconds)

    def add(self, labels: Mapping[str, str], point: tuple[float, float]) -> None:
        name = str(labels.get("__name__"))
        if name in _QUANTITY:
            self.quantities[_QUANTITY[name]] = point
            self.method = str(labels.get("method", self.method))
        elif name == BEFORE_POSITIONS and str(labels.get("position", "")).isdigit():
            self.positions[int(labels["position"])] = point
        elif name == _CURVE:
            with contextlib.suppress(TypeError, ValueError):
                self.knots[float(labels.get("tokens", ""))] = point

    def summary(self) -> tuple[float, WindowSummary | None]:
        """The newest scrape's before-window (a quantity that stopped earlier was another window's)."""
        if not self.quantities:
            return -math.inf, None
        newest = max(t for t, _ in self.quantities.values())
        values = {q: v for q, (t, v) in self.quantities.items() if t == newest}
        positions = {p: v for p, (t, v) in self.positions.items() if t == newest}
        span = values.get("span_seconds", 0.0)
        window = format_duration(span) if math.isfinite(span) and span > 0 else ""
        return newest, restored_summary(values, positions, self.method, window, newest)

    def curve(self) -> tuple[float, Knots]:
        """The newest scrape's knots, when they make a curve: tokens increasing, seconds positive,
        finite and non-decreasing (the learner's own shape); else none."""
        if not self.knots or len(self.knots) > MAX_KNOTS:
            return -math.inf, ()
        newest = max(t for t, _ in self.knots.values())
        knots = tuple(sorted((n, v) for n, (t, v) in self.knots.items() if t == newest))
        finite = all(math.isfinite(n) and math.isfinite(v) and n > 0 and v > 0 for n, v in knots)
        rising = all(v0 <= v1 for (_, v0), (_, v1) in itertools.pairwise(knots))
        return (newest, knots) if finite and rising else (-math.inf, ())


def plausible_before(summary: WindowSummary) -> bool:
    """Whether a restored before-window's magnitudes are a server's (restored_summary checked
    that each is present, finite and in its own range)."""
    low, high = ITL_PER_TOKEN_RANGE
    rates = summary.position_rates or ()
    return (
        low <= summary.itl_per_token_seconds <= high
        and summary.batch_size <= MAX_BATCH
        and summary.drafts >= 0
        and summary.span_seconds <= 7 * 86400.0
        and all(r1 <= r0 + 0.05 for r0, r1 in itertools.pairwise(rates))  # conditional rates fall with position
    )


def plausible_curve(knots: Knots) -> bool:
    low, high = STEP_SECONDS_RANGE
    return all(low <= v <= high and 1.0 <= n <= 65536.0 * 2 for n, v in knots)


@dataclass(frozen=True)
class Restored:
    """What the previous pod exported, per route."""

    before_windows: Mapping[str, WindowSummary]
    curves: Mapping[str, Knots]
    rejected: int = 0  # points, before-windows and curves dropped as implausible

    @property
    def routes(self) -> list[str]:
        return sorted(set(self.before_windows) | set(self.curves))


def restored_from_series(series: Iterable[Series], now: float | None = None, lookback: float | None = None) -> Restored:
    """Per route, the newest group's before-window and curve (what does not make one is skipped).
    With ``now`` (and ``lookback``), a sample stamped after now, before now - lookback (either by
    more than the query API's rounding, fleet.client.TIME_SLACK) or at a non-finite time is dropped and counted in `rejected`: it must not
    beat the real previous pod."""
    # The query API's millisecond: the step at the query's end (the newest sample of a pod still
    # scraped, as in a rolling update) reads up to half a millisecond after `now`.
    from specwatch.fleet.client import TIME_SLACK

    groups: dict[tuple[tuple[str, str], ...], _Group] = {}
    rejected = 0
    earliest = now - lookback - TIME_SLACK if now is not None and lookback is not None else -math.inf
    latest = now + TIME_SLACK if now is not None else math.inf
    for item in series:
        route = item.labels.get("route")
        if not isinstance(route, str) or not item.points:
            continue
        point = item.points[-1]
        if not (math.isfinite(point[0]) and earliest <= point[0] <= latest):
            rejected += 1
            continue
        identity = tuple(sorted((k, str(v)) for k, v in item.labels.items() if k not in _OWN_LABELS))
        groups.setdefault(identity, _Group(route)).add(item.labels, point)
    before: dict[str, tuple[float, WindowSummary]] = {}
    curves: dict[str, tuple[float, Knots]] = {}
    for group in groups.values():
        t, summary = group.summary()
        if summary is not None and not plausible_before(summary):
            rejected += 1
        elif summary is not None and t > before.get(group.route, (-math.inf,))[0]:
            before[group.route] = (t, summary)
        t, knots = group.curve()
        if knots and not plausible_curve(knots):
            rejected += 1
        elif knots and t > curves.get(group.route, (-math.inf,))[0]:
            curves[group.route] = (t, knots)
    return Restored({r: s for r, (_, s) in before.items()}, {r: k for r, (_, k) in curves.items()}, rejected)


class Readback:
    """One read-back, on its own thread; `take` hands its result to the poll thread once."""

    def __init__(
        self,
        config: ReadbackConfig,
        client: PromClient | None = None,
        *,
        pauses: Sequence[float] | None = None,
        wait: Callable[[float], object] | None = None,
    ) -> None:
        if client is None:
            from specwatch.fleet.client import PromClient

            client = PromClient(config.as_prometheus())
        self.config = config
        self._client = client
        self._pauses = tuple(RETRY_PAUSES if pauses is None else pauses)
        self._stopping = threading.Event()
        self._wait = wait if wait is not None else self._stopping.wait  # returns true once stopping
        self.errors = dict.fromkeys(READBACK_ERROR_REASONS, 0)
        self.tries = 0
        self._message = ""  # the last failed try's, for the log
        self.restored: int | None = None  # routes restored (None: not done yet)
        self._result = Restored({}, {})
        self._done = threading.Event()  # set once _result is final (the poll thread reads it then)
        self._taken = False
        self._thread: threading.Thread | None = None

    def start(self, now: float | None = None) -> None:
        at = time.time() if now is None else now
        self._thread = threading.Thread(target=self.run, args=(at,), name="specwatch-readback", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ends a read-back waiting to try again (shutdown): it restores nothing more."""
        self._stopping.set()

    def run(self, now: float) -> None:
        """The read, tried again after each pause while it fails for a reason that passes; never
        raises: whatever goes wrong is counted and restores nothing. `now` is the first try's time;
        a later try reads up to its own time (now plus the seconds since)."""
        started = time.monotonic()
        result, reason = self._try(now)
        for pause in self._pauses:
            if reason not in TRANSIENT:
                break
            if self.tries == 1:
                log.warning(
                    "readback_failed",
                    reason=reason,
                    message=self._message,
                    action=f"trying {len(self._pauses)} more times within {format_duration(sum(self._pauses))}",
                )
            if self._wait(pause) is True:
                break
            result, reason = self._try(now + (time.monotonic() - started))
        if reason is not None:
            log.warning(
                "readback_failed",
                reason=reason,
                message=self._message,
                tries=self.tries,
                action="starting from nothing",
            )
        with contextlib.suppress(Exception):
            self._client.close()
        self.restored = len(result.routes)
        if result.routes:
            log.info("readback_restored", routes=result.routes, curves=sorted(result.curves), tries=self.tries)
        self._result = result
        self._done.set()

    def _try(self, now: float) -> tuple[Restored, str | None]:
        """One query: what it restores, and the reason it failed (None: it did not)."""
        from specwatch.fleet.client import PromQueryError

        self.tries += 1
        lookback = self.config.lookback
        try:
            answer = self._client.query_range(
                readback_query(self.config),
                now - lookback,
                now,
                lookback / _POINTS,
                last_only=True,
                max_series=MAX_SERIES,
            )
            result = restored_from_series(answer.series, now, lookback)
            out_of_range = self._client.last_out_of_range
            if result.rejected or out_of_range:
                self.errors[IMPLAUSIBLE] += result.rejected + out_of_range
                log.warning(
                    "readback_implausible",
                    dropped=result.rejected,
                    samples_outside_lookback=out_of_range,
                    action="dropped: samples stamped outside [now - lookback, now], magnitudes no server has",
                )
            return result, None
        except PromQueryError as exc:
            reason, self._message = (exc.reason if exc.reason in self.errors else "invalid"), str(exc)[:200]
        except Exception as exc:  # noqa: BLE001 - a bug or an answer nothing foresaw: never a silent dead thread
            reason, self._message = "invalid", repr(exc)[:200]
        self.errors[reason] += 1
        return Restored({}, {}), reason

    def take(self) -> Restored | None:
        """The result once, when done (the poll thread applies it between polls); else None."""
        if self._taken or not self._done.is_set():
            return None
        self._taken = True
        return self._result


def readback_collector(
    get: Callable[[], Readback | None], disagreed: Callable[[], int] = lambda: 0
) -> StartReadCollector:
    """specwatch_readback_errors_total{reason} and specwatch_readback_restored_routes; `disagreed`:
    restored state the pipeline dropped for disagreeing with its first live windows."""

    def read() -> StartRead | None:
        readback = get()
        if readback is None:
            return None
        errors = dict(readback.errors)
        errors[DISAGREES] += disagreed()
        return errors, readback.restored

    return StartReadCollector("specwatch_readback_errors", "specwatch_readback_restored_routes", read)
