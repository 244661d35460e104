"""Fleet mode: specwatch CPU, memory, queries and answer bytes per poll vs replicas, reading every
replica's raw series or the per-route series of rules/specwatch-fleet-recording.yaml.

A simulated vLLM (scenario steady) is recorded every SCRAPE seconds; the recording is written as
OpenMetrics once per replica (instance label r0000..), backfilled into a TSDB with promtool, and
served by a real Prometheus on loopback. A child process (imports, one FleetSource, nothing else)
then polls it, so its peak RSS (VmHWM) is fleet mode's alone: CPU is that process's CPU time for
one poll (HTTP, JSON decoding, grouping, derivations, cost model, verdicts for every replica,
route and window); Prometheus's own CPU is not counted. The per-replica memory cost is the
least-squares slope of peak RSS over the sizes (raw reads).

Recorded: replicas are spread over AGGREGATES namespaces (the rules' aggregates); after the raw
backfill promtool evaluates the recording rules over the history (`tsdb create-blocks-from rules`,
every SCRAPE seconds), Prometheus restarts on both, and the child reads with prometheus.recorded:
true. "rules" is Prometheus's own time to evaluate the recording group once at the last step (each
rule as an instant query, its `stats=all` evalTotalTime, summed; per rule in the row's
rule_seconds): what the rules cost Prometheus every evaluation interval. The replicas
are copies of one recording, which flatters Prometheus (identical chunks compress best) but not
specwatch (every series is decoded and grouped whatever its values).

    PYTHONPATH=exporter python -m bench --only fleet            # raw 1,000; recorded 1,000 and 10,000
    PYTHONPATH=exporter python -m bench.fleet [--replicas 1000,10000] [--modes raw,recorded]
        [--duration 420] [--repeat 5] [--records PATH]

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
from typing import Any

from specwatch import config as config_mod
from specwatch.export.status import encode_status
from specwatch.fleet.client import PromClient, Vector
from specwatch.fleet.evaluator import FleetEvaluator, FleetSource
from specwatch.fleet.rows import fleet_record, replica_record

from .common import Table

SCRAPE = 15.0
DURATION = 420.0
AGGREGATES = 10  # namespaces the replicas are spread over (raw: labels only; recorded: the aggregates)
RULES = Path(__file__).resolve().parents[1] / "rules" / "specwatch-fleet-recording.yaml"
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
                extra = f'instance="r{r:05d}",job="vllm",namespace="ns{r % AGGREGATES}"'
                for labels, value, t in sorted(samples, key=lambda s: (s[0], s[2])):
                    handle.write(f"{name}{{{extra}{',' + labels if labels else ''}}} {value} {t:.3f}\n")
        handle.write("# EOF\n")
    return float(polls[0]["t"]), float(polls[-1]["t"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_prometheus(work: Path, data: Path) -> tuple[subprocess.Popen[bytes], str]:
    (work / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    port = free_port()
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=20y",
            "--query.timeout=10m",
            "--log.level=error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    import requests  # here, not in the polling child: its peak RSS is fleet mode's alone

    for _ in range(600):
        try:
            if requests.get(url + "/-/ready", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            pass
        time.sleep(0.2)
    return process, url


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=60)


def _backfill_rules(url: str, work: Path, data: Path, first: float, last: float) -> float:
    """promtool evaluates the recording rules over the history into blocks moved into `data`; seconds taken."""
    blocks = work / "rule-blocks"
    started = time.perf_counter()
    subprocess.run(
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "rules",
            f"--start={first:.0f}",
            f"--end={last + SCRAPE:.0f}",
            f"--url={url}",
            f"--eval-interval={SCRAPE:g}s",
            f"--output-dir={blocks}",
            "--quiet",
            str(RULES),
        ],
        check=True,
        capture_output=True,
    )
    seconds = time.perf_counter() - started
    for block in blocks.iterdir():
        if block.is_dir():
            shutil.move(str(block), data / block.name)
    return seconds


def _rule_seconds(url: str, at: float) -> dict[str, float]:
    """Prometheus's own time (the query API's stats: evalTotalTime) to evaluate each record of the
    fleet recording group once, as an instant query at `at`: what the rules cost every interval."""
    import requests

    from specwatch.fleet import recorded

    (group,) = (g for g in recorded.rules_document()["groups"] if g["name"] == recorded.GROUP)
    seconds = {}
    for rule in group["rules"]:
        answer = requests.post(
            url + "/api/v1/query", data={"query": rule["expr"], "time": f"{at:.3f}", "stats": "all"}, timeout=600
        )
        answer.raise_for_status()
        seconds[rule["record"]] = float(answer.json()["data"]["stats"]["timings"]["evalTotalTime"])
    return seconds


def measure(
    replicas: int,
    recording: Path,
    work: Path,
    repeat: int,
    records: Path | None = None,
    modes: tuple[str, ...] = ("raw",),
) -> list[dict[str, Any]]:
    """One backfilled TSDB of `replicas` copies; a row per mode (raw, recorded) read from it."""
    data = work / f"tsdb-{replicas}"
    om = work / f"history-{replicas}.om"
    first, last = write_openmetrics(recording, replicas, om)
    started = time.perf_counter()
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)], check=True, capture_output=True
    )
    backfill_seconds = time.perf_counter() - started
    om.unlink()
    process, url = _start_prometheus(work, data)
    rows = []
    try:
        for mode in modes:
            extra: dict[str, Any] = {"backfill_seconds": backfill_seconds}
            if mode == "recorded":
                extra["rule_seconds"] = _rule_seconds(url, last)
                extra["rules_seconds"] = sum(extra["rule_seconds"].values())
                extra["rule_backfill_seconds"] = _backfill_rules(url, work, data, first, last)
                _stop(process)
                process, url = _start_prometheus(work, data)
            child = subprocess.run(
                [sys.executable, "-m", "bench.fleet", "--poll", url, "--last", repr(last), "--repeat", str(repeat)]
                + (["--recorded"] if mode == "recorded" else [])
                + (["--records", str(records.with_suffix(f".{mode}.jsonl"))] if records else []),
                check=False,
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
            if child.returncode:
                raise RuntimeError(f"the polling child failed: {child.stderr[-2000:]}")
            row: dict[str, Any] = {"replicas": replicas, **json.loads(child.stdout.splitlines()[-1]), **extra}
            row["recorded"] = mode == "recorded"
            row["load_average_1m"] = os.getloadavg()[0]  # the machine is shared: CPU time varies with it
            rows.append(row)
        return rows
    finally:
        _stop(process)
        shutil.rmtree(data, ignore_errors=True)


def _rss_mib(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process, MiB, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


class _SizedClient(PromClient):
    """PromClient noting the largest answer's size, and the bytes and seconds of all since reset."""

    largest = 0
    total_bytes = 0
    total_seconds = 0.0

    def query_vector(self, expr: str, at: float) -> Vector:
        vector = super().query_vector(expr, at)
        self.largest = max(self.largest, self.last_bytes)
        self.total_bytes += self.last_bytes
        self.total_seconds += self.last_duration or 0.0
        return vector


def poll_child(url: str, last: float, repeat: int, records: Path | None, recorded: bool = False) -> dict[str, float]:
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
                "recorded": recorded,
            },
        },
        environ={},
    )
    # A generous deadline: the benchmark measures the cost of a poll, it does not enforce one.
    config = dataclasses.replace(config, prometheus=dataclasses.replace(config.prometheus, timeout=600.0))
    client = _SizedClient(config.prometheus)
    fleet = FleetSource(FleetEvaluator(config), client)
    gc.collect()
    rss_idle = _rss_mib("VmRSS")
    cpu, wall, queried, sizes, evaluations = [], [], [], [], 0
    now = last - 0.5 * SCRAPE * repeat
    lines: list[str] = []
    for i in range(repeat + 1):
        client.total_bytes, client.total_seconds = 0, 0.0
        t_cpu, t_wall = time.process_time(), time.perf_counter()
        results = fleet.poll(now + i * SCRAPE * 0.5)
        if results is None:
            raise RuntimeError(f"poll failed: {fleet.evaluator.state().errors}")
        if i:
            cpu.append(time.process_time() - t_cpu)
            wall.append(time.perf_counter() - t_wall)
            queried.append(client.total_seconds)
            sizes.append(client.total_bytes)
            evaluations = len(results)
        if records is not None:
            t = now + i * SCRAPE * 0.5
            lines += [json.dumps(replica_record(r, e), sort_keys=True) for r, e in results]
            lines += [json.dumps(fleet_record(t, row), sort_keys=True) for row in fleet.evaluator.state().fleet]
    if records is not None:
        records.write_text("\n".join(lines) + "\n")
    # The status document after the last poll: its first read works out each replica's advice in
    # its engine's own terms (deferred from the poll to whoever reads it), a second read of the same
    # view reuses them; the service renders it once per poll, on the first request.
    view = fleet.evaluator.view()
    t_cpu = time.process_time()
    status_bytes = len(encode_status(view))
    status_first = time.process_time() - t_cpu
    t_cpu = time.process_time()
    encode_status(view)
    status_again = time.process_time() - t_cpu
    gc.collect()
    state = fleet.evaluator.state()

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    return {
        "evaluations_per_poll": evaluations,
        "queries_per_poll": state.queries_per_poll,
        "cpu_seconds_per_poll": median(cpu),
        "wall_seconds_per_poll": median(wall),
        "query_seconds_per_poll": median(queried),  # Prometheus's evaluation and the transfer
        "rss_idle_mib": rss_idle,  # after imports and the evaluator, before the first poll
        "rss_peak_mib": _rss_mib("VmHWM"),  # the whole run's peak (Linux: ru_maxrss)
        "rss_after_mib": _rss_mib("VmRSS"),  # what the polls leave held (state + allocator)
        "answer_bytes": client.largest,  # the largest window answer, bytes
        "answer_bytes_per_poll": median(sizes),  # every answer of a poll, bytes
        "status_first_cpu_seconds": status_first,  # the status document's first render after a poll
        "status_again_cpu_seconds": status_again,  # the same view rendered again
        "status_bytes": status_bytes,
    }


def per_replica_mib(rows: list[dict]) -> float | None:
    """The least-squares slope of peak RSS over replicas (MiB per replica), two sizes or more."""
    if len(rows) < 2:
        return None
    xs = [float(r["replicas"]) for r in rows]
    ys = [float(r["rss_peak_mib"]) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


#: What `python -m bench --only fleet` measures: (replicas, modes).
PLAN: tuple[tuple[int, tuple[str, ...]], ...] = ((1000, ("raw", "recorded")), (10000, ("recorded",)))


def run_fleet(
    smoke: bool,
    plan: tuple[tuple[int, tuple[str, ...]], ...] = PLAN,
    repeat: int = 3,
    records: Path | None = None,
    duration: float = DURATION,
) -> tuple[Table, dict]:
    """`python -m bench` part "fleet": the table below, and its rows as data."""
    if smoke:
        plan, repeat = ((10, ("raw", "recorded")),), 1
    table = Table(
        "fleet",
        "Fleet mode: specwatch CPU, memory, queries and answer bytes per poll vs replicas, raw or recorded reads "
        "(backfilled Prometheus, one run)",
        [
            "replicas",
            "read",
            "evaluations / poll",
            "queries / poll",
            "answer bytes / poll",
            "Prometheus / poll",
            "rules / evaluation",
            "specwatch CPU / poll",
            "wall / poll",
            "status: first read / again",
            "peak RSS",
            "load average",
        ],
        note="CPU: the polling process's CPU time for one poll (HTTP, JSON, grouping, derivations, cost model, "
        "verdicts); Prometheus's own CPU is not counted. Median of the polls after a warm-up. Prometheus / poll: "
        "the queries' wall time (evaluation and transfer). Rules / evaluation: Prometheus's own evaluation time of "
        "the recording group's expressions once at the last step, summed (what the rules cost Prometheus each "
        "evaluation interval). Status: CPU of the status document's first render after the last poll (it works "
        "out each replica's advice in its engine's terms) and of a second render of the same view. "
        f"Peak RSS: VmHWM of a process that only imports specwatch, builds the evaluator and polls. Replicas are "
        f"copies of one {duration:g} s recording, spread over {AGGREGATES} namespaces.",
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="specwatch-fleet-bench-") as tmp:
        work = Path(tmp)
        recording = work / "steady.jsonl"
        from specwatch.sim.record import record

        record("steady", recording, poll_interval=SCRAPE, seed=1, duration=duration)
        for n, modes in plan:
            for row in measure(n, recording, work, repeat, records.with_suffix(f".{n}") if records else None, modes):
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                table.add(
                    f"{n:,}",
                    "recorded" if row["recorded"] else "raw",
                    f"{row['evaluations_per_poll']:,}",
                    f"{row['queries_per_poll']:g}",
                    f"{row['answer_bytes_per_poll'] / 1024:,.0f} KiB",
                    f"{row['query_seconds_per_poll'] * 1000:,.0f} ms",
                    f"{row['rules_seconds'] * 1000:,.0f} ms" if "rules_seconds" in row else "-",
                    f"{row['cpu_seconds_per_poll'] * 1000:,.0f} ms",
                    f"{row['wall_seconds_per_poll'] * 1000:,.0f} ms",
                    f"{row['status_first_cpu_seconds'] * 1000:,.0f} / {row['status_again_cpu_seconds'] * 1000:,.0f} ms",
                    f"{row['rss_peak_mib']:.0f} MiB",
                    f"{row['load_average_1m']:.1f}",
                )
    slope = per_replica_mib([r for r in rows if not r["recorded"]])
    return table, {"rows": rows, "peak_rss_mib_per_replica": slope}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replicas", default=None, help="sizes, comma-separated (default: the PLAN)")
    parser.add_argument("--modes", default="raw,recorded", help="with --replicas: raw, recorded or both")
    parser.add_argument("--duration", type=float, default=DURATION, help="seconds of history per replica")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--records", type=Path, default=None, help="write each size's evaluation records here")
    parser.add_argument("--poll", metavar="URL", default=None, help=argparse.SUPPRESS)  # the child
    parser.add_argument("--last", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--recorded", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.poll:
        print(json.dumps(poll_child(args.poll, args.last, args.repeat, args.records, args.recorded)))
        return 0
    if not shutil.which("prometheus") or not shutil.which("promtool"):
        print("fleet bench: prometheus and promtool are required", file=sys.stderr)
        return 2
    modes = tuple(m for m in args.modes.split(",") if m)
    if any(m not in ("raw", "recorded") for m in modes):
        print("fleet bench: --modes takes raw, recorded", file=sys.stderr)
        return 2
    plan = tuple((int(x), modes) for x in args.replicas.split(",")) if args.replicas else PLAN
    table, data = run_fleet(False, plan, args.repeat, args.records, args.duration)
    print(table.markdown())
    for row in data["rows"]:
        if "rule_seconds" in row:  # where the rules' evaluation time goes (docs/fleet.md)
            print(f"\nrules at {row['replicas']:,} replicas, Prometheus's evaluation time, largest first:")
            for record, seconds in sorted(row["rule_seconds"].items(), key=lambda item: -item[1]):
                print(f"  {seconds * 1000:9,.0f} ms  {record}")
    if data["peak_rss_mib_per_replica"] is not None:
        print(f"\npeak RSS per replica (least-squares slope): {data['peak_rss_mib_per_replica'] * 1024:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
