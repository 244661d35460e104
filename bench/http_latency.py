"""(3) `/metrics` latency of a running sidecar under 1, 10 and 50 concurrent scrapers.

The sidecar is the real `specwatch run` (poll every 1 s, windows 1m/5m) polling a stand-in vLLM
that serves the 24 h recording's payloads in order; it keeps polling while being scraped. The peer is
the same SpecwatchCollector served by prometheus_client's own `start_http_server` (rendered on every
scrape, the usual way). Both in their own processes; the scrapers run in a third process
(bench/loadgen.py); each concurrency level alternates sidecar and peer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import requests
import yaml

from . import payloads
from .common import REPO, Table, cache_dir, fmt_us, free_port, median, percentile, stop_process, verdict_mark, wait_http
from .replay_proc import _specwatch_cmd, replay_config


def _rss_mb(pid: int) -> tuple[float, float]:
    rss = hwm = float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024
    return rss, hwm


PACED_INTERVAL = 0.1  # each scraper every 100 ms: 10-150x more often than a real Prometheus


def _load(url: str, concurrency: int, seconds: float, max_requests: int, interval: float) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench.loadgen", url, str(concurrency), str(seconds), str(max_requests), str(interval)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=seconds + 120,
        check=True,
    )
    return json.loads(out.stdout)


def run_http(smoke: bool) -> tuple[Table, dict]:
    rec = payloads.tiled_recording(720 if smoke else 17_280)
    seconds = 1.0 if smoke else 5.0
    rounds = 1 if smoke else 3
    levels = (1, 10, 50)
    procs = []
    logs = []
    try:
        vport, sport, pport = free_port(), free_port(), free_port()
        vlog = open(cache_dir() / "http-payloads.log", "w")  # noqa: SIM115 - the subprocess's output; closed in the finally
        logs.append(vlog)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "bench.servers", "payloads", str(rec), str(vport)],
                cwd=REPO,
                stdout=vlog,
                stderr=subprocess.STDOUT,
            )
        )
        cfg = yaml.safe_load(replay_config().read_text())
        cfg.update(
            {
                "listen": f"127.0.0.1:{sport}",
                "poll_interval": "1s",
                "targets": [{"name": "vllm", "url": f"http://127.0.0.1:{vport}/metrics", "timeout": "900ms"}],
            }
        )
        cfg_path = cache_dir() / "http-sidecar.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg))
        slog = open(cache_dir() / "http-sidecar.log", "w")  # noqa: SIM115 - the subprocess's output; closed in the finally
        logs.append(slog)
        sidecar = subprocess.Popen(
            _specwatch_cmd() + ["run", "--config", str(cfg_path)], cwd=REPO, stdout=slog, stderr=subprocess.STDOUT
        )
        procs.append(sidecar)
        plog = open(cache_dir() / "http-peer.log", "w")  # noqa: SIM115 - the subprocess's output; closed in the finally
        logs.append(plog)
        peer = subprocess.Popen(
            [sys.executable, "-m", "bench.servers", "peer", str(rec), str(pport), "72"],
            cwd=REPO,
            stdout=plog,
            stderr=subprocess.STDOUT,
        )
        procs.append(peer)
        sidecar_url = f"http://127.0.0.1:{sport}/metrics"
        peer_url = f"http://127.0.0.1:{pport}/metrics"
        wait_http(f"http://127.0.0.1:{sport}/readyz", 60, sidecar)
        wait_http(peer_url, 120, peer)
        # Let the sidecar's windows fill enough for every derived gauge to be exported.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if (
                b"specwatch_verdict{" in requests.get(sidecar_url, timeout=5).content
                and b"specwatch_acceptance_margin{" in requests.get(sidecar_url, timeout=5).content
            ):
                break
            time.sleep(0.5)
        results: dict[str, dict[tuple, list[float]]] = {"sidecar": {}, "peer": {}}
        meta: dict[str, dict] = {"sidecar": {}, "peer": {}}
        for mode, interval in (("paced", PACED_INTERVAL), ("back-to-back", 0.0)):
            for conc in levels:
                for _ in range(rounds):
                    for name, url in (("sidecar", sidecar_url), ("peer", peer_url)):
                        r = _load(url, conc, seconds, 200_000, interval)
                        results[name].setdefault((mode, conc), []).extend(r["latencies"])
                        m = meta[name].setdefault((mode, conc), {"errors": 0, "requests": 0, "elapsed": 0.0})
                        m["errors"] += r["errors"]
                        m["requests"] += len(r["latencies"])
                        m["elapsed"] += r["elapsed"]
                        meta[name]["bytes"] = r["bytes"]
        sidecar_rss = _rss_mb(sidecar.pid)
        peer_rss = _rss_mb(peer.pid)
        status = requests.get(f"http://127.0.0.1:{sport}/api/v1/status", timeout=5).json()
        polls = status["targets"][0]["polls"]
    finally:
        for p in reversed(procs):
            stop_process(p)
        for f in logs:
            f.close()
    table = Table(
        "http",
        "`/metrics` latency under concurrent scrapers (sidecar vs prometheus_client's "
        "start_http_server, same collector, one run, alternating)",
        [
            "scrapers",
            "mode",
            "sidecar p50",
            "sidecar p99",
            "sidecar req/s",
            "peer p50",
            "peer p99",
            "peer req/s",
            "p99 ratio (peer / sidecar)",
            "errors (sidecar / peer)",
            "goal",
            "met",
        ],
        note=f"Body {meta['sidecar'].get('bytes', 0) / 1024:.1f} KiB (sidecar) / "
        f"{meta['peer'].get('bytes', 0) / 1024:.1f} KiB (peer). {rounds} × {seconds:g} s per level, mode "
        f"and server. paced: every scraper scrapes every {PACED_INTERVAL * 1000:.0f} ms at its own phase "
        "(independent Prometheus servers, 10-150× more often than real ones); back-to-back: each "
        "scraper sends its next request as soon as the last one is read (saturation: latency there "
        "is queueing, ≈ scrapers / throughput). Keep-alive connections; the peer is HTTP/1.0, one "
        "connection per request, as Prometheus would see it. Latency = request written to body read, "
        "measured in the scraper process (its own Python scheduling on this 2-core machine "
        f"included). The sidecar kept polling its target every second throughout ({polls} polls). "
        f"RSS after the run: sidecar {sidecar_rss[0]:.1f} MB (peak {sidecar_rss[1]:.1f} MB), peer "
        f"{peer_rss[0]:.1f} MB (peak {peer_rss[1]:.1f} MB).",
    )
    out = {"levels": {}, "sidecar_rss_mb": sidecar_rss, "peer_rss_mb": peer_rss, "sidecar_polls": polls}
    for mode in ("paced", "back-to-back"):
        for conc in levels:
            key = (mode, conc)
            s, p = results["sidecar"][key], results["peer"][key]
            sm, pm = meta["sidecar"][key], meta["peer"][key]
            s50, s99, p50, p99 = median(s), percentile(s, 99), median(p), percentile(p, 99)
            goal_row = conc == 50 and mode == "paced"
            goal = "p99 < 5 ms" if goal_row else "—"
            met = (s99 < 0.005) if goal_row else None
            table.add(
                conc,
                mode,
                fmt_us(s50),
                fmt_us(s99),
                f"{sm['requests'] / sm['elapsed']:.0f}",
                fmt_us(p50),
                fmt_us(p99),
                f"{pm['requests'] / pm['elapsed']:.0f}",
                f"{p99 / s99:.1f}×",
                f"{sm['errors']} / {pm['errors']}",
                goal,
                verdict_mark(met),
            )
            out["levels"][f"{mode} {conc}"] = {
                "sidecar": {"p50": s50, "p99": s99, "requests": sm["requests"], "errors": sm["errors"]},
                "peer": {"p50": p50, "p99": p99, "requests": pm["requests"], "errors": pm["errors"]},
                "goal": goal,
                "met": met,
            }
    return table, out
