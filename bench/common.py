"""Shared helpers: timing, tables, machine description, paths, a loopback Prometheus on backfilled data."""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"  # real vLLM payloads, kept in the repository
CACHE = Path(os.environ.get("SPECWATCH_BENCH_CACHE", REPO / "bench" / ".cache"))  # gitignored (.cache/)


def cache_dir() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    return CACHE


def median(xs: Iterable[float]) -> float:
    xs = list(xs)
    return statistics.median(xs) if xs else math.nan


def percentile(xs: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not xs:
        return math.nan
    s = sorted(xs)
    k = max(0, min(len(s) - 1, math.ceil(q / 100.0 * len(s)) - 1))
    return s[k]


#: The per-call benchmarks' clock: CPU time of this thread. On shared cores wall time also counts
#: other processes' turns, which land more often inside the longer of two calls compared.
cpu_clock = time.thread_time


def cpu_seconds(fn: Callable[[], object]) -> float:
    """CPU seconds of this thread that one call of ``fn`` takes."""
    start = cpu_clock()
    fn()
    return cpu_clock() - start


def cpu_each(fn: Callable[[Any], object], items: Iterable[Any]) -> list[float]:
    """CPU seconds of ``fn(item)`` for each item, in order."""
    out = []
    clock = cpu_clock
    for item in items:
        start = clock()
        fn(item)
        out.append(clock() - start)
    return out


def cpu_tally(fn: Callable[..., Any], label: str, spent: dict[str, float]) -> Callable[..., Any]:
    """``fn`` that adds the CPU seconds of each of its calls to ``spent[label]``: a part timed
    where its caller calls it."""
    clock = cpu_clock

    def part(*args: Any, **kwargs: Any) -> Any:
        start = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0.0) + clock() - start

    return part


def time_calls(fn: Callable[[], object], number: int) -> float:
    """Seconds per call, averaged over `number` back-to-back calls."""
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number


def interleaved(
    candidates: dict[str, Callable[[], object]], rounds: int, number: dict[str, int] | int = 1
) -> dict[str, float]:
    """Median seconds per call of each candidate, measured in alternation round after round so a
    noisy neighbour hits every candidate alike (the machine is shared)."""
    samples: dict[str, list[float]] = {k: [] for k in candidates}
    for fn in candidates.values():  # warm-up (imports, caches)
        fn()
    for _ in range(rounds):
        for name, fn in candidates.items():
            n = number[name] if isinstance(number, dict) else number
            samples[name].append(time_calls(fn, n))
    return {k: median(v) for k, v in samples.items()}


def fmt_us(seconds: float) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    us = seconds * 1e6
    if us >= 10_000:
        return f"{us / 1000:.1f} ms"
    if us >= 1000:
        return f"{us / 1000:.2f} ms"
    return f"{us:.0f} µs"


def fmt(x, spec: str = ".3g") -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and not math.isfinite(x):
        return "n/a"
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return format(x, spec)
    return str(x)


class Table:
    def __init__(self, key: str, title: str, headers: Sequence[str], note: str = ""):
        self.key, self.title, self.headers, self.note = key, title, list(headers), note
        self.rows: list[list[str]] = []

    def add(self, *cells) -> None:
        self.rows.append([c if isinstance(c, str) else fmt(c) for c in cells])

    def markdown(self) -> str:
        out = [f"### {self.title}", ""]
        out.append("| " + " | ".join(self.headers) + " |")
        out.append("|" + "|".join("---" for _ in self.headers) + "|")
        out.extend("| " + " | ".join(r) + " |" for r in self.rows)
        if self.note:
            out += ["", self.note]
        return "\n".join(out)

    def as_dict(self) -> dict:
        return {"title": self.title, "headers": self.headers, "rows": self.rows, "note": self.note}


def verdict_mark(ok: bool | None) -> str:
    return "—" if ok is None else ("PASS" if ok else "MISS")


def machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    with contextlib.suppress(OSError, IndexError):
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    import prometheus_client

    prom = shutil.which("prometheus")
    prom_version = ""
    if prom:
        with contextlib.suppress(OSError, subprocess.SubprocessError, IndexError):
            prom_version = subprocess.run(
                [prom, "--version"], check=False, capture_output=True, text=True, timeout=10
            ).stdout.splitlines()[0]
    return {
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "prometheus_client": prometheus_client.__version__
        if hasattr(prometheus_client, "__version__")
        else _dist_version("prometheus-client"),
        "prometheus": prom_version,
        "loadavg_start": os.getloadavg(),
    }


def _dist_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not ready after {timeout}s")


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class BackfilledPrometheus:
    """A real Prometheus (Debian package) on loopback over TSDB blocks built with
    `promtool tsdb create-blocks-from openmetrics` from samples with their poll timestamps.

    Queries are evaluated by Prometheus's own engine at the instants we choose, so its
    histogram_quantile/rate see exactly the samples specwatch saw, at the same times."""

    def __init__(self, openmetrics_text: str):
        self.prometheus = shutil.which("prometheus")
        self.promtool = shutil.which("promtool")
        if not self.prometheus or not self.promtool:
            raise FileNotFoundError("prometheus/promtool not installed (Debian package `prometheus`)")
        self.dir = Path(tempfile.mkdtemp(prefix="specwatch-bench-prom-"))
        src = self.dir / "input.om"
        src.write_text(openmetrics_text if openmetrics_text.endswith("# EOF\n") else openmetrics_text + "# EOF\n")
        data = self.dir / "data"
        subprocess.run(
            [self.promtool, "tsdb", "create-blocks-from", "openmetrics", str(src), str(data)],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
        src.unlink()
        (self.dir / "prometheus.yml").write_text("global: {scrape_interval: 1h}\nscrape_configs: []\n")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.dir / "prometheus.log", "w")  # noqa: SIM115 - Prometheus's stdout for its whole life; closed in stop()
        self.proc = subprocess.Popen(
            [
                self.prometheus,
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--storage.tsdb.path={data}",
                "--storage.tsdb.retention.time=100y",
                "--query.max-samples=200000000",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_http(self.url + "/-/ready", 60, self.proc)
        import requests

        self.session = requests.Session()

    def query(self, expr: str, t: float) -> list[dict]:
        r = self.session.get(self.url + "/api/v1/query", params={"query": expr, "time": repr(t)}, timeout=60)
        r.raise_for_status()
        return r.json()["data"]["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        """Range query split into chunks under Prometheus's 11,000 points limit; series merged by labels."""
        merged: dict[str, dict] = {}
        chunk = step * 10_000
        s = start
        while s <= end:
            e = min(end, s + chunk - step)
            r = self.session.get(
                self.url + "/api/v1/query_range",
                params={"query": expr, "start": repr(s), "end": repr(e), "step": repr(step)},
                timeout=120,
            )
            r.raise_for_status()
            for series in r.json()["data"]["result"]:
                key = json.dumps(series["metric"], sort_keys=True)
                merged.setdefault(key, {"metric": series["metric"], "values": []})["values"].extend(series["values"])
            s = e + step
        return list(merged.values())

    def close(self) -> None:
        stop_process(self.proc)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
