"""Verdict changes per run: how often a scenario's verdicts flap on short windows.

    python -m bench.verdict_changes [SCENARIO_OR_PATH ...] [--windows 5s,20s] [--poll 1] [--seeds 1,2,3]

Each scenario (a shipped name or a YAML path; default: every shipped one and bench/scenarios/) is
polled through the sidecar's Pipeline (the config sidecar_config_for writes, hold 2) and every change
of the verdict of one route and window is counted, summed over seeds, with the keep <-> undecided and
shorten <-> undecided changes apart (docs/costmodel.md, "Uncertainty").
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from specwatch import sim
from specwatch.config import from_mapping
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.polling import simulated_polls
from specwatch.sim.scenario import SCENARIO_DIR, load_scenario
from specwatch.sim.sidecar_config import sidecar_config_for

HERE = Path(__file__).resolve().parent


def verdict_changes(name: str, seed: int, *, poll: float, windows: tuple[str, ...]) -> Counter[frozenset[str]]:
    """Changes of verdict per pair of verdicts over one seeded run."""
    scenario = load_scenario(name)
    raw = sidecar_config_for(
        scenario, target_url="http://127.0.0.1:1/metrics", listen="127.0.0.1:0", poll_interval=poll, windows=windows
    )
    pipeline, simulator = Pipeline(from_mapping(raw, environ={})), sim.Simulator(scenario, seed=seed)
    last: dict[tuple[str, str], str | None] = {}
    changes: Counter[frozenset[str]] = Counter()
    for _t, evaluations in simulated_polls(simulator, pipeline, interval=poll):
        for evaluation in evaluations:
            key, verdict = (evaluation.stats.route, evaluation.stats.window), evaluation.verdict
            if key in last and last[key] != verdict:
                changes[frozenset((str(last[key]), str(verdict)))] += 1
            last[key] = verdict
    return changes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.verdict_changes", description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--windows", default="5s,20s")
    ap.add_argument("--poll", type=float, default=1.0)
    ap.add_argument("--seeds", default="1,2,3")
    args = ap.parse_args(argv)
    names = args.scenarios or [
        *sorted(p.stem for p in Path(SCENARIO_DIR).glob("*.yaml")),
        *sorted(str(p) for p in (HERE / "scenarios").glob("*.yaml")),
    ]
    windows = tuple(w.strip() for w in args.windows.split(",") if w.strip())
    seeds = [int(s) for s in args.seeds.split(",")]
    print("scenario | changes | keep <-> undecided | shorten <-> undecided")
    for name in names:
        total: Counter[frozenset[str]] = Counter()
        for seed in seeds:
            total += verdict_changes(name, seed, poll=args.poll, windows=windows)
        keep = total[frozenset(("keep", "undecided"))]
        shorten = total[frozenset(("shorten", "undecided"))]
        print(f"{Path(name).stem} | {sum(total.values())} | {keep} | {shorten}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
