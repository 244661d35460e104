"""A real Prometheus on loopback for fleet-mode tests: scraping simulated vLLMs, or serving a TSDB
backfilled with promtool. Debian's `prometheus`/`promtool`; tests skip when they are missing."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from support.loopback import wait_http
from support.prometheus import PROMETHEUS, launch_prometheus  # noqa: F401 -- the fleet tests take PROMETHEUS from here

from .openmetrics import recording_to_openmetrics

PROMTOOL = shutil.which("promtool")


@dataclass
class PrometheusProcess:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def raw_samples(self, selector: str, at: float, seconds: int) -> dict[str, list[tuple[float, float]]]:
        """Every stored sample of `selector` in (at - seconds, at], by instance."""
        answer = requests.get(
            f"{self.url}/api/v1/query", params={"query": f"{selector}[{seconds}s]", "time": f"{at:.3f}"}, timeout=10
        ).json()
        out: dict[str, list[tuple[float, float]]] = {}
        for item in answer["data"]["result"]:
            out.setdefault(item["metric"].get("instance", ""), []).extend(
                (float(t), float(v)) for t, v in item["values"]
            )
        return out


def start_prometheus(
    workdir: Path,
    *,
    scrape_targets: list[str] | None = None,
    scrape_interval: str = "1s",
    storage: Path | None = None,
    extra_args: tuple[str, ...] = (),
) -> PrometheusProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"global": {"scrape_interval": scrape_interval, "evaluation_interval": "10s"}}
    if scrape_targets:
        config["scrape_configs"] = [
            {
                "job_name": "vllm",
                "scrape_interval": scrape_interval,
                "scrape_timeout": scrape_interval,
                "static_configs": [{"targets": scrape_targets}],
            }
        ]
    args = (
        "--storage.tsdb.retention.time=20y",
        "--log.level=warn",
        # A test never depends on the machine's speed: on a loaded 2-core machine a backtest's range
        # queries can outlast Prometheus's default 2m evaluation limit.
        "--query.timeout=15m",
        *extra_args,
    )
    process, log, url = launch_prometheus(workdir, config, storage=storage or workdir / "data", args=args)
    prometheus = PrometheusProcess(url, process, log)
    try:
        wait_http(f"{url}/-/ready", 60, process, log)
    except BaseException:
        prometheus.stop()
        raise
    return prometheus


def serve_backfilled(work: Path, recordings: list[tuple[Path, dict[str, str], str]]) -> PrometheusProcess:
    """A Prometheus serving a TSDB that promtool backfilled from recordings, each (path, target
    labels, metric prefix): what it would hold had it scraped the recorded payloads at their times.
    The caller stops it."""
    by_prefix: dict[str, list[tuple[Path, dict[str, str]]]] = {}
    for path, labels, prefix in recordings:
        by_prefix.setdefault(prefix, []).append((path, labels))
    text = ""  # one OpenMetrics file: each prefix's families, then one EOF
    for i, (prefix, group) in enumerate(by_prefix.items()):
        part = work / f"history-{i}.om.txt"
        assert recording_to_openmetrics(group, part, prefix), f"no {prefix} samples in {group}"
        text += part.read_text().removesuffix("# EOF\n")
    openmetrics = work / "history.om.txt"
    openmetrics.write_text(text + "# EOF\n")
    data = work / "data"
    assert PROMTOOL is not None
    subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return start_prometheus(work / "prom", storage=data)


@dataclass
class Backfilled:
    """A Prometheus serving simulated replicas' history (the caller stops it)."""

    prometheus: PrometheusProcess
    work: Path
    recordings: dict[str, Path]  # scenario: its recording
    start: float  # the first and last recorded poll times over every scenario
    end: float


def serve_scenarios(
    work: Path, replicas: list[tuple[Any, dict[str, str]]], *, poll: float, duration: float, seed: int = 3
) -> Backfilled:
    """Each (scenario, target labels) a replica: every scenario (a shipped name or a Scenario) is
    recorded once with the simulator (every `poll` seconds for `duration`), each replica's labels
    added to its scenario's samples, and the whole backfilled by promtool and served
    (serve_backfilled). Recordings are keyed by the scenario's name."""
    from specwatch.sim.record import record
    from specwatch.sim.scenario import load_scenario

    recordings: dict[str, Path] = {}
    sources = []
    for scenario, labels in replicas:
        name = scenario if isinstance(scenario, str) else scenario.name
        if name not in recordings:
            recordings[name] = work / f"{name}.jsonl"
            record(load_scenario(scenario), recordings[name], poll_interval=poll, seed=seed, duration=duration)
        sources.append((recordings[name], labels, "vllm:"))
    times = [json.loads(line)["t"] for path in recordings.values() for line in path.read_text().splitlines()]
    prometheus = serve_backfilled(work, sources)
    return Backfilled(prometheus, work, recordings, min(times), max(times))


def _dependent_rules(rules: Path, out: Path) -> Path | None:
    """The recording rules of `rules` that read another rule's record, written to `out` (None: none)."""
    document = yaml.safe_load(rules.read_text())
    records = {rule["record"] for group in document["groups"] for rule in group["rules"] if "record" in rule}
    groups = []
    for group in document["groups"]:
        dependent = [
            rule for rule in group["rules"] if "record" in rule and any(name in rule["expr"] for name in records)
        ]
        if dependent:
            groups.append({"name": group["name"], "rules": dependent})
    if not groups:
        return None
    out.write_text(yaml.safe_dump({"groups": groups}))
    return out


def with_recorded_rules(served: Backfilled, rules: Path, eval_interval: float) -> Backfilled:
    """promtool evaluates the recording rules of `rules` over the served history (`tsdb
    create-blocks-from rules`, every `eval_interval` from its start to one interval past its end);
    Prometheus restarts on both. promtool reads only what the Prometheus it asks holds, so rules
    reading another rule's record are evaluated again in a second pass, on the first's blocks."""
    assert PROMTOOL is not None
    prometheus = served.prometheus
    data = served.work / "data"
    for step, source in enumerate((rules, _dependent_rules(rules, served.work / "dependent-rules.yaml"))):
        if source is None:
            break
        blocks = served.work / f"rule-blocks-{step}"
        subprocess.run(
            [
                PROMTOOL,
                "tsdb",
                "create-blocks-from",
                "rules",
                f"--start={served.start:.0f}",
                f"--end={served.end + eval_interval:.0f}",
                f"--url={prometheus.url}",
                f"--eval-interval={eval_interval:g}s",
                f"--output-dir={blocks}",
                "--quiet",
                str(source),
            ],
            check=True,
            capture_output=True,
            timeout=600,
        )
        prometheus.stop()
        for block in blocks.iterdir():
            if block.is_dir():
                shutil.move(str(block), data / block.name)
        prometheus = start_prometheus(served.work / f"prom-recorded-{step}", storage=data)
    return Backfilled(prometheus, served.work, served.recordings, served.start, served.end)


@dataclass
class RecordedSim:
    """A simulated vLLM whose every served /metrics payload is kept with its wall time: what
    Prometheus scraped is exactly what the sidecar path will replay."""

    name: str
    scenario: str
    handle: Any
    payloads: list[tuple[float, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    gone: bool = False

    def go_away(self) -> None:
        """Stop answering, like a replica whose process ended: stopping the server alone would
        leave Prometheus's keep-alive connection served by its handler thread."""
        self.gone = True
        self.handle.stop()

    @property
    def instance(self) -> str:
        return f"{self.handle.host}:{self.handle.port}"


def serve_recorded(scenario: str, seed: int, speed: float, name: str) -> RecordedSim:
    from specwatch.sim.server import serve

    handle = serve(scenario, seed=seed, speed=speed)
    recorded = RecordedSim(name, scenario, handle)
    original = handle.snapshot

    def snapshot_and_keep() -> tuple[str, dict[str, Any], list[Any]]:
        if recorded.gone:
            raise ConnectionResetError("replica gone")  # the handler drops the connection quietly
        served_at = time.time()
        text, truth, faults = original()
        with recorded.lock:
            recorded.payloads.append((served_at, text))
        return text, truth, faults

    handle.snapshot = snapshot_and_keep
    return recorded
