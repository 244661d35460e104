"""The Source a running specwatch polls, chosen once from the config (and again only on a reload
that switches modes): the sidecar's targets (sidecar/source.py) or the fleet's query API
(fleet/source.py). serve/service.py keeps the loop, reload, publish and lifecycle; each tick it
calls poll, and publishes view() when the poll evaluated."""

from __future__ import annotations

from typing import Protocol

from specwatch.config import Config
from specwatch.view import View


class Host(Protocol):
    """What the service lends its source."""

    def answered(self, target: str, t: float, ok: bool, reason: str | None, message: str) -> None:
        """A target's poll, and why it failed (the drain, the page's last error)."""

    def stopping(self) -> bool:
        """The service is stopping: a long read gives up."""

    def alive(self) -> None:
        """A long read is still going: /healthz must not see a hung poll loop."""


class Source(Protocol):
    mode: str  # sidecar | fleet: named in the logs
    drains: bool  # after SIGTERM, polls on until its targets have gone (serve/drain.py)

    def poll(self) -> bool:
        """One tick: fetch, ingest and, when due, evaluate. True when it evaluated: view() then
        has something new to publish."""

    def view(self) -> View:
        """What the last poll publishes."""

    def reconfigure(self, new: Config) -> list[str] | None:
        """Take a reloaded config in place: what was rebuilt (windows start afresh when it names
        "pipeline"); None when `new` is another source's (the service then builds that one)."""

    def recover(self) -> None:
        """After a poll-loop bug: start the windows afresh from the running config."""

    def close(self) -> None:
        """Close its connections."""
