"""Fleet mode's Source (view/source.py): each tick one FleetSource.poll (the constant query set,
then every replica's evaluation). The first tick of a new evaluator replays the history before it
first (fleet/history.py); its first poll is then at the time the read went up to, so the read's
steps and that poll are backtest's grid. A failed query is counted and logged once by the
evaluator; nothing is served from it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from specwatch.base.logsetup import get_logger
from specwatch.config import Config
from specwatch.fleet.evaluator import FleetEvaluator, FleetSource
from specwatch.fleet.history import DEADLINE, HISTORY_ERROR_REASONS, read_history
from specwatch.view import View
from specwatch.view.change_log import ChangeLog
from specwatch.view.fleet import HistoryRead, replica_name
from specwatch.view.source import Host

__all__ = ["HISTORY_REREAD_SECONDS", "QuerySource"]

#: After a poll-loop bug the fleet evaluator starts afresh; it reads the history again only when the
#: last read is at least this old, so a fault that recurs poll after poll costs one read an hour.
HISTORY_REREAD_SECONDS = 3600.0
log = get_logger("specwatch")


class QuerySource:
    mode = "fleet"
    drains = False  # the replicas are not this pod's: nothing to wait for after SIGTERM

    def __init__(self, config: Config, host: Host, clock: Callable[[], float]):
        self.config = config
        self.fleet = FleetSource(FleetEvaluator(config))
        self._host, self._clock = host, clock
        self._changes = ChangeLog()
        # The history before the first poll, replayed once per new evaluator (fleet/history.py).
        self._history_pending = True
        self.history: HistoryRead | None = None
        self.history_errors = dict.fromkeys(HISTORY_ERROR_REASONS, 0)  # totals: kept across evaluators
        self._history_crashed = False  # the last poll-loop bug came from the history read
        self.history_read_at: float | None = None  # monotonic start of the last history read

    def view(self) -> View:
        return self.fleet.evaluator.view(self.history, dict(self.history_errors))

    def reconfigure(self, new: Config) -> list[str] | None:
        if new.prometheus is None:
            return None
        old, self.config = self.config, new
        if new.fleet_shape() == old.fleet_shape():
            return self.fleet.evaluator.reconfigure(new)  # verdicts are kept
        self._renew()
        return ["fleet"]

    def _renew(self, read_history: bool = True) -> None:
        self.fleet.client.close()
        self.fleet = FleetSource(FleetEvaluator(self.config))
        self._history_pending, self.history = read_history, None

    def recover(self) -> None:
        """A new evaluator reads the history again, unless the bug was in that read (no loop) or the
        last read is recent: a fault that recurs poll after poll must not re-read hours of history
        each time (a re-read storm on Prometheus)."""
        crashed, self._history_crashed = self._history_crashed, False
        last = self.history_read_at
        recent = last is not None and time.monotonic() - last < HISTORY_REREAD_SECONDS
        self._renew(read_history=not (crashed or recent))

    def close(self) -> None:
        self.fleet.client.close()

    def poll(self) -> bool:
        now = self._clock()
        if self._history_pending:
            self._history_pending = False
            self._read_history(now)
            if self._host.stopping():
                return True
        for replica, evaluation in self.fleet.poll(now) or ():
            key = ("verdict", replica, evaluation.stats.route, evaluation.stats.window)
            self._changes.verdict(key, evaluation, replica=replica_name(replica))
        return True  # a fleet poll is its evaluation

    def _read_history(self, now: float) -> None:
        """The history read on its own thread while this one, the evaluator's only other writer,
        waits for it and keeps /healthz ticking (a slow Prometheus must not look like a hung poll
        loop). A failed or cut-short read is counted and logged once; polling goes on. A bug in the
        read is raised here, in the poll thread, for the service's recovery (which then does not
        retry it)."""
        prometheus = self.config.prometheus
        if prometheus is None or prometheus.history_lookback <= 0:
            self.history = HistoryRead(0.0, None, None, 0, 0, 0.0)
            return
        result: list[HistoryRead] = []
        failure: list[Exception] = []
        self.history_read_at = time.monotonic()
        evaluator = self.fleet.evaluator

        def reading() -> None:
            try:
                result.append(read_history(evaluator, now))
            except Exception as exc:  # noqa: BLE001 - raised again in the poll thread below
                failure.append(exc)

        reader = threading.Thread(target=reading, name="specwatch-history", daemon=True)
        reader.start()
        deadline = time.monotonic() + DEADLINE + 10.0  # the read keeps to DEADLINE; this only guards it
        while reader.is_alive() and not self._host.stopping() and time.monotonic() < deadline:
            reader.join(timeout=0.5)
            self._host.alive()
        if self._host.stopping():
            return  # stopping: the reader is a daemon thread, its result is not needed
        if failure or reader.is_alive() or not result:
            self._history_crashed = True  # a bug: the recovery starts afresh, without this read
            if failure:
                raise failure[0]
            raise RuntimeError("the history read did not finish")
        read = self.history = result[0]
        if read.error is not None:
            self.history_errors[read.error] += 1
            log.warning(
                "fleet_history_failed",
                reason=read.error,
                steps=read.steps,
                action="polling live; the learners keep what was read",
            )
        else:
            log.info("fleet_history_read", steps=read.steps, queries=read.queries, seconds=round(read.seconds, 3))
