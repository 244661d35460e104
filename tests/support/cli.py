"""specwatch's command lines run the way a user runs them: a fresh interpreter, its output kept."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping


def run_cli(
    *args: str, module: str = "specwatch.cli", timeout: float = 30, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m MODULE ARGS` to its end; the caller reads the exit status and the output.
    `env` replaces the environment whole (None inherits this one)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
