"""`specwatch demo`: the simulated vLLM plus the real sidecar on loopback, and a live table.

No vLLM needed. The simulator (default scenario alpha-drop, accelerated) serves vLLM's exact
/metrics; the unmodified sidecar polls it over HTTP, configured with the scenario's hardware and
model so its break-even is computed from the same cost model the simulator's step times use.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, TextIO

from specwatch.base.logsetup import configure_logging
from specwatch.config import from_mapping, parse_duration

if TYPE_CHECKING:
    from specwatch.sidecar.state import State
    from specwatch.verdict.evaluation import RouteEvaluation


def _fmt(value: Any, spec: str = ".3f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def _fmt_breakeven(value: float | None) -> str:
    # Above 1 only says that no acceptance rate pays (values like 60.6 occur): say that instead.
    return "cannot pay" if value is not None and value >= 1.0 else _fmt(value)


def _recommendation(evaluation: RouteEvaluation) -> str:
    """What to do with --speculative-config, by action, as the alert descriptions render it."""
    advice = evaluation.advice if evaluation.guard_passed else None
    if advice is None or advice.action is None:
        return "-"
    if advice.action == "remove_speculative_config":
        return "remove"
    keys = advice.recommended_config if advice.action == "apply" else advice.config_changes
    if not keys:
        return "no change"
    text = json.dumps(keys, separators=(",", ":"), sort_keys=True)
    return text if advice.action == "apply" else f"merge {text}"


def render_table(state: State, sim_truth: dict[str, Any] | None = None, sim_time: float | None = None) -> str:
    header = (
        "route",
        "window",
        "alpha",
        "break-even",
        "batch",
        "ITL p50 ms",
        "ITL p99 ms",
        "speedup",
        "verdict",
        "--speculative-config",
    )
    rows = []
    for route in state.routes:
        for evaluation in route.evaluations:
            stats = evaluation.stats
            rows.append(
                (
                    route.route,
                    stats.window,
                    _fmt(evaluation.value("acceptance_rate")),
                    _fmt_breakeven(evaluation.value("breakeven_acceptance_rate")),
                    _fmt(stats.batch_size, ".1f"),
                    _fmt(stats.itl_p50_seconds and stats.itl_p50_seconds * 1000, ".1f"),
                    _fmt(stats.itl_p99_seconds and stats.itl_p99_seconds * 1000, ".1f"),
                    _fmt(evaluation.value("expected_speedup"), ".2f"),
                    evaluation.verdict or "-",
                    _recommendation(evaluation),
                )
            )
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = []
    if sim_time is not None:
        lines.append(f"simulated time {sim_time:7.1f}s" + (f"  truth: {_truth_line(sim_truth)}" if sim_truth else ""))
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    if not rows:
        lines.append("(waiting for two polls...)")
    return "\n".join(lines)


def _truth_line(truth: dict[str, Any]) -> str:
    parts = []
    if "phase" in truth:
        parts.append(f"phase={truth['phase']}")
    for route, values in (truth.get("routes") or {}).items():
        if isinstance(values, dict):
            alpha = values.get("acceptance_rate") or values.get("alpha")
            batch = values.get("batch") or values.get("batch_size")
            parts.append(f"{route}: alpha={_fmt(alpha)} batch={_fmt(batch, '.0f')}")
    return " ".join(parts)


def run_demo(
    *,
    scenario_name: str,
    speed: float,
    duration: float | None,
    poll_interval: float,
    windows: tuple[str, ...],
    port: int,
    refresh: float,
    out: TextIO,
    seed: int = 0,
) -> int:
    from specwatch import sim
    from specwatch.serve.service import Service
    from specwatch.sim.sidecar_config import sidecar_config_for

    configure_logging("json", "warning")
    scenario = sim.load_scenario(scenario_name)
    handle = sim.serve(scenario, host="127.0.0.1", port=0, speed=speed, seed=seed)
    config = from_mapping(
        sidecar_config_for(
            scenario, target_url=handle.url, listen=f"127.0.0.1:{port}", poll_interval=poll_interval, windows=windows
        )
    )
    service = Service(config)
    stop = threading.Event()
    try:
        service.start()
        base = f"http://127.0.0.1:{service.port}"
        out.write(f"specwatch demo: scenario {scenario.name!r} at {speed:g}x ({scenario.description.strip()})\n")
        out.write(f"simulated vLLM: {handle.url}\nsidecar: {base}/metrics  {base}/api/v1/status\n")
        out.write("Ctrl-C to stop.\n\n")
        out.flush()
        end = time.monotonic() + duration if duration else None
        while not stop.is_set():
            wait = refresh if end is None else min(refresh, max(0.0, end - time.monotonic()))
            if stop.wait(wait):
                break
            truth = handle.truth() if hasattr(handle, "truth") else None
            sim_time = handle.sim_time() if callable(getattr(handle, "sim_time", None)) else None
            out.write(render_table(service.published.state, truth, sim_time) + "\n\n")
            out.flush()
            if end is not None and time.monotonic() >= end:
                break
            if sim_time is not None and sim_time >= scenario.duration and end is None:
                break
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
        handle.stop()
    out.write("demo finished.\n")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    duration = parse_duration(args.duration, "--duration") if args.duration else None
    poll = parse_duration(args.poll_interval, "--poll-interval")
    windows = tuple(w.strip() for w in args.windows.split(",") if w.strip())
    return run_demo(
        scenario_name=args.scenario,
        speed=args.speed,
        duration=duration,
        poll_interval=poll,
        windows=windows,
        port=args.port,
        refresh=parse_duration(args.refresh, "--refresh"),
        out=sys.stdout,
        seed=args.seed,
    )


def add_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser("demo", help="run the built-in simulated vLLM and the sidecar, and print a live table")
    demo.add_argument("--scenario", default="alpha-drop", help="simulator scenario (default alpha-drop)")
    demo.add_argument(
        "--speed", type=float, default=10.0, help="simulation speed-up (default 10x: the story in about a minute)"
    )
    demo.add_argument(
        "--duration", default=None, help="stop after this wall time, e.g. 20s (default: the scenario's end)"
    )
    demo.add_argument("--poll-interval", default="1s", help="sidecar poll interval (default 1s)")
    demo.add_argument(
        "--windows", default="5s,15s", help="sidecar windows in wall time (default 5s,15s: 50 s and 150 s simulated)"
    )
    demo.add_argument("--refresh", default="5s", help="table refresh interval (default 5s)")
    demo.add_argument("--port", type=int, default=0, help="sidecar port on 127.0.0.1 (default: a free port)")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=cmd_demo)
