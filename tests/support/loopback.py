"""Loopback helpers shared by the tests that start real processes: a free port, waiting for an
HTTP endpoint to answer, and stopping a process that this test started."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import requests


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(log: Path | None, chars: int = 3000) -> str:
    return log.read_text(errors="replace")[-chars:] if log is not None and log.exists() else ""


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None, log: Path | None = None) -> None:
    """Return once `url` answers 200; fail early if `proc` exits, quoting the end of its `log`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode}:\n{_tail(log)}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout}s:\n{_tail(log)}")


def stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; always reaps the process."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
