"""CPU of one tick's sleep: what the poll thread pays to sleep until its next poll and wake up.

    python -m bench.wake_cost [--gap 0.2] [--wakes 60] [--rounds 3]

A thread sleeps WAKES times for GAP seconds each (nothing wakes it early, as between two polls),
on each of:

- `Wake` (serve/service.py): what the poll loop sleeps on, a lock used as a binary semaphore;
- `threading.Event().wait`: what it slept on before, through a Condition;
- `time.sleep`: the floor, a sleep nothing can end early (the poll loop must be woken by a reload,
  a stop or a drain, so it cannot use it).

Each figure is the thread's CPU over its wakes (from time.thread_time_ns: the kernel's timer and
scheduling work on the thread's behalf included), per wake, the median over ROUNDS, the kinds
alternating within each round so that the host's load falls on all alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable

from specwatch.serve.service import Wake

from .common import machine


def _kinds() -> dict[str, Callable[[float], object]]:
    wake, event = Wake(), threading.Event()
    return {"Wake": wake.wait, "threading.Event": event.wait, "time.sleep": time.sleep}


def _cpu_per_wake(sleep: Callable[[float], object], gap: float, wakes: int) -> float:
    """Microseconds of the sleeping thread's CPU per wake."""
    out: list[float] = []

    def run() -> None:
        start = time.thread_time_ns()
        for _ in range(wakes):
            sleep(gap)
        out.append((time.thread_time_ns() - start) / wakes / 1e3)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def measure(gap: float, wakes: int, rounds: int) -> dict:
    kinds = _kinds()
    seen: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(rounds):
        for name, sleep in kinds.items():
            seen[name].append(_cpu_per_wake(sleep, gap, wakes))
    result: dict = {
        "gap_s": gap,
        "wakes": wakes,
        "rounds": rounds,
        "us_per_wake": {name: round(statistics.median(v), 1) for name, v in seen.items()},
        "rounds_us": {name: [round(x, 1) for x in v] for name, v in seen.items()},
        "machine": machine(),
    }
    result["event_minus_wake_us"] = round(result["us_per_wake"]["threading.Event"] - result["us_per_wake"]["Wake"], 1)
    return result


def _positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    """An argparse type: a finite number above zero, else one line and exit 2."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be above zero: {text!r}")
        return value

    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wake_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--gap", type=_positive(float), default=0.2, help="seconds of each sleep")
    parser.add_argument("--wakes", type=_positive(int), default=60, help="sleeps per kind and round")
    parser.add_argument("--rounds", type=_positive(int), default=3)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.gap, args.wakes, args.rounds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
