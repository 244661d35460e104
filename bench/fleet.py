"""Fleet mode: specwatch CPU, memory and queries per poll for 100, 1,000 and 5,000 replicas.

A simulated vLLM (scenario steady) is recorded every SCRAPE seconds; the recording is written as
OpenMetrics once per replica (instance label r0000..), backfilled into a TSDB with promtool, and
served by a real Prometheus on loopback. A child process (imports, one FleetSource, nothing else)
then polls it, so its peak RSS (VmHWM) is fleet mode's alone: CPU is that process's CPU time for
one poll (HTTP, JSON decoding, grouping, derivations, cost model, verdicts for every replica,
route and window); Prometheus's own CPU is not counted. The per-replica memory cost is the
least-squares slope of peak RSS over the sizes. Goals: 1,000 replicas in under 1 s of specwatch
CPU per poll, the same number of queries per poll at every size, and a peak RSS that fits the
chart's memory limit at the replica count docs/fleet.md gives for it.

    PYTHONPATH=exporter python -m bench --only fleet            # 100, 1,000 and 5,000 replicas
    PYTHONPATH=exporter python -m bench.fleet [--replicas 100,1000,5000] [--repeat 5] [--records PATH]

--records PATH writes every poll's evaluation records and fleet rows per size (PATH.<n>.jsonl):
the same TSDB gives the same answers, so two versions of specwatch can be compared record by record.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specwatch import config as config_mod
from specwatch.fleet.client import PromClient, Vector
from specwatch.fleet.evaluator import FleetEvaluator, FleetSource
from specwatch.fleet.rows import fleet_record, replica_record

from .common import Table

SCRAPE = 15.0
DURATION = 420.0
FAMILIES = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "vllm:generation_tokens_total",
    "vllm:inter_token_latency_seconds_",
    "vllm:iteration_tokens_total_count",
    "vllm:num_requests_running",
)


def write_openmetrics(recording: Path, replicas: int, out: Path) -> tuple[float, float]:
    polls = [json.loads(line) for line in recording.read_text().splitlines()]
    series: dict[str, list[tuple[str, str, float]]] = {}
    for poll in polls:
        for line in poll["text"].splitlines():
            if line.startswith(FAMILIES) and "_created" not in line:
                head, value = line.rsplit(" ", 1)
                name, _, labels = head.partition("{")
                series.setdefault(name, []).append((labels.rstrip("}"), value, float(poll["t"])))
    with out.open("w") as handle:
        for name, samples in sorted(series.items()):
            handle.write(f"# TYPE {name} unknown\n")
            for r in range(replicas):
                extra = f'instance="r{r:04d}",job="vllm"'
                for labels, value, t in sorted(samples, key=lambda s: (s[0], s[2])):
                    handle.write(f"{name}{{{extra}{',' + labels if labels else ''}}} {value} {t:.3f}\n")
        handle.write("# EOF\n")
    return float(polls[0]["t"]), float(polls[-1]["t"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(replicas: int, recording: Path, work: Path, repeat: int, records: Path | None = None) -> dict[str, float]:
    data = work / f"tsdb-{replicas}"
    om = work / f"history-{replicas}.om"
    _, last = write_openmetrics(recording, replicas, om)
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)], check=True, capture_output=True
    )
    om.unlink()
    (work / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    port = free_port()
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=20y",
            "--log.level=error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    import requests  # here, not in the polling child: its peak RSS is fleet mode's alone

    try:
        for _ in range(300):
            try:
                if requests.get(url + "/-/ready", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.2)
        child = subprocess.run(
            [sys.executable, "-m", "bench.fleet", "--poll", url, "--last", repr(last), "--repeat", str(repeat)]
            + (["--records", str(records)] if records else []),
            check=False,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        if child.returncode:
            raise RuntimeError(f"the polling child failed: {child.stderr[-2000:]}")
        row: dict[str, float] = {"replicas": replicas, **json.loads(child.stdout.splitlines()[-1])}
        row["load_average_1m"] = os.getloadavg()[0]  # the machine is shared: CPU time varies with it
        return row
    finally:
        process.terminate()
        process.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


def _rss_mib(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process, MiB, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


class _SizedClient(PromClient):
    """PromClient noting the largest answer's size."""

    largest = 0

    def query_vector(self, expr: str, at: float) -> Vector:
        vector = super().query_vector(expr, at)
        self.largest = max(self.largest, self.last_bytes)
        return vector


def poll_child(url: str, last: float, repeat: int, records: Path | None) -> dict[str, float]:
    """The polls, in a process of their own so that its peak RSS is fleet mode's alone: imports,
    the evaluator, then `repeat` + 1 polls (the first warms the connection and Prometheus's caches)."""
    config = config_mod.from_mapping(
        {
            "windows": ["1m", "5m"],
            "poll_interval": "15s",
            "prometheus": {
                "url": url,
                "selector": '{job="vllm"}',
                "max_bytes": "512MiB",
                "scrape_interval": f"{SCRAPE:g}s",
            },
        },
        environ={},
    )
    # A generous deadline: the benchmark measures the cost of a poll, it does not enforce one.
    config = dataclasses.replace(config, prometheus=dataclasses.replace(config.prometheus, timeout=60.0))
    client = _SizedClient(config.prometheus)
    fleet = FleetSource(FleetEvaluator(config), client)
    gc.collect()
    rss_idle = _rss_mib("VmRSS")
    cpu, wall, evaluations = [], [], 0
    now = last - 0.5 * SCRAPE * repeat
    lines: list[str] = []
    for i in range(repeat + 1):
        t_cpu, t_wall = time.process_time(), time.perf_counter()
        results = fleet.poll(now + i * SCRAPE * 0.5)
        if results is None:
            raise RuntimeError(f"poll failed: {fleet.evaluator.state().errors}")
        if i:
            cpu.append(time.process_time() - t_cpu)
            wall.append(time.perf_counter() - t_wall)
            evaluations = len(results)
        if records is not None:
            t = now + i * SCRAPE * 0.5
            lines += [json.dumps(replica_record(r, e), sort_keys=True) for r, e in results]
            lines += [json.dumps(fleet_record(t, row), sort_keys=True) for row in fleet.evaluator.state().fleet]
    if records is not None:
        records.write_text("\n".join(lines) + "\n")
    gc.collect()
    state = fleet.evaluator.state()
    return {
        "evaluations_per_poll": evaluations,
        "queries_per_poll": fleet.client.queries / (repeat + 1),
        "query_set_size": state.queries_per_poll,
        "cpu_seconds_per_poll": sorted(cpu)[len(cpu) // 2],
        "wall_seconds_per_poll": sorted(wall)[len(wall) // 2],
        "rss_idle_mib": rss_idle,  # after imports and the evaluator, before the first poll
        "rss_peak_mib": _rss_mib("VmHWM"),  # the whole run's peak (Linux: ru_maxrss)
        "rss_after_mib": _rss_mib("VmRSS"),  # what the polls leave held (state + allocator)
        "answer_bytes": client.largest,  # the largest window answer, bytes
    }


def per_replica_mib(rows: list[dict]) -> float | None:
    """The least-squares slope of peak RSS over replicas (MiB per replica), two sizes or more."""
    if len(rows) < 2:
        return None
    xs = [float(r["replicas"]) for r in rows]
    ys = [float(r["rss_peak_mib"]) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def run_fleet(
    smoke: bool, replicas: tuple[int, ...] = (100, 1000, 5000), repeat: int = 3, records: Path | None = None
) -> tuple[Table, dict]:
    """`python -m bench` part "fleet": the table below, and its rows as data."""
    if smoke:
        replicas, repeat = (10,), 1
    table = Table(
        "fleet",
        "Fleet mode: specwatch CPU, memory and queries per poll vs replicas (backfilled Prometheus, one run)",
        [
            "replicas",
            "evaluations / poll",
            "queries / poll",
            "specwatch CPU / poll",
            "wall / poll",
            "answer / window",
            "peak RSS",
            "RSS after",
            "load average",
        ],
        note="CPU: this process's CPU time for one poll (HTTP, JSON, grouping, derivations, cost model, "
        "verdicts); Prometheus's own CPU is not counted. Median of the polls after a warm-up. Peak RSS: "
        "VmHWM of a process that only imports specwatch, builds the evaluator and polls (idle RSS "
        "before the first poll in the data); RSS after: what the polls leave held.",
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="specwatch-fleet-bench-") as tmp:
        work = Path(tmp)
        recording = work / "steady.jsonl"
        from specwatch.sim.record import record

        record("steady", recording, poll_interval=SCRAPE, seed=1, duration=DURATION)
        for n in replicas:
            row = measure(n, recording, work, repeat, records.with_suffix(f".{n}.jsonl") if records else None)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            table.add(
                f"{n:,}",
                f"{row['evaluations_per_poll']:,}",
                f"{row['queries_per_poll']:g}",
                f"{row['cpu_seconds_per_poll'] * 1000:.0f} ms",
                f"{row['wall_seconds_per_poll'] * 1000:.0f} ms",
                f"{row['answer_bytes'] / 2**20:.1f} MiB",
                f"{row['rss_peak_mib']:.0f} MiB",
                f"{row['rss_after_mib']:.0f} MiB",
                f"{row['load_average_1m']:.1f}",
            )
    slope = per_replica_mib(rows)
    return table, {"rows": rows, "peak_rss_mib_per_replica": slope}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replicas", default="100,1000,5000")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--records", type=Path, default=None, help="write each size's evaluation records here")
    parser.add_argument("--poll", metavar="URL", default=None, help=argparse.SUPPRESS)  # the child
    parser.add_argument("--last", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.poll:
        print(json.dumps(poll_child(args.poll, args.last, args.repeat, args.records)))
        return 0
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("fleet bench: prometheus and promtool are required", file=sys.stderr)
        return 2
    table, data = run_fleet(False, tuple(int(x) for x in args.replicas.split(",")), args.repeat, args.records)
    print(table.markdown())
    if data["peak_rss_mib_per_replica"] is not None:
        print(f"\npeak RSS per replica (least-squares slope): {data['peak_rss_mib_per_replica'] * 1024:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
