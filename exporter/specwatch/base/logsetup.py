"""structlog set-up shared by every command (JSON or console lines on stderr, filtered by level)."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


def configure_logging(fmt: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
