"""specwatch's command lines run the way a user runs them: a fresh interpreter, its output kept."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from support.loopback import wait_http
from support.paths import REPO


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


def specwatch_command() -> list[str]:
    """The project's own `specwatch` console script, from the interpreter running the tests (else that
    interpreter calling the CLI's main, as the script does)."""
    exe = Path(sys.executable).parent / "specwatch"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("specwatch")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from specwatch.cli.main import main; sys.exit(main())"]


def start_specwatch(
    config: Mapping[str, Any],
    work: Path,
    procs: list[tuple[subprocess.Popen, Path]],
    *,
    name: str = "specwatch",
    ready: str = "/healthz",
) -> str:
    """`specwatch run` on `config` (written to WORK/NAME.yaml, its output in WORK/NAME.log), with this
    checkout's exporter first on its path; registered in `procs` (stopped by the caller's cleanup,
    also when it never gets ready). Returns its base URL once `ready` answers there."""
    path, log = work / f"{name}.yaml", work / f"{name}.log"
    path.write_text(yaml.safe_dump(dict(config)), encoding="utf-8")
    path_entries = [str(REPO / "exporter"), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path_entries)))
    proc = subprocess.Popen(
        [*specwatch_command(), "run", "--config", str(path)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=env,
        cwd=work,
    )
    procs.append((proc, log))
    url = f"http://{config['listen']}"
    wait_http(url + ready, 30, proc, log)
    return url
