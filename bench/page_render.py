"""The live page's render time against the length of its plot history.

`python -m bench.page_render [--rounds N] [--html DIR]`: the simulator's `mixed-routes` scenario
(three routes, 5 s polls) through a real Pipeline, every published View recorded into a PageHistory
as the service does; at 5, 30 and 60 minutes of history it times `render_page` (the page's first
read after a poll), median CPU time of this thread over `rounds` renders of the same view.
`--html DIR` also writes the page of each of the four user-facing scenarios after an hour
(DIR/page-NAME.html), for the screenshots in docs/img/.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from specwatch import sim
from specwatch.config import Config, from_mapping
from specwatch.config.cost_model import cost_model_from_config
from specwatch.export.page import render_page
from specwatch.export.page_history import PageHistory
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.sidecar_config import sidecar_config_for
from specwatch.view import View

from .common import Table, median

POLL = 5.0
MINUTES = (5, 30, 60)
SCENARIOS = ("steady", "alpha-drop", "mixed-routes", "batch-surge")


def scenario_config(name: str) -> Config:
    scenario = sim.load_scenario(name)
    raw = sidecar_config_for(
        scenario,
        target_url="http://127.0.0.1:1/metrics",
        listen="127.0.0.1:0",
        poll_interval=POLL,
        windows=("1m", "5m"),
    )
    return from_mapping(raw, environ={})


def drive(name: str, polls: int, at: tuple[int, ...] = ()) -> tuple[Config, PageHistory, dict[int, View]]:
    """`polls` polls of scenario `name`; the View published at each poll count in `at` (and the last)."""
    config = scenario_config(name)
    pipeline, history = Pipeline(config), PageHistory()
    simulator = sim.Simulator(sim.load_scenario(name), seed=1)
    cost_model = cost_model_from_config(config)
    views: dict[int, View] = {}
    for i in range(1, polls + 1):
        t = POLL * i
        simulator.advance_to(t)
        pipeline.ingest("vllm", t, simulator.render(), duration=0.01)
        pipeline.evaluate(t)
        view = View(config, cost_model, pipeline.state(), None)
        history.record(view)
        if i in at or i == polls:
            views[i] = view
    return config, history, views


def measure(rounds: int = 20) -> dict[str, float]:
    out: dict[str, float] = {}
    for minutes in MINUTES:
        polls = int(minutes * 60 / POLL)
        _, history, views = drive("mixed-routes", polls)
        view = views[polls]
        times, size = [], 0
        for _ in range(rounds):
            t0 = time.thread_time()
            size = len(render_page(view, history, now=0.0))
            times.append(time.thread_time() - t0)
        out[f"render_ms_{minutes}min"] = median(times) * 1e3
        out[f"page_kib_{minutes}min"] = size / 1024
    return out


def run_page(smoke: bool) -> tuple[Table, dict]:
    """The bench registry's part: render time at each history length."""
    rounds = 3 if smoke else 20
    data = measure(rounds)
    table = Table(
        "page_render",
        "The live page's render time against its plot history (mixed-routes, two routes, 5 s polls)",
        ["history", "render_page (first read after a poll)", "page size"],
        note=f"Median CPU time of this thread over {rounds} renders of the same View after 5, 30 and 60 "
        "minutes of polls (python -m bench.page_render). Each plot reads its span as a fixed number "
        "of min/max buckets, so the figure should not grow with the history.",
    )
    for minutes in MINUTES:
        table.add(
            f"{minutes} min", f"{data[f'render_ms_{minutes}min']:.2f} ms", f"{data[f'page_kib_{minutes}min']:.1f} KiB"
        )
    return table, data


def write_pages(directory: Path, minutes: int = 60) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name in SCENARIOS:
        polls = int(minutes * 60 / POLL)
        _, history, views = drive(name, polls)
        path = directory / f"page-{name}.html"
        path.write_bytes(render_page(views[polls], history))
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--html", type=Path, default=None)
    parser.add_argument("--minutes", type=int, default=60)
    args = parser.parse_args()
    if args.html is not None:
        for path in write_pages(args.html, args.minutes):
            print(path)
        return
    for key, value in measure(args.rounds).items():
        print(f"{key:24s} {value:10.3f}")


if __name__ == "__main__":
    main()
