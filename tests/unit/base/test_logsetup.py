"""The log lines are structlog's, byte for byte (its JSON and console chains as the exporter
configured them, run beside ours on the same events), and JSON logging imports no structlog."""

from __future__ import annotations

import datetime
import io
import json
import re
import subprocess
import sys

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from specwatch.base import logsetup
from specwatch.base.logsetup import capture_logs, configure_logging, get_logger, iso_timestamp

STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def _structlog_lines(fmt: str, level: str, calls) -> str:
    """What the exporter's structlog set-up printed for the same calls."""
    out = io.StringIO()
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(__import__("logging"), level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    try:
        calls(structlog.get_logger("specwatch"))
    finally:
        structlog.reset_defaults()
    return out.getvalue()


def _our_lines(fmt: str, level: str, calls) -> str:
    out = io.StringIO()
    configure_logging(fmt, level, out)
    calls(get_logger("specwatch"))
    return out.getvalue()


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque 7>"


def _calls(log) -> None:
    log.debug("poll_detail", target="vllm")
    log.info("started", listen="0.0.0.0:9400", targets=["vllm", "sglang"], interval=5.0, count=3, none=None)
    log.warning("target_down", target="vllm", reason="connect", message="naïve “quotes”\nand a newline")
    log.error("odd_value", value=Opaque(), ratio=float("nan"), nested={"a": [1, 2.5]})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("poll_failed", recovery="windows restarted from the running config")
    log.warning("handed_exception", exc_info=KeyError("k"))
    log.info("no_exception_at_hand", exc_info=True)
    log.critical("last")


@pytest.mark.parametrize("fmt", ["json", "console"])
@pytest.mark.parametrize("level", ["debug", "info", "warning", "error"])
def test_every_line_is_the_one_structlog_printed(fmt, level):
    theirs = _structlog_lines(fmt, level, _calls)
    ours = _our_lines(fmt, level, _calls)
    assert theirs.count("\n") >= 2  # the comparison is over real lines
    # The timestamps differ by the microseconds between the two runs: the same format, then equal.
    assert len(STAMP.findall(ours)) == len(STAMP.findall(theirs)) > 0
    assert STAMP.sub("T", ours) == STAMP.sub("T", theirs)


def test_a_json_line_holds_the_keywords_then_event_level_timestamp_and_exception():
    out = io.StringIO()
    configure_logging("json", "info", out)
    try:
        raise RuntimeError("x")
    except RuntimeError:
        get_logger("specwatch").exception("poll_failed", target="vllm")
    line = json.loads(out.getvalue())
    assert list(line) == ["target", "event", "level", "timestamp", "exception"]
    assert line["level"] == "error"
    assert line["exception"].startswith("Traceback") and line["exception"].endswith("RuntimeError: x")


def test_captured_events_are_dicts_with_their_level_and_below_the_configured_level_nothing():
    configure_logging("json", "warning", io.StringIO())
    log = get_logger("specwatch")
    with capture_logs() as logs:
        log.info("quiet")
        log.warning("loud", target="vllm")
        log.exception("failed")
    assert logs == [
        {"target": "vllm", "event": "loud", "log_level": "warning"},
        {"exc_info": True, "event": "failed", "log_level": "error"},
    ]


def test_json_logging_imports_no_structlog():
    code = (
        "import sys\nfrom specwatch.base.logsetup import configure_logging, get_logger\n"
        "configure_logging('json', 'info')\nget_logger('specwatch').info('started')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('structlog', 'asyncio')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
    assert json.loads(out.stderr)["event"] == "started"


# ---- the timestamp, without datetime ----------------------------------------------------------

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
SECOND = 1_000_000_000


def _datetime_stamp(ns: int) -> str:
    """What datetime.now(UTC).isoformat() (structlog's TimeStamper) gives at `ns`: the clock floored
    to microseconds (as datetime.now reads it), in exact integer arithmetic."""
    return (EPOCH + datetime.timedelta(microseconds=ns // 1000)).isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    "ns",
    [
        0,
        999,  # under a microsecond: no fraction at all, as isoformat writes a whole second
        1000,
        SECOND - 1,  # 999.999999 ms: floored, never rounded up into the next second
        SECOND - 500,  # the 999.9995 ms edge
        SECOND - 500_000,  # the 999.5 ms edge
        1_798_761_599 * SECOND + SECOND - 1,  # the last nanosecond of 2026
        951_868_799 * SECOND + 999_999_500,  # the end of 2000-02-29 (a century leap day)
        4_102_444_800 * SECOND,  # 2100-01-01, no fraction
    ],
)
def test_the_timestamp_is_the_one_datetime_writes_at_the_edges(ns):
    assert iso_timestamp(ns) == _datetime_stamp(ns)


@given(st.integers(min_value=0, max_value=253_402_300_799 * SECOND + SECOND - 1))  # to 9999-12-31
def test_the_timestamp_is_the_one_datetime_writes_at_any_instant(ns):
    assert iso_timestamp(ns) == _datetime_stamp(ns)


def test_a_line_is_stamped_with_the_clock_floored_to_microseconds(monkeypatch):
    monkeypatch.setattr(logsetup.time, "time_ns", lambda: 1_796_000_000 * SECOND + 999_999_999)
    out = io.StringIO()
    configure_logging("json", "info", out)
    get_logger("specwatch").info("started")
    assert json.loads(out.getvalue())["timestamp"] == "2026-11-30T00:53:20.999999Z"


def test_logging_imports_neither_datetime_nor_traceback_until_an_exception_is_printed():
    code = (
        "import sys\nfrom specwatch.base.logsetup import configure_logging, get_logger\n"
        "configure_logging('json', 'info')\nlog = get_logger('specwatch')\nlog.info('started')\n"
        "before = sorted(m for m in ('datetime', 'traceback') if m in sys.modules)\n"
        "try:\n    raise ValueError('x')\nexcept ValueError:\n    log.exception('failed')\n"
        "print(before, 'traceback' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[] True"
    assert json.loads(out.stderr.splitlines()[1])["exception"].endswith("ValueError: x")
