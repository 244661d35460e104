"""`bench/soak.py` in a process of its own, started now and read later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def live_soak_args() -> tuple[tuple[str, ...], float]:
    """The live soak the tests run: SPECWATCH_SOAK_MINUTES real minutes (default 1) at a 1 s poll
    interval, and the seconds it may take from its start."""
    minutes = float(os.environ.get("SPECWATCH_SOAK_MINUTES", "1"))
    return ("live", "--minutes", str(minutes), "--poll-interval", "1"), 120 + minutes * 90


class Soak:
    """One soak run; result() waits for its JSON document, at most `timeout` s from its start."""

    def __init__(self, *args: str, timeout: float):
        self.args, self.timeout = args, timeout
        # Files, not pipes: nobody reads the output until result(), and a full pipe would stall it.
        # Open for the soak's whole life; closed by result() or stop().
        self._out = tempfile.TemporaryFile()  # noqa: SIM115
        self._err = tempfile.TemporaryFile()  # noqa: SIM115
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "soak.py"), *args],
            stdout=self._out,
            stderr=self._err,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )

    def result(self) -> dict:
        try:
            self.proc.wait(timeout=max(0.0, self.started + self.timeout - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        self._out.seek(0)
        self._err.seek(0)
        stdout, stderr = self._out.read().decode(), self._err.read().decode()
        self._out.close()
        self._err.close()
        assert stdout, stderr[-3000:]
        result = json.loads(stdout)
        print(f"\nsoak {self.args}: " + json.dumps({k: result[k] for k in result if k not in ("series",)}))
        return result

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._out.close()
        self._err.close()
