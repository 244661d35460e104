"""Where does the live sidecar's memory go, poll after poll? tracemalloc over thousands of polls.

    python -m bench.leak --polls 3000            # live Service.poll_once against the simulated vLLM
    python -m bench.leak --polls 3000 --top 15

The sidecar's own poll (HTTP scrape of the simulated vLLM, `specwatch sim --scenario steady`, run
as its own process on loopback; parse, windows, cost model, verdicts, /metrics and status
rendering) runs in this process, back to back, with the config of `bench/soak.py live` (windows
5s and 20s, so the windows are full after a few polls; timeout 800 ms).
Snapshots are taken after a warm-up and at the end; the report lists the allocation sites whose
live memory grew, with bytes per poll, and the RSS before and after. Growth that stops (bounded
caches filling up) shows as a smaller per-poll figure in the second half than in the first.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import tracemalloc

from .common import free_port, stop_process, wait_http
from .soak import _config, rss_kib


def _growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, polls: int, top: int) -> list[dict]:
    stats = after.compare_to(before, "traceback")
    out = []
    for stat in stats[:top]:
        if stat.size_diff <= 0:
            continue
        frames = [f"{f.filename.split('/specwatch/')[-1]}:{f.lineno}" for f in stat.traceback[-6:]]
        out.append(
            {
                "bytes_per_poll": round(stat.size_diff / polls, 1),
                "blocks": stat.count_diff,
                "size_kib": round(stat.size / 1024, 1),
                "where": frames,
            }
        )
    return out


def run(polls: int, warmup: int, top: int) -> dict:
    from specwatch.base.logsetup import configure_logging
    from specwatch.serve.service import Service

    configure_logging("json", "warning")  # one line per state change would be noise here
    port = free_port()
    simulator = subprocess.Popen(
        [sys.executable, "-m", "specwatch.cli", "sim", "--scenario", "steady", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    wait_http(url, 60, simulator)
    _, config = _config(url, "127.0.0.1:0", 1.0, ("5s", "20s"), min_drafts=200, scenario="steady")
    service = Service(config)
    try:
        for _ in range(warmup):
            service.poll_once()
        gc.collect()
        tracemalloc.start(12)
        rss0 = rss_kib()
        first = tracemalloc.take_snapshot()
        half = polls // 2
        start = time.monotonic()
        for _ in range(half):
            service.poll_once()
        gc.collect()
        middle = tracemalloc.take_snapshot()
        rss1 = rss_kib()
        for _ in range(polls - half):
            service.poll_once()
        gc.collect()
        last = tracemalloc.take_snapshot()
        rss2 = rss_kib()
        seconds = time.monotonic() - start
        traced_first = sum(s.size for s in first.statistics("filename"))
        traced_middle = sum(s.size for s in middle.statistics("filename"))
        traced_last = sum(s.size for s in last.statistics("filename"))
        verdicts = {
            f"{e.stats.route}/{e.stats.window}": e.verdict for e in service.poller.pipeline.evaluate(service.clock())
        }
    finally:
        tracemalloc.stop()
        service.stop()
        stop_process(simulator)
    return {
        "polls": polls,
        "warmup_polls": warmup,
        "seconds": round(seconds, 1),
        "verdicts": verdicts,
        "traced_bytes_per_poll_first_half": round((traced_middle - traced_first) / half, 1),
        "traced_bytes_per_poll_second_half": round((traced_last - traced_middle) / (polls - half), 1),
        "rss_kib": [rss0, rss1, rss2],
        "growth_first_half": _growth(first, middle, half, top),
        "growth_second_half": _growth(middle, last, polls - half, top),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--polls", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300, help="polls before the first snapshot (fills the windows)")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.polls, args.warmup, args.top), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
