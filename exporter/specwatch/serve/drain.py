"""The sidecar's drain after SIGTERM: when vLLM has gone, and how long it may take at most.

The kubelet signals every container of the vLLM pod at once and SIGKILLs what is still running at
the end of the pod's terminationGracePeriodSeconds. specwatch keeps polling (faster) and serving
while vLLM still answers with metrics, so the last windows are scraped, and ends the drain at each
target's first answer that says vLLM has gone:

- a refused or broken connection, a TLS failure, an HTTP error status, a body that is too large or
  not UTF-8 (every ScrapeError reason but `timeout`), or a 200 whose body is not vLLM's metrics (an
  ingest rejected as `parse`, `invalid`, `engine_mismatch`, ...): the first one ends it;
- a timeout: vLLM may be busy draining, so only the second in a row ends it.

`shutdown_drain` caps the whole drain whatever the targets answer; the chart renders it
STOP_MARGIN seconds below the pod's terminationGracePeriodSeconds (docs/kubernetes.md, Shutdown),
the margin being what the process needs to stop after the cap (at most ~2 s) with room to spare.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

__all__ = ["DEFAULT_SHUTDOWN_DRAIN", "DRAIN_POLL_INTERVAL", "STOP_MARGIN", "Drain"]

#: Seconds between polls while draining (or poll_interval, when that is shorter).
DRAIN_POLL_INTERVAL = 0.5
#: Seconds the cap keeps below the pod's grace period (the chart derives shutdown_drain with it).
STOP_MARGIN = 5.0
#: The default cap: Kubernetes' default grace period (30 s) less STOP_MARGIN.
DEFAULT_SHUTDOWN_DRAIN = 30.0 - STOP_MARGIN
#: Consecutive timeouts that end a target's drain (one may be vLLM busy finishing its requests).
TIMEOUTS_TO_END = 2


class Drain:
    """What each target answered since SIGTERM. The poll thread notes every answer; `done` is set
    once every target has ended, and the main thread waits on it (or on the cap, or a signal)."""

    def __init__(self) -> None:
        self.active = False
        self.done = threading.Event()
        self.ended: dict[str, str] = {}  # target -> the answer that ended its drain (a reason)
        self._timeouts: dict[str, int] = {}

    def begin(self) -> None:
        self.active = True

    def note(self, target: str, reason: str | None) -> None:
        """One poll of `target` while draining: None for a metrics answer, else the failure's reason."""
        if not self.active or target in self.ended:
            return
        if reason is None:
            self._timeouts[target] = 0
            return
        if reason == "timeout":
            self._timeouts[target] = self._timeouts.get(target, 0) + 1
            if self._timeouts[target] < TIMEOUTS_TO_END:
                return
        self.ended[target] = reason

    def check(self, targets: Iterable[str]) -> bool:
        """After a poll: whether every target has ended (then `done` is set)."""
        if self.active and all(t in self.ended for t in targets):
            self.done.set()
        return self.done.is_set()

    @staticmethod
    def interval(poll_interval: float) -> float:
        return min(poll_interval, DRAIN_POLL_INTERVAL)
