"""The Source a config asks for, chosen once at start and again only on a reload that switches
modes (as uvicorn's config.lifespan_class): fleet mode when `prometheus:` is set, else the
sidecar's targets."""

from __future__ import annotations

from collections.abc import Callable

from specwatch.config import Config
from specwatch.fleet.source import QuerySource
from specwatch.sidecar.source import Restore, TargetsSource
from specwatch.view.source import Host, Source


def source_for(config: Config, host: Host, clock: Callable[[], float], restore: Restore) -> Source:
    """`restore`: the previous pod's evidence read back (`readback:`, sidecar mode only)."""
    if config.prometheus is not None:
        return QuerySource(config, host, clock)
    return TargetsSource(config, host, clock, restore)
