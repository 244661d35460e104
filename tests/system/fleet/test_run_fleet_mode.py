"""`specwatch run` in fleet mode: the process reads every replica from a real Prometheus that scrapes
simulated vLLMs, and serves each replica's series with its replica labels on the same hardened HTTP
server as the sidecar (/metrics, /healthz, /readyz, /api/v1/status); a config reload keeps working,
and a reload may switch between sidecar and fleet mode."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from specwatch import config as config_mod
from specwatch.serve.service import Service
from specwatch.sim.server import serve
from support.loopback import free_port, stop_process, wait_http

from .promharness import PROMETHEUS, start_prometheus

SCENARIOS = ("steady", "alpha-drop")
FLEET = {"windows": ["10s", "30s"], "poll_interval": "2s", "decision": {"min_drafts": 20, "hold": 1}}


def _samples(text: str, name: str) -> list[dict[str, str]]:
    return [dict(s.labels) for family in text_string_to_metric_families(text) for s in family.samples if s.name == name]


def _write(path: Path, listen: str, prometheus_url: str, **extra: object) -> None:
    path.write_text(
        json.dumps(
            {**FLEET, "listen": listen, **extra, "prometheus": {"url": prometheus_url, "selector": '{job="vllm"}'}}
        )
    )


@pytest.mark.e2e
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed")
def test_run_in_fleet_mode_serves_every_replica_with_its_labels_and_reloads(tmp_path: Path) -> None:
    sims = [serve(scenario, seed=i, speed=4.0) for i, scenario in enumerate(SCENARIOS)]
    instances = {f"{s.host}:{s.port}" for s in sims}
    prometheus = start_prometheus(tmp_path / "prom", scrape_targets=sorted(instances))
    port = free_port()
    config = tmp_path / "fleet.yaml"
    _write(config, f"127.0.0.1:{port}", prometheus.url)
    log = tmp_path / "specwatch.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "run", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/readyz", 60, proc, log)
        assert requests.get(base + "/healthz", timeout=5).status_code == 200
        deadline = time.monotonic() + 90
        served: set[str] = set()
        while time.monotonic() < deadline and served != instances:
            text = requests.get(base + "/metrics", timeout=5).text
            served = {labels["instance"] for labels in _samples(text, "specwatch_acceptance_ratio")}
            time.sleep(1)
        assert served == instances, f"every replica's alpha on /metrics, with its instance label:\n{text[-3000:]}"
        for labels in _samples(text, "specwatch_verdict"):
            assert labels["target"] == labels["instance"], "target is the replica's name in fleet mode"
        assert _samples(text, "specwatch_prometheus_up") and not _samples(text, "specwatch_target_up")
        status = requests.get(base + "/api/v1/status", timeout=5).json()
        assert status["mode"] == "fleet" and status["prometheus"]["up"] is True
        assert {r["replica"]["instance"] for r in status["routes"]} == instances

        # A reload that changes only a decision threshold keeps the replicas' verdicts and series.
        _write(config, f"127.0.0.1:{port}", prometheus.url, decision={"min_drafts": 20, "hold": 1, "margin": 0.03})
        proc.send_signal(signal.SIGHUP)
        time.sleep(5)
        text = requests.get(base + "/metrics", timeout=5).text
        assert "specwatch_config_last_reload_successful 1.0" in text
        assert {labels["instance"] for labels in _samples(text, "specwatch_acceptance_ratio")} == instances
    finally:
        stop_process(proc)
        prometheus.stop()
        for sim in sims:
            sim.stop()
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    started = next(e for e in events if e["event"] == "started")
    assert started["mode"] == "fleet" and started["targets"] == []
    reloaded = [e for e in events if e["event"] == "config_reloaded"]
    assert reloaded and reloaded[-1]["rebuilt"] == [] and reloaded[-1]["mode"] == "fleet"


def test_a_reload_switches_between_sidecar_and_fleet_mode_on_one_registry() -> None:
    """No Prometheus needed: a query API that refuses connections is counted, and /metrics shows
    fleet mode's families (not the sidecar's) until the config switches back."""
    sidecar = config_mod.from_mapping({"targets": [{"url": f"http://127.0.0.1:{free_port()}/metrics"}]}, environ={})
    fleet = config_mod.from_mapping({"prometheus": {"url": f"http://127.0.0.1:{free_port()}"}}, environ={})
    service = Service(sidecar)
    try:
        service.poll_once()
        assert "specwatch_target_up{" in service.published.metrics.decode()
        service.apply(fleet)
        service.poll_once()
        text = service.published.metrics.decode()
        assert "specwatch_prometheus_up 0.0" in text
        assert 'specwatch_prometheus_query_errors_total{reason="connect"} 1.0' in text
        assert "specwatch_target_up" not in text and text.count("# TYPE specwatch_build_info ") == 1
        assert json.loads(service.published.status)["mode"] == "fleet"
        service.apply(sidecar)
        service.poll_once()
        text = service.published.metrics.decode()
        assert "specwatch_target_up{" in text and "specwatch_prometheus_up" not in text
    finally:
        service.stop()
