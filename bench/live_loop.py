"""The running `specwatch run` process against a peer poller of the same endpoint, CPU from /proc.

    python -m bench.live_loop [--scenario steady] [--interval 1] [--evaluation-interval SECONDS]
                              [--warmup 60] [--seconds 120] [--page-every 5] [--peers 3]
                              [--checkout DIR]

Simulated vLLM servers of one scenario (sim.serve, same seed: the same payloads; in this process,
whose CPU is not counted) are polled every INTERVAL seconds, one by `specwatch run` (a config file,
as the Helm chart runs it; its default 1m and 5m windows; with EVALUATION_INTERVAL, its
`evaluation_interval`: the polls between evaluations only fill the windows; unset, specwatch's
default: every 5 s at polls faster than that, every poll otherwise; equal to INTERVAL, every poll
is evaluated), each of the others by
one peer process,
bench/peer_poller.py (requests, then prometheus_client's parser over every sample, nothing else).
After WARMUP seconds, each process's CPU time (the nanoseconds on CPU of every thread, from
/proc/PID/task/TID/schedstat; utime + stime of /proc/PID/stat beside it, in 10 ms clock ticks) is
read over the same SECONDS twice:

- nobody reading specwatch's `/`;
- a reader of `/` every PAGE_EVERY seconds (a fresh connection each, from this process), after
  one untimed read: the process's first read imports the page's module and draws it once (tens of
  ms, once in the life of the process, reported as first_page_read_ms), which in a one-minute phase
  of twelve reads would add about 1.7 ms to each read.

CPU per poll is that CPU over the polls its simulator answered in the interval. The peer's figure
is the median of PEERS processes: one CPython process runs prometheus_client's parser at one of
two speeds (seen 25 % apart, and changing between two phases of one process), so a single peer
process can move the ratio by a quarter on its own. A peer whose requests failed in a phase (its
timeout is INTERVAL, passed when a loaded host slows its simulator) is reported and left out of
that phase's median. specwatch's
figure is everything the process does: the scrape over HTTP, parse, windows, cost model and
verdict, publishing, the page when read, its logging and its threads. The page's cost per request
is the difference between the two phases over the reads made. WARMUP sets how much page history
the reader's page draws (an hour is 3600: the page's full horizon). CHECKOUT runs the specwatch
of another checkout of the repository (its exporter/) against the same peers: before and after a
change, on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

from .common import REPO, free_port, machine, median, stop_process, wait_http

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """Seconds of CPU (user + system, all threads) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15)


def task_ns(pid: int) -> dict[str, int]:
    """Nanoseconds on CPU of each live thread of the process (the first field of
    /proc/PID/task/TID/schedstat): the clock-tick count of /proc/PID/stat reads a 2 ms poll to ±8 %
    over a minute, this to the nanosecond. A thread that exits takes its time with it (counted in
    the phase's `threads_exited`, then the tick figure is the one to read)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[tid] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # exited between the listing and the read
    return out


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _drain(stream, errors: list[int]) -> None:
    """The peer's lines, read so its pipe never fills; its failed requests counted."""
    for line in stream:
        if line.startswith("error"):
            errors[0] += 1


def _first_page_read(pid: int, page_url: str) -> float:
    """The process's first read of `/`, outside the timed phases: it imports the page's module and
    draws the page once (a one-off of the process's life, not a cost of each read). Its CPU in ms,
    polls included (a poll may fall inside the read)."""
    before = sum(task_ns(pid).values())
    requests.get(page_url, timeout=30, headers={"Connection": "close"}).raise_for_status()
    return round((sum(task_ns(pid).values()) - before) / 1e6, 2)


def _phase(procs: dict, sims: dict, seconds: float, page_url: str | None, page_every: float, peer_errors: dict) -> dict:
    cpu0 = {name: cpu_of(p.pid) for name, p in procs.items()}
    errors0 = {name: count[0] for name, count in peer_errors.items()}
    ns0 = {name: task_ns(p.pid) for name, p in procs.items()}
    polls0 = {name: s.requests for name, s in sims.items()}
    reads = 0
    start = time.monotonic()
    next_read = start + page_every / 2
    while (now := time.monotonic()) < start + seconds:
        if page_url is not None and now >= next_read:
            response = requests.get(page_url, timeout=10, headers={"Connection": "close"})
            response.raise_for_status()
            reads += 1
            next_read += page_every
        time.sleep(0.05)
    out: dict = {"seconds": round(time.monotonic() - start, 1), "page_reads": reads}
    for name, proc in procs.items():
        ticks = cpu_of(proc.pid) - cpu0[name]
        ns1 = task_ns(proc.pid)
        cpu = sum(v - ns0[name].get(tid, 0) for tid, v in ns1.items()) / 1e9
        polls = sims[name].requests - polls0[name]
        out[name] = {
            "cpu_s": round(cpu, 4),
            "cpu_s_ticks": round(ticks, 3),
            "threads_exited": len(ns0[name].keys() - ns1.keys()),
            "polls": polls,
            "ms_per_poll": round(1000 * cpu / polls, 3) if polls else None,
            "ms_per_poll_ticks": round(1000 * ticks / polls, 3) if polls else None,
            "rss_mib": round(rss_mib(proc.pid), 1),
            "running": proc.poll() is None,
        }
        if name in peer_errors:
            out[name]["failed_requests"] = peer_errors[name][0] - errors0[name]
    # A peer that stopped, or whose requests failed in the phase (it parsed fewer answers than the
    # simulator counted), would understate the peer: left out of the median.
    peers = sorted(
        out[name]["ms_per_poll"]
        for name in peer_errors
        if out[name]["ms_per_poll"] and out[name]["running"] and not out[name]["failed_requests"]
    )
    out["peer_median_ms_per_poll"] = round(median(peers), 3) if peers else None
    sw, peer = out["specwatch"]["ms_per_poll"], out["peer_median_ms_per_poll"]
    out["peer_over_specwatch"] = round(peer / sw, 2) if sw and peer else None
    return out


def run(
    scenario: str,
    interval: float,
    warmup: float,
    seconds: float,
    page_every: float,
    peers: int,
    checkout: Path = REPO,
    evaluation_interval: float | None = None,
) -> dict:
    from specwatch import sim

    peer_names = [f"peer{i + 1}" for i in range(peers)]
    sims = {name: sim.serve(scenario, seed=1) for name in ["specwatch", *peer_names]}
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="specwatch-live-loop-"))
    config = workdir / "specwatch.yaml"
    config.write_text(
        f"targets:\n  - name: vllm\n    url: {sims['specwatch'].url}\n"
        f"listen: 127.0.0.1:{port}\npoll_interval: {interval}s\nlog:\n  level: warning\n"
        + (f"evaluation_interval: {evaluation_interval}s\n" if evaluation_interval is not None else "")
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "exporter")}
    specwatch_env = {**os.environ, "PYTHONPATH": str(checkout / "exporter")}
    procs: dict[str, subprocess.Popen] = {}
    peer_errors = {name: [0] for name in peer_names}  # failed requests, counted by _drain
    log = open(workdir / "specwatch.log", "w")  # noqa: SIM115  (the sidecar's stderr, closed below)
    try:
        procs["specwatch"] = subprocess.Popen(
            [sys.executable, "-c", "import sys; from specwatch.cli.main import main; sys.exit(main())",
             "run", "--config", str(config)],
            env=specwatch_env, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        for name in peer_names:
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "bench.peer_poller", sims[name].url, str(interval)],
                cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            threading.Thread(target=_drain, args=(procs[name].stdout, peer_errors[name]), daemon=True).start()
        wait_http(f"http://127.0.0.1:{port}/readyz", 60, procs["specwatch"])
        time.sleep(warmup)
        page = f"http://127.0.0.1:{port}/"
        quiet = _phase(procs, sims, seconds, None, page_every, peer_errors)
        first_read_ms = _first_page_read(procs["specwatch"].pid, page)
        result = {
            "scenario": scenario,
            "interval_s": interval,
            "evaluation_interval_s": evaluation_interval,  # None: unset (every 5 s at faster polls)
            "warmup_s": warmup,
            "peers": peers,
            "checkout": str(checkout),
            "nobody_reading": quiet,
            "first_page_read_ms": first_read_ms,
            f"page_read_every_{page_every:g}s": _phase(procs, sims, seconds, page, page_every, peer_errors),
            "machine": machine(),
        }
        quiet, read = result["nobody_reading"], result[f"page_read_every_{page_every:g}s"]
        if read["page_reads"]:
            extra = read["specwatch"]["cpu_s"] / read["seconds"] - quiet["specwatch"]["cpu_s"] / quiet["seconds"]
            result["page_ms_per_read"] = round(1000 * extra * read["seconds"] / read["page_reads"], 2)
        return result
    finally:
        for proc in procs.values():
            stop_process(proc)
        for handle in sims.values():
            handle.stop()
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="steady")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between polls (both pollers)")
    parser.add_argument(
        "--evaluation-interval",
        type=float,
        default=None,
        help="specwatch's evaluation_interval in seconds (default: unset, every 5 s at faster polls; "
        "--interval's value: every poll evaluated)",
    )
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds before the first phase")
    parser.add_argument("--seconds", type=float, default=120.0, help="length of each phase")
    parser.add_argument("--page-every", type=float, default=5.0, help="seconds between reads of / (second phase)")
    parser.add_argument("--peers", type=int, default=3, help="peer processes; their median is the peer's figure")
    parser.add_argument(
        "--checkout", type=Path, default=REPO, help="the repository whose specwatch runs (default: this one)"
    )
    args = parser.parse_args()
    if args.peers < 1:
        parser.error("--peers must be at least 1")
    if not (args.checkout / "exporter" / "specwatch").is_dir():
        parser.error(f"--checkout {args.checkout} has no exporter/specwatch")
    if args.evaluation_interval is not None and args.evaluation_interval < args.interval:
        parser.error("--evaluation-interval must be at least --interval")
    result = run(
        args.scenario,
        args.interval,
        args.warmup,
        args.seconds,
        args.page_every,
        args.peers,
        args.checkout,
        args.evaluation_interval,
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
