"""Concurrent /metrics scrapers in their own process:
`python -m bench.loadgen URL CONCURRENCY SECONDS MAXREQ [INTERVAL]`.

Each scraper is a thread with its own keep-alive connection (reconnecting when the server closes
it, as HTTP/1.0 servers do). INTERVAL 0: GETs back to back (closed loop, saturation). INTERVAL > 0:
each scraper scrapes every INTERVAL seconds at its own phase, like independent Prometheus servers. Prints one JSON object: per-request latencies (s, first byte sent to last byte read),
errors, bytes of the last body.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from urllib.parse import urlsplit


def main(url: str, concurrency: int, seconds: float, max_requests: int, interval: float = 0.0) -> dict:
    parts = urlsplit(url)
    host, port, path = parts.hostname, parts.port, parts.path or "/"
    latencies: list[float] = []
    errors = [0]
    size = [0]
    lock = threading.Lock()
    start = threading.Barrier(concurrency + 1)
    deadline = [0.0]
    per_thread = max(1, max_requests // concurrency)

    def worker(index: int):
        conn = http.client.HTTPConnection(host, port, timeout=10)
        mine = []
        start.wait()
        next_at = time.perf_counter() + interval * index / concurrency
        while time.perf_counter() < deadline[0] and len(mine) < per_thread:
            if interval > 0:
                pause = next_at - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                next_at += interval
            t0 = time.perf_counter()
            try:
                conn.request("GET", path)
                resp = conn.getresponse()
                body = resp.read()
                t1 = time.perf_counter()
                if resp.status != 200:
                    raise http.client.HTTPException(f"status {resp.status}")
                mine.append(t1 - t0)
                size[0] = len(body)
                if resp.will_close:
                    conn.close()
                    conn = http.client.HTTPConnection(host, port, timeout=10)
            except (OSError, http.client.HTTPException):
                with lock:
                    errors[0] += 1
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    deadline[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return {"latencies": latencies, "errors": errors[0], "bytes": size[0], "elapsed": elapsed}


if __name__ == "__main__":
    print(
        json.dumps(
            main(
                sys.argv[1],
                int(sys.argv[2]),
                float(sys.argv[3]),
                int(sys.argv[4]),
                float(sys.argv[5]) if len(sys.argv) > 5 else 0.0,
            )
        )
    )
