"""Config reload in place: where a new config comes from, what a reload must rebuild, and how the
last load is reported.

The poll thread reloads between two ticks, on SIGHUP and when the config file changes (a Kubernetes
ConfigMap update is an atomic symlink swap, so the file's identity and content are polled; no
inotify). The file is only ever read when it is a regular file of at most MAX_CONFIG_BYTES,
opened non-blocking: a FIFO, a device or a socket at the path would block the poll thread on open
or read (and /metrics would serve frozen numbers), so it is refused as a failed reload instead.
ConfigSource notices a change; Config's *_shape and cost_inputs keys tell Service.apply and each
evaluator's reconfigure() which parts of their state a new config invalidates; ReloadStatus and
ReloadCollector export the outcome under the names Prometheus uses for its own reloads.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable

from specwatch.base.logsetup import get_logger
from specwatch.config import Config, ConfigError, format_duration
from specwatch.export import contract
from specwatch.export.families import Metric

log = get_logger("specwatch")

FileIdentity = tuple[int, int, int, int]  # (device, inode, mtime ns, size) of the resolved file
MAX_CONFIG_BYTES = 4 * 2**20  # a config is a few KiB; a bigger file is refused, not read


def read_regular(path: str) -> bytes:
    """The bytes of `path` if it is a regular file of at most MAX_CONFIG_BYTES, else ConfigError.
    Opened with O_NONBLOCK, so a FIFO (which blocks open until a writer comes) cannot wedge the
    caller; the type is checked on the opened descriptor, so a swap after a stat cannot fool it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise ConfigError("config", f"file not found: {path}") from None
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = (
                "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else "not a file"
            )
            raise ConfigError("config", f"{path} is not a regular file ({kind}): refused, reading it could block")
        if st.st_size > MAX_CONFIG_BYTES:
            raise ConfigError("config", f"{path} is {st.st_size} bytes, over {MAX_CONFIG_BYTES}: refused")
        chunks, size = [], 0
        while size <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_CONFIG_BYTES:
            raise ConfigError("config", f"{path} grew over {MAX_CONFIG_BYTES} bytes: refused")
        return b"".join(chunks)
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


class ConfigSource:
    """The config file (or none: env and defaults only) plus the command line's overrides.

    changed() is cheap enough for every tick: one stat; the content is read only when the file's
    identity moved, and a change counts only when the bytes differ from the last attempt's (a
    ConfigMap resync that rewrites the same content is not a reload; the bytes are kept, bounded
    as read_regular bounds them)."""

    def __init__(self, path: str | None, load: Callable[[str | None], Config]):
        self.path = path
        self._load = load
        self._identity: FileIdentity | None = self._stat()
        self._content: bytes | None = self._read()

    def _stat(self) -> FileIdentity | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)  # follows the ..data symlink a ConfigMap volume swaps
        except OSError:
            return None
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)

    def _read(self) -> bytes | None:
        if self.path is None:
            return None
        try:
            return read_regular(self.path)
        except ConfigError:
            return None

    def changed(self) -> bool:
        if self.path is None:
            return False
        identity = self._stat()
        if identity == self._identity:
            return False
        self._identity = identity
        content = self._read()
        if content == self._content:
            return False
        self._content = content
        return True

    def load(self) -> Config:
        if self.path is not None:
            read_regular(self.path)  # refuses a FIFO, device or huge file before the loader opens it
        return self._load(self.path)


class ReloadStatus:
    """What the last config load did, exported under the names Prometheus uses for its own."""

    def __init__(self, error: str | None, now: float, previous_success: float | None = None):
        self.successful = error is None
        self.success_timestamp: float | None = previous_success if error else now
        self.error = error


class ReloadCollector:
    """specwatch_config_last_reload_successful and ..._success_timestamp_seconds."""

    def __init__(self, status: Callable[[], ReloadStatus]):
        self._status = status

    def collect(self) -> Iterable[Metric]:
        status = self._status()
        yield contract.single("specwatch_config_last_reload_successful", 1.0 if status.successful else 0.0)
        if status.success_timestamp is not None:
            yield contract.single("specwatch_config_last_reload_success_timestamp_seconds", status.success_timestamp)


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
