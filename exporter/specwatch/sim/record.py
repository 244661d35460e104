"""Write a recording (the `specwatch record` format, docs/architecture.md §2) straight from the simulation, without HTTP.

Each line is `{"t": unix_seconds, "target": name, "text": exposition}` with t = EPOCH_BASE + sim
time, so a recording depends only on (scenario, seed, poll_interval) and is byte-for-byte
reproducible. HTTP-layer faults do not apply here; scenario events (restart, spec on/off, schema
switch) do, since they change the exposition itself.
"""

from __future__ import annotations

import json
import os

from specwatch.sim.scenario import Scenario, load_scenario
from specwatch.sim.simulator import Simulator


def record(
    scenario: Scenario | str,
    out_path: str | os.PathLike[str],
    poll_interval: float = 5.0,
    seed: int = 0,
    target: str = "vllm",
    duration: float | None = None,
    start: float = 0.0,
) -> int:
    """Record polls at start, start+poll_interval, ... up to the scenario's end (or `duration`).

    Returns the number of lines written."""
    if poll_interval <= 0:
        raise ValueError("poll_interval must be > 0")
    sc = load_scenario(scenario)
    sim = Simulator(sc, seed=seed)
    end = sc.duration if duration is None else start + duration
    n = 0
    tmp = os.fspath(out_path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        i = 0
        while True:
            t = start + i * poll_interval
            if t > end + 1e-9:
                break
            sim.advance_to(t)
            fh.write(json.dumps({"t": round(sim.epoch + t, 6), "target": target, "text": sim.render()}))
            fh.write("\n")
            n += 1
            i += 1
    os.replace(tmp, out_path)  # never leave a half-written recording behind
    return n
