"""`specwatch record`: poll the configured targets and write a replayable recording.

A recording is JSON lines {"t": unix_seconds, "target": name, "text": exposition} (docs/architecture.md §2);
a failed poll is written as {"t", "target", "error": reason} so replay sees the same faults.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import IO, Any

from specwatch.config import Config
from specwatch.sidecar.scrape import ScrapeError, Scraper, steady_clock


def record(
    config: Config,
    out: IO[str],
    duration: float,
    *,
    clock: Callable[[], float] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_poll: Callable[[dict[str, Any]], None] | None = None,
) -> int:
    """Poll every target each poll_interval for ``duration`` seconds; the number of lines written.
    ``on_poll`` sees each line as written (the CLI's progress and its exit status)."""
    clock = clock or steady_clock()
    scrapers = {
        t.name: Scraper(t.url, timeout=t.timeout, max_bytes=t.max_bytes, headers=t.headers) for t in config.targets
    }
    lines = 0
    end = time.monotonic() + duration
    next_tick = time.monotonic()
    try:
        while time.monotonic() < end:
            for target in config.targets:
                t = clock()
                try:
                    result = scrapers[target.name].fetch()
                    entry = {"t": t, "target": target.name, "text": result.text}
                except ScrapeError as exc:
                    entry = {"t": t, "target": target.name, "error": exc.reason}
                out.write(json.dumps(entry) + "\n")
                lines += 1
                if on_poll is not None:
                    on_poll(entry)
            out.flush()
            next_tick += config.poll_interval
            sleep(max(0.0, min(next_tick, end) - time.monotonic()))
    finally:
        for scraper in scrapers.values():
            scraper.close()
    return lines
