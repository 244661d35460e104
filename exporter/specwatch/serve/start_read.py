"""The families of a read done once at start (sidecar mode's readback, fleet mode's history): a
counter of its failures for every reason, and one gauge of what it read, absent until it is done."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from specwatch.export import contract
from specwatch.export.families import Metric
from specwatch.view import View

#: What a read says now: failures by reason, and what it read (None: not done yet).
StartRead = tuple[Mapping[str, int], float | None]


class StartReadCollector:
    """`errors` ({reason}) and `gauge` of the read `get` returns; nothing when it returns None (no
    such read in this mode)."""

    def __init__(self, errors: str, gauge: str, get: Callable[[], StartRead | None]) -> None:
        self._errors, self._gauge, self._get = errors, gauge, get

    def collect(self) -> Iterable[Metric]:
        read = self._get()
        if read is None:
            return
        counts, value = read
        yield contract.filled(self._errors, (([reason], count) for reason, count in counts.items()))
        if value is not None:
            yield contract.single(self._gauge, value)


def history_read(view: View) -> StartRead | None:
    """Live fleet mode's history read, as the View's fleet section holds it (None: no such read)."""
    fleet = view.fleet
    if fleet is None or fleet.history_errors is None:
        return None
    return fleet.history_errors, fleet.history.steps if fleet.history is not None else None
