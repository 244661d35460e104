"""(2) Whole process: `specwatch replay` over a 24 h recording (17,280 polls at 5 s), against two
peers, alternating runs: the same command with prometheus_client's parser swapped in
(bench/pcparser.py; its output must be byte-identical), and a process that only parses every
payload of the recording with prometheus_client (bench/pcloop.py; the goal: replay takes at least 10×
less CPU than that loop, start-up included).

Each run is its own process; wall time, CPU time and peak RSS (ru_maxrss from wait4 on that very
child) are measured from outside. Every process runs from bytecode, as an installed package does:
Python's bytecode cache goes to bench/.cache/pycache (PYTHONPYCACHEPREFIX, so the source tree stays
clean) even where PYTHONDONTWRITEBYTECODE is set, and one untimed run of each command fills it.
Otherwise specwatch, run from the source tree, would be compiled at every start while the peers'
prometheus_client loads from the venv's bytecode.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from specwatch import sim
from specwatch.sim.sidecar_config import sidecar_config_for

from . import payloads
from .common import REPO, Table, cache_dir, median, verdict_mark

FULL_POLLS = 17_280  # 24 h at 5 s
SMOKE_POLLS = 720  # 1 h


def replay_config(scenario: str = "steady") -> Path:
    sc = sim.load_scenario(scenario)
    cfg = sidecar_config_for(
        sc,
        target_url="http://127.0.0.1:1/metrics",
        listen="127.0.0.1:0",
        poll_interval=payloads.POLL,
        windows=("1m", "5m"),
    )
    path = cache_dir() / f"replay-{scenario}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _specwatch_cmd() -> list[str]:
    script = Path(sys.executable).with_name("specwatch")
    return (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "import sys; from specwatch.cli.main import main; sys.exit(main())"]
    )


def run_measured(cmd: list[str], out_path: Path) -> dict:
    """Wall, CPU and peak RSS of one child process.

    Peak RSS comes from GNU time (%M) wrapped around the command: ru_maxrss of a child forked from this
    (large) benchmark process would include the parent's own high-water mark, which Linux carries across
    exec. Without /usr/bin/time, wait4's ru_maxrss is used (an upper bound)."""
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        PYTHONPYCACHEPREFIX=str(cache_dir() / "pycache"),
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    gnu_time = Path("/usr/bin/time").exists()
    stats = out_path.with_suffix(".time")
    full = (["/usr/bin/time", "-f", "%M", "-o", str(stats)] + cmd) if gnu_time else cmd
    with open(out_path, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdout=out, stderr=subprocess.PIPE, cwd=REPO, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}: {err[-2000:]}")
    rss_kb = float(stats.read_text().split()[-1]) if gnu_time else usage.ru_maxrss
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": rss_kb / 1024.0}


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def run_replay(smoke: bool) -> tuple[Table, dict]:
    polls = SMOKE_POLLS if smoke else FULL_POLLS
    rec = payloads.tiled_recording(polls)
    cfg = replay_config()
    rec_bytes = rec.stat().st_size
    sw_cmd = _specwatch_cmd() + ["replay", "--config", str(cfg), str(rec)]
    pc_cmd = [sys.executable, "-m", "bench.pcparser", "replay", "--config", str(cfg), str(rec)]
    loop_cmd = [sys.executable, "-m", "bench.pcloop", str(rec)]
    floor_cmd = [
        sys.executable,
        "-c",
        "import specwatch.cli.main, specwatch.sidecar.pipeline, specwatch.sidecar.replay",
    ]
    sw_out = cache_dir() / f"replay-out-specwatch-{polls}.jsonl"
    pc_out = cache_dir() / f"replay-out-pc-{polls}.jsonl"
    loop_out = cache_dir() / f"replay-out-pcloop-{polls}.txt"
    commands = {"sw": (sw_cmd, sw_out), "pc": (pc_cmd, pc_out), "loop": (loop_cmd, loop_out)}
    # Untimed: every command over the recording's first polls fills the bytecode cache.
    head = cache_dir() / "replay-warm-up.jsonl"
    with open(rec, encoding="utf-8") as src:
        head.write_text("".join(line for _, line in zip(range(3), src, strict=False)))
    for cmd, out in commands.values():
        run_measured([str(head) if part == str(rec) else part for part in cmd], out)
    order = ["sw", "pc", "loop", "sw"] if smoke else ["sw", "pc", "loop", "sw", "pc", "loop", "sw"]
    runs: dict[str, list[dict]] = {"sw": [], "pc": [], "loop": []}
    for which in order:
        runs[which].append(run_measured(*commands[which]))
    floor = run_measured(floor_cmd, cache_dir() / "floor.out")
    identical = _digest(sw_out) == _digest(pc_out)
    with open(sw_out, "rb") as handle:
        lines = sum(1 for _ in handle)

    def agg(rs, key):
        return median(r[key] for r in rs)

    sw = {k: agg(runs["sw"], k) for k in ("wall_s", "cpu_s", "peak_rss_mb")}
    pc = {k: agg(runs["pc"], k) for k in ("wall_s", "cpu_s", "peak_rss_mb")}
    loop = {k: agg(runs["loop"], k) for k in ("wall_s", "cpu_s", "peak_rss_mb")}
    loop_ratio = loop["cpu_s"] / sw["cpu_s"]
    hours = polls * payloads.POLL / 3600
    table = Table(
        "replay",
        f"Whole process: `specwatch replay` over {hours:g} h ({polls:,} polls, "
        f"{rec_bytes / 2**20:.0f} MiB recording), one run, alternating",
        ["measure", "specwatch", "same with prometheus_client parser", "ratio", "goal", "met"],
        note=f"Medians of {len(runs['sw'])} specwatch runs and {len(runs['pc'])} of each peer, in alternation; "
        "every process from bytecode (bench/replay_proc.py). Outputs "
        f"({lines:,} evaluation lines) byte-identical: {'yes' if identical else 'NO'}. "
        f"Python + specwatch imports alone: {floor['peak_rss_mb']:.1f} MB peak RSS. "
        "CPU per poll includes reading the JSON line, parse, windows, cost model, verdict and "
        "writing the output lines.",
    )
    table.add(
        "wall time", f"{sw['wall_s']:.1f} s", f"{pc['wall_s']:.1f} s", f"{pc['wall_s'] / sw['wall_s']:.1f}×", "—", "—"
    )
    table.add("CPU time", f"{sw['cpu_s']:.1f} s", f"{pc['cpu_s']:.1f} s", f"{pc['cpu_s'] / sw['cpu_s']:.1f}×", "—", "—")
    table.add(
        "CPU per poll",
        f"{sw['cpu_s'] / polls * 1e3:.2f} ms",
        f"{pc['cpu_s'] / polls * 1e3:.2f} ms",
        f"{pc['cpu_s'] / sw['cpu_s']:.1f}×",
        "—",
        "—",
    )
    table.add(
        "CPU time against a prometheus_client parse-only loop (bench/pcloop.py), start-up included",
        f"{sw['cpu_s']:.2f} s",
        f"loop: {loop['cpu_s']:.2f} s",
        f"{loop_ratio:.1f}×",
        "≥ 10×",
        verdict_mark(loop_ratio >= 10),
    )
    table.add(
        "peak RSS",
        f"{sw['peak_rss_mb']:.1f} MB",
        f"{pc['peak_rss_mb']:.1f} MB",
        f"{pc['peak_rss_mb'] / sw['peak_rss_mb']:.2f}×",
        "< 60 MB",
        verdict_mark(sw["peak_rss_mb"] < 60),
    )
    return table, {
        "polls": polls,
        "recording_bytes": rec_bytes,
        "specwatch": sw,
        "prometheus_client": pc,
        "pcloop": loop,
        "ratio_pcloop_cpu": loop_ratio,
        "runs": runs,
        "identical_output": identical,
        "evaluation_lines": lines,
        "import_floor_rss_mb": floor["peak_rss_mb"],
        "specwatch_output": str(sw_out),
    }
