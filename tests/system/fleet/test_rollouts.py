"""A recommendation applied the Kubernetes way: the pod is replaced, so the simulated vLLM and its
sidecar are both stopped and new processes started (new K, new specwatch), while a real Prometheus
scrapes them. The new sidecar reads back the old one's before-window from that Prometheus
(`readback:`) and grades the new draft length; a fleet-mode specwatch reading the same Prometheus
grades the rollout across the two replicas. Both graded gains are within 10 % of the simulator's
true change in tokens/s (closed loop at the same load: the per-request decode speed)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from specwatch.config import ReadbackConfig
from specwatch.serve.readback import Readback, readback_query
from specwatch.sim.scenario import load_scenario
from specwatch.sim.sidecar_config import sidecar_config_for
from support.builders import pod_scenario
from support.loopback import free_port, stop_process, wait_http

from .promharness import PROMETHEUS, start_prometheus

SPEED = 4.0  # sim seconds per wall second
WINDOWS = ("10s", "30s")
POD_LIFE = 60.0  # wall seconds each pod serves: the longest window fills with 30 s to spare, so a loaded machine still reads it
SETTLED = 10.0  # wall seconds after a pod's start before its tokens/s is taken as its truth


def write_scenario(path: Path, k: int) -> Path:
    path.write_text(yaml.safe_dump(pod_scenario(k, "4h")))
    return path


class Pod:
    """One vLLM pod: the simulated vLLM and its sidecar, two processes started and stopped together."""

    def __init__(self, work: Path, k: int, seed: int, sim_port: int, sidecar_port: int, prometheus_url: str):
        self.work, self.sim_port, self.sidecar_port = work, sim_port, sidecar_port
        work.mkdir(parents=True, exist_ok=True)
        scenario = write_scenario(work / "scenario.yaml", k)
        self.sim = subprocess.Popen(
            [sys.executable, "-m", "specwatch.sim", "--scenario", str(scenario), "--port", str(sim_port)]
            + ["--speed", str(SPEED), "--seed", str(seed), "--truth-every", "0s"],
            stdout=subprocess.DEVNULL,
            stderr=(work / "sim.log").open("wb"),
        )
        config = sidecar_config_for(
            load_scenario(scenario),
            target_url=f"http://127.0.0.1:{sim_port}/metrics",
            listen=f"127.0.0.1:{sidecar_port}",
            poll_interval=1.0,
            windows=WINDOWS,
            speed=SPEED,
        )
        config["shutdown_drain"] = "0s"
        config["log"] = {"format": "json", "level": "info"}  # the read-back's outcome is logged at info
        config["readback"] = {"url": prometheus_url, "selector": '{job="vllm"}', "timeout": "3s", "lookback": "10m"}
        (work / "specwatch.yaml").write_text(json.dumps(config))
        self.log = work / "specwatch.log"
        self.sidecar = subprocess.Popen(
            [sys.executable, "-m", "specwatch.cli", "run", "--config", str(work / "specwatch.yaml")],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
        )
        wait_http(f"http://127.0.0.1:{sim_port}/metrics", 30, self.sim, work / "sim.log")
        wait_http(f"http://127.0.0.1:{sidecar_port}/healthz", 30, self.sidecar, self.log)
        self.marks: list[tuple[float, float]] = []

    def mark(self) -> None:
        """The simulator's generated tokens now (its truth)."""
        text = requests.get(f"http://127.0.0.1:{self.sim_port}/metrics", timeout=5).text
        tokens = sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "vllm:generation_tokens_total"
        )
        self.marks.append((time.monotonic(), tokens))

    @property
    def tokens_per_second(self) -> float:
        (t0, n0), (t1, n1) = self.marks[0], self.marks[-1]
        return (n1 - n0) / (t1 - t0)

    def status(self) -> dict:
        return requests.get(f"http://127.0.0.1:{self.sidecar_port}/api/v1/status", timeout=5).json()

    def diagnosis(self) -> str:
        """What the sidecar says about its read-back and grading: for a failing assertion's message."""
        try:
            metrics = requests.get(f"http://127.0.0.1:{self.sidecar_port}/metrics", timeout=5).text
        except requests.RequestException as exc:
            metrics = f"(no /metrics: {exc})"
        lines = [line for line in metrics.splitlines() if line.startswith(("specwatch_readback", "specwatch_advice"))]
        log = self.log.read_text(errors="replace").splitlines()
        return "\n".join(["/metrics:", *lines, "log (last 30 lines):", *log[-30:]])

    def replace(self) -> None:
        """The pod goes: both processes end."""
        stop_process(self.sidecar)
        stop_process(self.sim)


def graded_or_last(read: Callable[[], dict | None], patience: float = 30.0) -> dict | None:
    """The grading once it says `graded`, or the last one read when `patience` wall seconds pass."""
    deadline = time.monotonic() + patience
    result = read()
    while (result is None or result.get("status") != "graded") and time.monotonic() < deadline:
        time.sleep(1.0)
        result = read()
    return result


def live(pod: Pod) -> None:
    time.sleep(SETTLED)
    pod.mark()
    time.sleep(POD_LIFE - SETTLED)
    pod.mark()


@pytest.mark.e2e
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed")
def test_a_change_applied_by_replacing_the_pod_is_graded_within_10_percent_in_sidecar_and_fleet_mode(
    tmp_path: Path,
) -> None:
    ports = {name: free_port() for name in ("sim_old", "sidecar_old", "sim_new", "sidecar_new", "fleet")}
    scraped = [f"127.0.0.1:{ports[p]}" for p in ("sim_old", "sidecar_old", "sim_new", "sidecar_new")]
    prometheus = start_prometheus(tmp_path / "prom", scrape_targets=scraped)
    fleet_config = tmp_path / "fleet.yaml"
    fleet_config.write_text(
        json.dumps(
            {
                **{
                    k: v
                    for k, v in sidecar_config_for(
                        load_scenario(write_scenario(tmp_path / "fleet-scenario.yaml", 4)),
                        target_url="http://unused/metrics",
                        listen=f"127.0.0.1:{ports['fleet']}",
                        poll_interval=2.0,
                        windows=WINDOWS,
                    ).items()
                    if k not in ("targets", "draft")
                },
                "draft": {"method": "eagle3"},
                "prometheus": {"url": prometheus.url, "selector": '{job="vllm"}', "scrape_interval": "1s"},
            }
        )
    )
    fleet_log = tmp_path / "fleet.log"
    fleet = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "run", "--config", str(fleet_config)],
        stdout=subprocess.DEVNULL,
        stderr=fleet_log.open("wb"),
    )
    pods: list[Pod] = []
    try:
        wait_http(f"http://127.0.0.1:{ports['fleet']}/healthz", 30, fleet, fleet_log)
        old = Pod(tmp_path / "old", 4, 1, ports["sim_old"], ports["sidecar_old"], prometheus.url)
        pods.append(old)
        live(old)
        before = old.status()["routes"][0]
        # The advice applied: shorten to K=2, or (interval reaching 1) the restart with K'=2 to measure.
        advised = before["windows"]["30s"]
        assert advised["verdict"] == "shorten" or (
            advised["verdict"] == "undecided"
            and advised["measurement"]["kind"] == "restart_with_draft_length"
            and advised["measurement"]["draft_length"] == 2
        ), before
        old.replace()
        new = Pod(tmp_path / "new", 2, 2, ports["sim_new"], ports["sidecar_new"], prometheus.url)
        pods.append(new)
        live(new)
        true_gain = new.tokens_per_second / old.tokens_per_second
        assert true_gain > 1 / 0.9  # larger than the tolerance: a grading that saw no change fails

        # Sidecar mode: the new sidecar graded against the old pod's window, read back. The pod keeps
        # serving at the same load while we wait: on a loaded machine the last poll can lag the window.
        grading = graded_or_last(lambda: new.status()["routes"][0]["grading"])
        assert grading is not None and grading["status"] == "graded", f"{grading}\n{new.diagnosis()}"
        assert grading["before"]["origin"] == "previous_pod"
        assert grading["change"]["draft_length_before"] == pytest.approx(4.0, abs=0.05)
        assert grading["change"]["draft_length_after"] == pytest.approx(2.0, abs=0.05)
        assert grading["measured"]["gain_ratio"] == pytest.approx(true_gain, rel=0.10)
        assert grading["after"]["span_seconds"] >= 0.9 * 30  # graded on the longest window, filled
        assert grading["predicted_gain_ratio"] > 1
        metrics = requests.get(f"http://127.0.0.1:{ports['sidecar_new']}/metrics", timeout=5).text
        assert "specwatch_readback_restored_routes 1.0" in metrics

        # Fleet mode: the old replica's windows against the new replica's.
        def fleet_status() -> dict:
            return requests.get(f"http://127.0.0.1:{ports['fleet']}/api/v1/status", timeout=5).json()

        # fleet mode reads Prometheus one scrape later than the sidecar: more patience on a loaded machine
        rollout = graded_or_last(lambda: fleet_status()["rollouts"].get("chat"), patience=90.0)
        status = fleet_status()
        assert rollout is not None and rollout["status"] == "graded", (
            f"{status['rollouts']}\nfleet log (last 30 lines):\n"
            + "\n".join(fleet_log.read_text(errors="replace").splitlines()[-30:])
        )
        assert rollout["change"]["draft_length_before"] == pytest.approx(4.0, abs=0.05)
        assert rollout["change"]["draft_length_after"] == pytest.approx(2.0, abs=0.05)
        assert rollout["measured"]["gain_ratio"] == pytest.approx(true_gain, rel=0.10)
        assert rollout["after"]["span_seconds"] >= 0.9 * 30
        fleet_metrics = requests.get(f"http://127.0.0.1:{ports['fleet']}/metrics", timeout=5).text
        assert 'specwatch_advice_measured_gain_ratio{route="chat"}' in fleet_metrics
        assert rollout["before"]["batch_size"] == pytest.approx(rollout["after"]["batch_size"], rel=0.2)
    finally:
        for pod in pods:
            pod.replace()
        stop_process(fleet)
        prometheus.stop()


@pytest.mark.e2e
@pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed")
def test_a_readback_while_the_old_pod_still_runs_restores_its_window(tmp_path: Path) -> None:
    """A rolling update starts the new pod before the old one goes: the old sidecar's newest sample
    is then the range query's last step, which the query API stamps at `now` rounded to the
    millisecond — here, deliberately, rounded up."""
    ports = {name: free_port() for name in ("sim", "sidecar")}
    prometheus = start_prometheus(tmp_path / "prom", scrape_targets=[f"127.0.0.1:{p}" for p in ports.values()])
    config = ReadbackConfig(url=prometheus.url, selector='{job="vllm"}', timeout=5.0, lookback=600.0)
    old = None
    try:
        old = Pod(tmp_path / "old", 4, 1, ports["sim"], ports["sidecar"], prometheus.url)
        deadline = time.monotonic() + 90.0
        while time.monotonic() < deadline:  # until Prometheus holds the old sidecar's before-window
            answer = requests.get(
                f"{prometheus.url}/api/v1/query", params={"query": readback_query(config)}, timeout=5
            ).json()
            if len(answer["data"]["result"]) >= 8:
                break
            time.sleep(1.0)
        now = math.floor(time.time()) + 0.9996  # written as the next second: 0.4 ms after now
        readback = Readback(config, pauses=())
        readback.run(now)
        restored = readback.take()
        assert restored is not None and restored.routes == ["chat"], (readback.errors, old.diagnosis())
        assert restored.before_windows["chat"].draft_length == pytest.approx(4.0, abs=0.05)
    finally:
        if old is not None:
            old.replace()
        prometheus.stop()
