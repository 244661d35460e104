"""Soak campaigns: noisy but stable traffic above break-even, for hours.

    python bench/soak.py replay --hours 24        # 17 280 polls at 5 s through `specwatch replay`'s path
    python bench/soak.py live --minutes 10        # `specwatch run` against the simulated vLLM, fast polls

Both print one JSON document: polls, verdict changes after the first verdict, RSS samples (KiB)
after warm-up and their drift, series counts, scrape errors; exit status 1 if the soak criteria
fail (any verdict change, RSS drift over 10 %, series growth, any scrape error in live mode).

replay: the simulator renders the scenario (tests/system/reliability/soak-noisy-stable.yaml) poll by poll
in the recording format of `sim.record` ({"t", "target", "text"} lines), streamed into
specwatch.sidecar.replay.replay() instead of a ~1 GB file; RSS is this process's, sampled every simulated hour.
live: `specwatch run` as a subprocess polling `sim.serve()` of the same scenario on loopback (a
speedup of about 2.9x, clear of the verdict's interval, so `keep` is the one right answer); RSS is
the sidecar's.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "tests" / "system" / "reliability" / "soak-noisy-stable.yaml"
RSS_TOLERANCE = 0.10


def rss_kib(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _config(
    url: str,
    listen: str,
    poll_interval: float,
    windows: tuple[str, ...],
    min_drafts: int = 500,
    scenario: str = str(SCENARIO),
):
    from specwatch.config import from_mapping
    from specwatch.sim import load_scenario
    from specwatch.sim.sidecar_config import sidecar_config_for

    raw = sidecar_config_for(
        load_scenario(scenario),
        target_url=url,
        listen=listen,
        poll_interval=poll_interval,
        windows=windows,
        min_drafts=min_drafts,
    )
    return raw, from_mapping(raw, environ={})


def _drift(samples: list[int]) -> float:
    return (max(samples) - samples[0]) / samples[0] if samples else 0.0


def soak_replay(hours: float, seed: int) -> dict:
    import gc

    from prometheus_client import generate_latest

    from specwatch.export.collector import registry_for
    from specwatch.sidecar.pipeline import Pipeline
    from specwatch.sidecar.replay import replay
    from specwatch.sim import Simulator, load_scenario

    poll = 5.0
    _, config = _config("http://127.0.0.1:8000/metrics", "127.0.0.1:0", poll, ("1m", "5m"))
    sim = Simulator(load_scenario(str(SCENARIO)), seed=seed)
    total = int(hours * 3600 / poll)

    def lines():  # exactly what sim.record writes, one line per poll
        for i in range(total):
            t = (i + 1) * poll
            sim.advance_to(t)
            yield json.dumps({"t": round(sim.epoch + t, 6), "target": "vllm", "text": sim.render()})

    pipeline = Pipeline(config)
    registry = registry_for(pipeline.view)
    last: dict = {}
    changes: list[dict] = []
    rss, series = [], []
    warmup = max(int(600 / poll), total // 24)  # 10 simulated minutes or the first hour of a day
    every = max(int(3600 / poll), 1) if hours >= 4 else max(total // 12, 1)
    start = time.monotonic()
    polls = 0
    for record in replay(config, lines(), pipeline=pipeline):
        key = (record["route"], record["window"])
        verdict = record["verdict"]
        if verdict not in (None, "insufficient_data"):
            if key in last and last[key] != verdict:
                changes.append({"t": record["t"], "route": key[0], "window": key[1], "from": last[key], "to": verdict})
            last[key] = verdict
        if record["window"] == config.window_labels[-1]:
            polls += 1
            if (polls >= warmup and (polls - warmup) % every == 0) or polls == total:
                gc.collect()
                rss.append(rss_kib())
                series.append(
                    sum(
                        1
                        for line in generate_latest(registry).decode().split("\n")
                        if line and not line.startswith("#")
                    )
                )
    return {
        "mode": "replay",
        "scenario": SCENARIO.name,
        "hours": hours,
        "polls": total,
        "evaluated_polls": polls,
        "seconds": round(time.monotonic() - start, 1),
        "final_verdicts": {f"{r}/{w}": v for (r, w), v in last.items()},
        "verdict_changes": changes,
        "rss_kib": rss,
        "rss_drift": round(_drift(rss), 4),
        "series": series,
        "scrape_errors": 0,
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def soak_live(minutes: float, poll_interval: float, speed: float, scenario: str = str(SCENARIO)) -> dict:
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    from specwatch import sim

    handle = sim.serve(scenario, speed=speed)
    port = _free_port()
    # Windows that hold enough drafts for a steady interval: on 5s ones alpha's sampling noise moved
    # the speedup's lower bound across 1 from poll to poll.
    raw, _ = _config(handle.url, f"127.0.0.1:{port}", poll_interval, ("20s", "40s"), min_drafts=200, scenario=scenario)
    raw["targets"][0]["timeout"] = f"{int(poll_interval * 800)}ms"
    raw["log"] = {"format": "json", "level": "info"}
    workdir = Path(tempfile.mkdtemp(prefix="specwatch-soak-"))
    (workdir / "specwatch.yaml").write_text(json.dumps(raw))
    log_path = workdir / "specwatch.log"
    http = requests.Session()
    # A connection per request: the server drops a keep-alive connection idle for 5 s (its head
    # deadline), the samples below come every 5 s, and a request sent as it closes is lost. The
    # server now says so (`Keep-Alive: timeout=4`), but requests/urllib3 ignores that header.
    http.headers["Connection"] = "close"
    http.trust_env = False
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specwatch.cli", "run", "--config", str(workdir / "specwatch.yaml")],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    rss, series, errors, by_reason = [], [], 0.0, {}
    launched = time.monotonic()
    warmup_seconds = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if http.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        # Warm-up: the first verdict on every window (the windows are full), then the timed run.
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline
            and sum(
                1
                for line in http.get(base + "/metrics", timeout=5).text.split("\n")
                if line.startswith("specwatch_verdict{") and 'verdict="keep"' in line and line.endswith(" 1.0")
            )
            < 2
        ):
            time.sleep(0.25)
        start = time.monotonic()
        warmup_seconds = start - launched
        end = start + minutes * 60
        warmup = start + min(30.0, minutes * 60 / 4)
        sample_every = max(5.0, minutes * 60 / 40)
        next_sample = warmup
        while time.monotonic() < end:
            assert proc.poll() is None, log_path.read_text()[-2000:]
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))
            if time.monotonic() >= next_sample:
                next_sample += sample_every
                text = http.get(base + "/metrics", timeout=5).text
                samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
                series.append(len(samples))
                errors = sum(s.value for s in samples if s.name == "specwatch_scrape_errors_total")
                by_reason = {
                    s.labels["reason"]: s.value
                    for s in samples
                    if s.name == "specwatch_scrape_errors_total" and s.value
                }
                rss.append(rss_kib(proc.pid))
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        handle.stop()
        http.close()
    last: dict = {}
    changes = []
    for line in log_path.read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") != "verdict_changed":
            continue
        key, verdict = (event["route"], event["window"]), event["verdict"]
        if verdict in (None, "insufficient_data"):
            continue
        if key in last and last[key] != verdict:
            changes.append(
                {"t": event.get("timestamp"), "route": key[0], "window": key[1], "from": last[key], "to": verdict}
            )
        last[key] = verdict
    return {
        "mode": "live",
        "scenario": scenario,
        "minutes": minutes,
        "poll_interval": poll_interval,
        "speed": speed,
        "final_verdicts": {f"{r}/{w}": v for (r, w), v in last.items()},
        "verdict_changes": changes,
        "rss_kib": rss,
        "rss_drift": round(_drift(rss), 4),
        "series": series,
        "scrape_errors": errors,
        "scrape_errors_by_reason": by_reason,
        "exit_code": proc.returncode,
        "warmup_seconds": round(warmup_seconds, 1) if warmup_seconds is not None else None,
    }


def verdict_ok(result: dict) -> list[str]:
    problems = []
    if result["verdict_changes"]:
        problems.append(f"{len(result['verdict_changes'])} verdict changes")
    if set(result["final_verdicts"].values()) != {"keep"}:
        problems.append(f"final verdicts {result['final_verdicts']}")
    if result["rss_drift"] > RSS_TOLERANCE:
        problems.append(f"RSS drift {result['rss_drift']:.1%} > {RSS_TOLERANCE:.0%}")
    if result["series"] and max(result["series"]) > result["series"][0]:
        problems.append(f"series grew {result['series'][0]} -> {max(result['series'])}")
    if result["scrape_errors"]:
        problems.append(f"{result['scrape_errors']} scrape errors")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("replay", help="accelerated: a simulated day through the replay path")
    r.add_argument("--hours", type=float, default=24.0)
    r.add_argument("--seed", type=int, default=0)
    live = sub.add_parser("live", help="real time: specwatch run against the simulated vLLM")
    live.add_argument("--minutes", type=float, default=10.0)
    live.add_argument("--poll-interval", type=float, default=1.0)
    live.add_argument("--speed", type=float, default=1.0)
    live.add_argument(
        "--scenario",
        default=str(SCENARIO),
        help="shipped scenario name or YAML path (default: the replay soak's scenario)",
    )
    args = parser.parse_args()
    if args.mode == "replay":
        result = soak_replay(args.hours, args.seed)
    else:
        result = soak_live(args.minutes, args.poll_interval, args.speed, args.scenario)
    result["problems"] = verdict_ok(result)
    print(json.dumps(result, indent=1))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
