"""A View around a hand-built or pipeline-made state, as a source publishes it (specwatch.view)."""

from __future__ import annotations

from specwatch import sim
from specwatch.config import Config
from specwatch.config.cost_model import cost_model_from_config
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.polling import simulated_polls
from specwatch.view import View
from specwatch.view.fleet import FleetState
from specwatch.view.targets import NO_TARGETS, State
from support.builders import OFFLINE_URL, scenario_config


def view_of(state: State = NO_TARGETS, config: Config | None = None, fleet: FleetState | None = None) -> View:
    """The View of `state` (or of `fleet`) under `config`, with the cost model built from it."""
    config = config if config is not None else Config()
    return View(config, cost_model_from_config(config), state, fleet)


def alpha_drop_state() -> State:
    """A sidecar's state after 29 polls of the alpha-drop scenario (seed 1), judged with min_drafts 50
    and hold 2: one target, one route with evaluations, for the tests that read a View's rows."""
    scenario, poll = sim.load_scenario("alpha-drop"), 5.0
    config = scenario_config(scenario, poll_interval=poll, url=OFFLINE_URL, min_drafts=50, hold=2)
    pipeline = Pipeline(config)
    for _ in simulated_polls(sim.Simulator(scenario, seed=1), pipeline, interval=poll, count=29):
        pass
    return pipeline.state()
