"""What the real-server harnesses (vLLM, llama.cpp) share: a cache folder per machine, a lock that
serialises builds in it between concurrent test runs, commands logged to a file, and telling a
failure of the machine (the test skips) from a failure of the code (it fails)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

# Installer output that means "this machine cannot build it", not "our code is wrong".
ENV_MARKERS = (
    "No matching distribution found",
    "Could not find a version that satisfies",
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Max retries exceeded",
    "No space left on device",
    "ReadTimeoutError",
    "ConnectionResetError",
)


class EnvironmentUnavailable(RuntimeError):
    """The server cannot be provided here for an environmental reason (skip, don't fail)."""


def cache_dir(variable: str, name: str) -> Path:
    """The folder named by the environment variable, else ~/.cache/<name>; created."""
    d = Path(os.environ.get(variable) or Path.home() / ".cache" / name)
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def locked(folder: Path, name: str) -> Iterator[None]:
    """Serialise builds in `folder` between concurrent test runs on one machine."""
    with open(folder / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_logged(cmd: list[str], logfile: Path, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """Run `cmd` with its output appended to `logfile` after a line naming it."""
    with open(logfile, "a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        return subprocess.run(
            cmd, check=False, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, stdin=subprocess.DEVNULL
        )


def run_checked(cmd: list[str], logfile: Path, timeout: float, what: str | None = None) -> None:
    """`run_logged`; a failure whose log shows an environmental cause raises EnvironmentUnavailable,
    any other RuntimeError. `what` names the command in the message (default: the command)."""
    if run_logged(cmd, logfile, timeout).returncode != 0:
        last = tail(logfile, 40)
        if any(m in last for m in ENV_MARKERS):
            raise EnvironmentUnavailable(f"{what or cmd[0]} failed for an environmental reason:\n{last}")
        raise RuntimeError(f"{what or ' '.join(cmd)} failed:\n{last}")


def tail(path: Path, n: int = 60) -> str:
    """The last `n` lines of a log, or a line saying it is missing."""
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-n:])
    except OSError:
        return f"(no log at {path})"
