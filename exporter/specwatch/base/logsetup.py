"""Log lines of every command: one per event on stderr, JSON or console, filtered by level.

The lines are structlog's (the JSON and console renderers the exporter was first built on, kept
byte for byte): the call's keywords, then `event`, `level` and an ISO-8601 UTC `timestamp`, then
`exception` (the traceback) when `exc_info` is given. JSON is written here without importing
structlog: its package imports asyncio and its logging bridge, about 50 modules of a sidecar's
start-up (docs/benchmarks.md "Start-up"). The console format is structlog's ConsoleRenderer,
imported when it is chosen. For the same reason the timestamp is made without datetime, and
traceback is imported only when an exception is formatted.

Until `configure_logging` is called (a command that logs calls it first), lines are JSON on stderr
at every level.
"""

from __future__ import annotations

import io
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

#: Severity of each method, as the standard library numbers them (the config's `log.level`).
LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}

EventDict = dict[str, Any]


def _json_line(event_dict: EventDict) -> str:
    # structlog's JSONRenderer: json.dumps, and repr() for what JSON cannot hold.
    return json.dumps(event_dict, default=repr)


class _Setup:
    """What configure_logging chose; read on every call, so a reload's change applies at once."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.min_level = 0
        self.render: Callable[[EventDict], str] = _json_line
        self.stream: TextIO | None = None  # None: sys.stderr when the line is written
        self.capture: list[EventDict] | None = None  # capture_logs's entries while it runs


_setup = _Setup()
_write_lock = threading.Lock()


def configure_logging(fmt: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    if fmt == "json":
        render = _json_line
    else:
        from structlog.dev import ConsoleRenderer

        console = ConsoleRenderer(colors=False)

        def render(event_dict: EventDict) -> str:
            return str(console(None, "", event_dict))

    _setup.min_level = LEVELS[level.lower()]
    _setup.render = render
    _setup.stream = stream or sys.stderr


def reset_logging() -> None:
    """Back to the set-up before any configure_logging (for tests that configure in-process)."""
    _setup.reset()


def iso_timestamp(ns: int) -> str:
    """An instant (nanoseconds since the epoch) as structlog's TimeStamper(fmt="iso", utc=True)
    writes it: `datetime.now(UTC).isoformat()` with `Z` for `+00:00`. The clock is floored to
    microseconds as datetime.now floors it, and isoformat leaves out a fraction of zero."""
    seconds, nanoseconds = divmod(ns, 1_000_000_000)
    micros = nanoseconds // 1000
    t = time.gmtime(seconds)
    stamp = f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
    return f"{stamp}.{micros:06d}Z" if micros else f"{stamp}Z"


def _format_exception(exc_info: object) -> str | None:
    """structlog's format_exc_info: the exception being handled (exc_info=True), or the one given."""
    if isinstance(exc_info, BaseException):
        exc: BaseException | None = exc_info
    elif isinstance(exc_info, tuple) and len(exc_info) == 3 and isinstance(exc_info[1], BaseException):
        exc = exc_info[1]
    else:
        exc = sys.exc_info()[1] if exc_info else None
    if exc is None:
        return None
    import traceback  # only when there is an exception to print (see the module docstring)

    out = io.StringIO()
    traceback.print_exception(type(exc), exc, exc.__traceback__, None, out)
    return out.getvalue().removesuffix("\n")


def _emit(level: str, event: str, kw: EventDict) -> None:
    if LEVELS[level] < _setup.min_level:
        return
    event_dict = dict(kw)
    event_dict["event"] = event
    if _setup.capture is not None:
        event_dict["log_level"] = level
        _setup.capture.append(event_dict)
        return
    event_dict["level"] = level
    event_dict["timestamp"] = iso_timestamp(time.time_ns())
    if "exc_info" in event_dict:
        exception = _format_exception(event_dict.pop("exc_info"))
        if exception is not None:
            event_dict["exception"] = exception
    line = _setup.render(event_dict)
    with _write_lock:
        print(line, file=_setup.stream or sys.stderr, flush=True)


class Logger:
    """`log.info("event", key=value)`: the keywords become the line's fields."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name  # which part of the exporter logs (not printed)

    def debug(self, event: str, **kw: Any) -> None:
        _emit("debug", event, kw)

    def info(self, event: str, **kw: Any) -> None:
        _emit("info", event, kw)

    def warning(self, event: str, **kw: Any) -> None:
        _emit("warning", event, kw)

    def error(self, event: str, **kw: Any) -> None:
        _emit("error", event, kw)

    def exception(self, event: str, **kw: Any) -> None:
        """An error with the traceback of the exception being handled."""
        kw.setdefault("exc_info", True)
        _emit("error", event, kw)

    def critical(self, event: str, **kw: Any) -> None:
        _emit("critical", event, kw)


def get_logger(name: str) -> Logger:
    return Logger(name)


@contextmanager
def capture_logs() -> Iterator[list[EventDict]]:
    """The events logged inside the block, as dicts (the keywords, `event`, `log_level`, and
    `exc_info` as given), instead of their lines: what a test asserts on."""
    previous, _setup.capture = _setup.capture, []
    try:
        yield _setup.capture
    finally:
        _setup.capture = previous
