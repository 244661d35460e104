"""`specwatch sim`: serve a scenario on loopback, or write a recording without HTTP.

Also runnable as `python -m specwatch.sim ...`."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Sequence

from specwatch.sim.describe import describe
from specwatch.sim.record import record
from specwatch.sim.scenario import Scenario, ScenarioError, list_scenarios, load_scenario, parse_duration
from specwatch.sim.server import serve
from specwatch.sim.simulator import crossings


def add_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "sim",
        help="run the simulated vLLM (serve /metrics on loopback, or --record a JSONL recording)",
        description="Simulated vLLM: exact vLLM /metrics from a discrete-time decode simulation. "
        f"Shipped scenarios: {', '.join(list_scenarios())}.",
    )
    p.add_argument("--scenario", default="alpha-drop", help="shipped scenario name or a YAML path")
    p.add_argument("--host", default="127.0.0.1", help="listen address (loopback by default)")
    p.add_argument("--port", type=int, default=0, help="listen port (0 = a free port)")
    p.add_argument("--speed", type=float, default=1.0, help="sim seconds per wall second")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--duration", default=None, help="stop after this much SIM time (default: the scenario's length)")
    p.add_argument(
        "--record",
        metavar="OUT.jsonl",
        default=None,
        help="write a recording (the `specwatch record` format) directly (no HTTP, no faults) and exit",
    )
    p.add_argument("--poll-interval", default="5s", help="recording interval in sim time (default 5s)")
    p.add_argument("--target", default="vllm", help="target name written into the recording")
    p.add_argument(
        "--truth-every",
        default="10s",
        help="while serving, print the true parameters as a JSON line every this much sim time",
    )
    p.add_argument("--list", action="store_true", help="list shipped scenarios and exit")
    p.add_argument(
        "--crossings",
        action="store_true",
        help="print the scenario's true verdict crossings (sim seconds) as JSON and exit",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """A bad scenario, flag value or port raises argparse.ArgumentTypeError: the CLI prints
    ``specwatch sim: error: ...`` and exits 2."""
    if not args.speed > 0:
        raise argparse.ArgumentTypeError(f"--speed {args.speed:g}: must be > 0")
    if not 0 <= args.port <= 65535:
        raise argparse.ArgumentTypeError(f"--port {args.port}: must be in 0..65535")
    try:
        if args.list:
            for name in list_scenarios():
                sc = load_scenario(name)
                print(f"{name:14s} {sc.duration:6.0f}s  {describe(sc)}")
            return 0
        sc = load_scenario(args.scenario)
        if args.crossings:
            print(json.dumps(crossings(sc)))
            return 0
        duration = parse_duration(args.duration, "--duration") if args.duration else None
        if args.record:
            n = record(
                sc,
                args.record,
                poll_interval=parse_duration(args.poll_interval, "--poll-interval"),
                seed=args.seed,
                target=args.target,
                duration=duration,
            )
            print(f"wrote {n} polls of scenario {sc.name!r} to {args.record}", file=sys.stderr)
            return 0
        return _serve(sc, args, duration)
    except OSError as exc:
        raise argparse.ArgumentTypeError(
            f"{getattr(exc, 'filename', None) or ''} {exc.strerror or exc}".strip()
        ) from None
    except (ScenarioError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _serve(sc: Scenario, args: argparse.Namespace, duration: float | None) -> int:
    end = sc.duration if duration is None else duration
    every = parse_duration(args.truth_every, "--truth-every")
    h = serve(sc, host=args.host, port=args.port, speed=args.speed, seed=args.seed)
    stop = threading.Event()
    prev = signal.signal(signal.SIGINT, lambda *_: stop.set())
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"simulated vLLM ({sc.name}, schema {sc.schema}, speed x{args.speed:g}) serving {h.url}", flush=True)
    next_t = 0.0
    try:
        while not stop.is_set():
            t = h.sim_time()
            if t >= end:
                break
            if every > 0 and t >= next_t:
                tr = h.truth()
                print(
                    json.dumps(
                        {
                            "t": round(tr["t"], 1),
                            "phase": tr["phase"],
                            "routes": {
                                k: {x: v[x] for x in ("alpha", "k", "batch", "breakeven_acceptance_rate", "verdict")}
                                for k, v in tr["routes"].items()
                            },
                        }
                    ),
                    flush=True,
                )
                next_t = t + every
            stop.wait(min(0.2, max(0.01, (end - t) / args.speed)))
    finally:
        signal.signal(signal.SIGINT, prev)
        h.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specwatch.sim")
    sub = parser.add_subparsers(dest="cmd")
    add_parsers(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "sim":
        argv = ["sim"] + argv
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except argparse.ArgumentTypeError as exc:
        print(f"specwatch sim: error: {exc}\nspecwatch sim: see 'specwatch sim --help'", file=sys.stderr)
        return 2
    return code
