"""A real Prometheus (Debian's `prometheus`) on loopback for the end-to-end tests: scraping and rule
evaluation every second, its own TSDB under the test's directory, started and awaited one way.
launch_prometheus is the start alone, which the fleet harness (tests/system/fleet/promharness.py)
uses too for its backfilled and long-lived servers."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from support.loopback import free_port, wait_http

PROMETHEUS = shutil.which("prometheus")
#: Scrape and evaluate every second: the accelerated scenarios' windows are seconds long.
FAST_GLOBAL = {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"}


def static_job(job: str, target: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """A scrape job of one target with the labels a Kubernetes scrape would add (namespace, pod)."""
    return {"job_name": job, "static_configs": [{"targets": [target], "labels": dict(labels)}]}


def launch_prometheus(
    work: Path, config: Mapping[str, Any], *, storage: Path | None = None, args: Sequence[str] = ()
) -> tuple[subprocess.Popen, Path, str]:
    """Write `config` to WORK/prometheus.yml and start Prometheus on a free loopback port with its TSDB
    in `storage` (default WORK/prom-data), its output in WORK/prometheus.log and `args` added; returns
    (process, log, base URL) at once: the caller waits for it and stops it."""
    assert PROMETHEUS is not None, "Debian's prometheus is not installed (skip the test before calling)"
    config_file, log = work / "prometheus.yml", work / "prometheus.log"
    config_file.write_text(yaml.safe_dump(dict(config)))
    port = free_port()
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config_file}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.path={storage or work / 'prom-data'}",
            *args,
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    return proc, log, f"http://127.0.0.1:{port}"


def start_prometheus(
    work: Path,
    scrape_configs: Sequence[Mapping[str, Any]],
    procs: list[tuple[subprocess.Popen, Path]],
    *,
    rule_files: Sequence[Path] = (),
    alertmanager: str | None = None,
) -> str:
    """Start Prometheus with `scrape_configs` (plus `rule_files` and an `alertmanager` host:port),
    register it in `procs` (stopped by the caller's cleanup, also when it never gets ready), wait
    until it is ready and return its query API's base URL (…/api/v1)."""
    config: dict[str, Any] = {"global": FAST_GLOBAL, "scrape_configs": [dict(c) for c in scrape_configs]}
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    if alertmanager is not None:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    proc, log, url = launch_prometheus(work, config)
    procs.append((proc, log))
    wait_http(f"{url}/-/ready", 30, proc, log)
    return f"{url}/api/v1"
