"""Sidecar mode's Source (view/source.py): every target scraped in parallel each tick, then ingested
in config order by the poll thread, the pipeline's only writer, and evaluated when due
(Config.evaluation_period); target, schema and verdict changes logged once each
(view/change_log.py), not once per poll."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from specwatch.base.logsetup import get_logger
from specwatch.config import Config
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.scrape import ScrapeError, Scraper, ScrapeResult
from specwatch.verdict.grading import WindowSummary
from specwatch.view import View
from specwatch.view.change_log import ChangeLog
from specwatch.view.source import Host

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["Restore", "TargetsSource"]

#: The previous pod's evidence once it has been read back (before-windows, curve knots), else None.
Restore = Callable[[], tuple[Mapping[str, WindowSummary], Mapping[str, tuple[tuple[float, float], ...]]] | None]
log = get_logger("specwatch")


class TargetsSource:
    mode = "sidecar"
    drains = True

    def __init__(self, config: Config, host: Host, clock: Callable[[], float], restore: Restore | None = None):
        self.config = config
        self.pipeline = Pipeline(config)
        self.scrapers = self._scrapers_for(config)
        self._host, self._clock, self._restore = host, clock, restore
        self._changes = ChangeLog()
        # The fetch threads of several targets, started at the first poll that has more than one.
        self._pool: ThreadPoolExecutor | None = None

    @staticmethod
    def _scrapers_for(config: Config) -> dict[str, Scraper]:
        return {
            t.name: Scraper(t.url, timeout=t.timeout, max_bytes=t.max_bytes, headers=t.headers) for t in config.targets
        }

    def view(self) -> View:
        return self.pipeline.view()

    def reconfigure(self, new: Config) -> list[str] | None:
        if new.prometheus is not None:
            return None
        old, rebuilt = self.config, []
        if new.pipeline_shape() != old.pipeline_shape():
            self.pipeline = Pipeline(new).adopt_counters(self.pipeline)  # windows start afresh, counters continue
            rebuilt.append("pipeline")
            self._changes.clear()
        else:
            rebuilt += self.pipeline.reconfigure(new)  # windows and verdicts are kept
        if new.targets != old.targets:
            for scraper in self.scrapers.values():
                scraper.close()
            self.scrapers = self._scrapers_for(new)
            if len(new.targets) != len(old.targets) and self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None  # sized afresh at the next poll that needs one
            rebuilt.append("scrapers")
        self.config = new
        return rebuilt

    def recover(self) -> None:
        self.pipeline = Pipeline(self.config).adopt_counters(self.pipeline)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for scraper in self.scrapers.values():
            scraper.close()

    def _fetch(self, name: str) -> tuple[float, ScrapeResult | ScrapeError]:
        started = self._clock()
        try:
            return started, self.scrapers[name].fetch()
        except ScrapeError as exc:
            # Returned, not raised: drop the traceback and context, whose frames would keep the failed
            # body (up to max_bytes of a gzip bomb) alive until the next poll.
            exc.__context__ = None
            return started, exc.with_traceback(None)

    def _fetch_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            # Here, not at the top: one target (the usual sidecar) is fetched by the poll thread
            # itself, and concurrent.futures brings logging and queue with it.
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=len(self.config.targets), thread_name_prefix="specwatch-fetch")
        return self._pool

    def poll(self) -> bool:
        if self._restore is not None and (restored := self._restore()) is not None:
            self.pipeline.restore(*restored)  # here: the poll thread is the pipeline's only writer
        # Targets are fetched in parallel (a hung one must not delay the others past the interval),
        # then ingested in config order by this one thread, the only writer of the pipeline.
        if len(self.config.targets) > 1:
            results = list(self._fetch_pool().map(self._fetch, [t.name for t in self.config.targets]))
        else:
            results = [self._fetch(self.config.targets[0].name)]
        for target, (now, result) in zip(self.config.targets, results, strict=True):
            self._ingest(target.name, now, result)
        now = self._clock()
        if not self.pipeline.evaluation_due(now):
            return False  # the windows took this poll; the published view stands until the next evaluation
        for evaluation in self.pipeline.evaluate(now):
            self._changes.verdict(("verdict", evaluation.stats.route, evaluation.stats.window), evaluation)
        return True

    def _ingest(self, name: str, now: float, result: ScrapeResult | ScrapeError) -> None:
        if isinstance(result, ScrapeError):
            self._host.answered(name, now, False, result.reason, str(result))
            self.pipeline.ingest_error(name, now, result.reason)
            self._changes.target_down(name, "target_down", result.reason, str(result))
            return
        outcome = self.pipeline.ingest(name, now, result.text, result.duration)
        self._host.answered(name, now, outcome.ok, outcome.reason, outcome.message or "")
        if not outcome.ok:
            self._changes.target_down(name, "target_rejected", outcome.reason, outcome.message or "")
            return
        over = tuple(sorted((k, n) for k, n in outcome.dropped.items() if n)) or None
        if self._changes.changed(("dropped", name), over) and over:
            # Once per change: routes or engines past specwatch's bounds (docs/architecture.md §2).
            log.warning("payload_over_bounds", target=name, dropped=dict(over))
        # Asked before the line's fields are built: on almost every poll nothing changed.
        if self._changes.changed(("target", name), ("up",)):
            log.info("target_up", target=name, duration_seconds=round(result.duration, 4))
        if self._changes.changed(("schema", name), (outcome.engine, outcome.schema)):
            log.info(
                "schema_detected",
                target=name,
                engine=outcome.engine,
                schema=outcome.schema,
                routes=list(outcome.routes),
            )
        if outcome.resets:
            log.info("counter_reset", target=name, routes=outcome.resets)
