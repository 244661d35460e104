"""The process's own families, rendered after the contract's: process_* (memory, CPU, start time and
file descriptors, read from /proc) and python_info, with the names, HELP, types and values of
prometheus_client's ProcessCollector and PlatformCollector, which dashboards and alerts on
exporters expect (tests/unit/export/test_process.py compares them on Linux). Where /proc is not
there, process_* is absent, as theirs is.
"""

from __future__ import annotations

import os
import sys

from specwatch.export.families import Metric

__all__ = ["PlatformCollector", "ProcessCollector"]

#: platform.python_implementation()'s names for sys.implementation's.
_IMPLEMENTATIONS = {"cpython": "CPython", "pypy": "PyPy", "ironpython": "IronPython", "jython": "Jython"}


def _gauge(name: str, help_text: str, value: float, typ: str = "gauge") -> Metric:
    family = Metric(name, help_text, typ)
    family.add_metric([], value)
    return family


class ProcessCollector:
    """process_virtual_memory_bytes, _resident_memory_bytes, _start_time_seconds,
    _cpu_seconds_total, _open_fds and _max_fds of one process (this one by default)."""

    def __init__(self, proc: str = "/proc", pid: str = "self"):
        self._dir = os.path.join(proc, pid)
        try:
            self._ticks = float(os.sysconf("SC_CLK_TCK"))
        except (ValueError, OSError):
            self._ticks = 100.0
        self._pagesize = os.sysconf("SC_PAGE_SIZE")
        self._btime = 0.0  # also whether /proc can be read at all
        try:
            with open(os.path.join(proc, "stat"), "rb") as stat:
                self._btime = next((float(line.split()[1]) for line in stat if line.startswith(b"btime ")), 0.0)
        except OSError:
            pass

    def collect(self) -> list[Metric]:
        if not self._btime:
            return []
        result = []
        try:
            with open(os.path.join(self._dir, "stat"), "rb") as stat:
                parts = stat.read().split(b")")[-1].split()  # after the command name, which may hold spaces
            result += [
                _gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", float(parts[20])),
                _gauge(
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes.",
                    float(parts[21]) * self._pagesize,
                ),
                _gauge(
                    "process_start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    float(parts[19]) / self._ticks + self._btime,
                ),
                _gauge(
                    "process_cpu_seconds_total",
                    "Total user and system CPU time spent in seconds.",
                    float(parts[11]) / self._ticks + float(parts[12]) / self._ticks,
                    "counter",
                ),
            ]
        except OSError:
            pass
        try:
            with open(os.path.join(self._dir, "limits"), "rb") as limits:
                max_fds = next(float(line.split()[3]) for line in limits if line.startswith(b"Max open file"))
            open_fds = len(os.listdir(os.path.join(self._dir, "fd")))
            result += [
                _gauge("process_open_fds", "Number of open file descriptors.", open_fds),
                _gauge("process_max_fds", "Maximum number of open file descriptors.", max_fds),
            ]
        except (OSError, StopIteration):
            pass
        return result


def python_info() -> Metric:
    """python_info{version, implementation, major, minor, patchlevel} 1, as platform names them."""
    version = sys.version.split()[0].split(".")
    if len(version) == 2:
        version.append("0")
    major, minor, patchlevel = version[:3]
    implementation = _IMPLEMENTATIONS.get(sys.implementation.name, sys.implementation.name)
    labels = {
        "version": ".".join(version),
        "implementation": implementation,
        "major": major,
        "minor": minor,
        "patchlevel": patchlevel,
    }
    family = Metric("python_info", "Python platform information", "gauge", tuple(labels))
    family.add_metric(tuple(labels.values()), 1)
    return family


class PlatformCollector:
    """python_info, built once (it cannot change while the process runs)."""

    def __init__(self) -> None:
        self._families = [python_info()]

    def collect(self) -> list[Metric]:
        return self._families
