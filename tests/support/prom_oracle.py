"""prometheus_client as the oracle of /metrics: its renderings of specwatch's families (which have
its Metric's shape, export/families.py), to compare byte for byte with export/metrics_text.py's."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import generate_latest
from prometheus_client.openmetrics import exposition as openmetrics


class _Families:
    """Already collected families as the collector prometheus_client's renderers take."""

    def __init__(self, families: Iterable[object]):
        self._families = list(families)

    def collect(self):
        return self._families


def plain_text(*family_lists: Sequence[object]) -> bytes:
    """prometheus_client's text rendering of the families, in order."""
    return generate_latest(_Families(f for families in family_lists for f in families))


def plain_openmetrics(*family_lists: Sequence[object]) -> bytes:
    """prometheus_client's OpenMetrics 1.0.0 rendering of the families, in order (underscore escaping)."""
    return openmetrics.generate_latest(
        _Families(f for families in family_lists for f in families), escaping=openmetrics.UNDERSCORES, version="1.0.0"
    )
