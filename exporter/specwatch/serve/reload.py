"""Config reload in place: where a new config comes from, what a reload must rebuild, and how the
last load is reported.

The poll thread reloads between two ticks, on SIGHUP and when the config file changes (a Kubernetes
ConfigMap update is an atomic symlink swap, so the file's identity and content are polled; no
inotify). ConfigSource notices a change; Config's *_shape and cost_inputs keys tell Service.apply
and each evaluator's reconfigure() which parts of their state a new config invalidates;
ReloadStatus and ReloadCollector export the outcome under the names Prometheus uses for its own
reloads.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable

import structlog
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from specwatch.config import Config, format_duration

log = structlog.get_logger("specwatch")

FileIdentity = tuple[int, int, int, int]  # (device, inode, mtime ns, size) of the resolved file


class ConfigSource:
    """The config file (or none: env and defaults only) plus the command line's overrides.

    changed() is cheap enough for every tick: one stat; the content is hashed only when the
    file's identity moved, and a change counts only when the bytes differ from the last attempt
    (a ConfigMap resync that rewrites the same content is not a reload)."""

    def __init__(self, path: str | None, load: Callable[[str | None], Config]):
        self.path = path
        self._load = load
        self._identity: FileIdentity | None = self._stat()
        self._digest: str | None = self._hash()

    def _stat(self) -> FileIdentity | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)  # follows the ..data symlink a ConfigMap volume swaps
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)

    def _hash(self) -> str | None:
        if self.path is None:
            return None
        try:
            with open(self.path, "rb") as handle:
                return hashlib.sha256(handle.read()).hexdigest()
        except OSError:
            return None

    def changed(self) -> bool:
        if self.path is None:
            return False
        identity = self._stat()
        if identity == self._identity:
            return False
        self._identity = identity
        digest = self._hash()
        if digest == self._digest:
            return False
        self._digest = digest
        return True

    def load(self) -> Config:
        return self._load(self.path)


class ReloadStatus:
    """What the last config load did, exported under the names Prometheus uses for its own."""

    def __init__(self, error: str | None, now: float, previous_success: float | None = None):
        self.successful = error is None
        self.success_timestamp: float | None = previous_success if error else now
        self.error = error


class ReloadCollector(Collector):
    """specwatch_config_last_reload_successful and ..._success_timestamp_seconds."""

    def __init__(self, status: Callable[[], ReloadStatus]):
        self._status = status

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        status = self._status()
        ok = GaugeMetricFamily(
            "specwatch_config_last_reload_successful",
            "1 if the last config load (start, SIGHUP or file change) succeeded, 0 if it was refused "
            "(the previous config, or none in sidecar mode, keeps running).",
        )
        ok.add_metric([], 1.0 if status.successful else 0.0)
        yield ok
        if status.success_timestamp is not None:
            when = GaugeMetricFamily(
                "specwatch_config_last_reload_success_timestamp_seconds",
                "Unix time of the last successful config load.",
            )
            when.add_metric([], status.success_timestamp)
            yield when


def alert_window_warning(config: Config) -> str | None:
    """The alert rules read one window (alerting.window); if it is not exported they never fire."""
    window = config.alerting.window
    if window in config.windows:
        return None
    label = format_duration(window)
    return (
        f"alerting.window {label} is not among windows [{', '.join(config.window_labels)}]: "
        f'the alert rules read window="{label}" and can never fire; add it to windows or set '
        "alerting.window (the chart's prometheusRule.alertWindow) to one of them"
    )


def warn_about_alert_window(config: Config) -> None:
    if warning := alert_window_warning(config):
        log.warning("alert_window_not_in_windows", message=warning)
