"""`specwatch run` as a real subprocess on loopback, for the tests that need the whole process:
environment variables, logs, signals, memory and concurrent HTTP clients."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import requests

from support.loopback import free_port


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class Running:
    def __init__(self, proc: subprocess.Popen, base: str, log_path: Path):
        self.proc = proc
        self.base = base
        self.log_path = log_path
        self.http = requests.Session()
        self.http.trust_env = False

    def get(self, path: str, **kwargs) -> requests.Response:
        return self.http.get(self.base + path, timeout=kwargs.pop("timeout", 5), **kwargs)

    def metrics(self) -> str:
        response = self.get("/metrics")
        assert response.status_code == 200
        return response.text

    def wait_for(self, predicate, timeout: float = 20.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"specwatch exited: {self.logs()[-2000:]}"
            try:
                result = predicate()
            except requests.RequestException:
                result = None
            if result:
                return result
            time.sleep(0.1)
        raise AssertionError(f"{what} not met in {timeout} s; logs: {self.logs()[-2000:]}")

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def spawn_sidecar(tmp_path: Path, config: dict, *, env: dict | None = None, drop_env: tuple[str, ...] = ()) -> Running:
    """`specwatch run` on `config` (listening on a free loopback port unless `config` says where),
    started and not awaited: the caller stops it."""
    port = free_port()
    config = {"listen": f"127.0.0.1:{port}", **config}
    path = tmp_path / "specwatch.yaml"
    path.write_text(json.dumps(config))
    full_env = {k: v for k, v in os.environ.items() if k not in drop_env}
    full_env.update(env or {})
    log_path = tmp_path / "specwatch.log"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specwatch.cli", "run", "--config", str(path)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=full_env,
        )
    return Running(proc, f"http://{config['listen']}", log_path)


@contextmanager
def sidecar_process(tmp_path: Path, config: dict, *, env: dict | None = None, drop_env: tuple[str, ...] = ()):
    """`specwatch run` on `config`, once it is ready; killed when the block ends."""
    running = spawn_sidecar(tmp_path, config, env=env, drop_env=drop_env)
    proc = running.proc
    try:
        running.wait_for(lambda: running.get("/readyz", timeout=1).status_code == 200, what="ready")
        yield running
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        running.http.close()
