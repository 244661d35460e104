"""The Source a config asks for, chosen once at start and again only on a reload that switches
modes (as uvicorn's config.lifespan_class): fleet mode when `prometheus:` is set, else the
sidecar's targets.

Each mode's modules are imported here, when it is chosen: a sidecar never loads fleet mode's
queries and evaluator, nor fleet mode the sidecar's scraper and pipeline (start-up cost,
docs/benchmarks.md "Start-up")."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from specwatch.config import Config
from specwatch.view.source import Host, Source

if TYPE_CHECKING:
    from specwatch.sidecar.source import Restore


def source_for(config: Config, host: Host, clock: Callable[[], float], restore: Restore) -> Source:
    """`restore`: the previous pod's evidence read back (`readback:`, sidecar mode only)."""
    if config.prometheus is not None:
        from specwatch.fleet.source import QuerySource

        return QuerySource(config, host, clock)
    from specwatch.sidecar.source import TargetsSource

    return TargetsSource(config, host, clock, restore)
