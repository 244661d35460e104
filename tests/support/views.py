"""A View around a hand-built or pipeline-made state, as a source publishes it (specwatch.view)."""

from __future__ import annotations

from specwatch.config import Config
from specwatch.config.cost_model import cost_model_from_config
from specwatch.view import View
from specwatch.view.fleet import FleetState
from specwatch.view.targets import NO_TARGETS, State


def view_of(state: State = NO_TARGETS, config: Config | None = None, fleet: FleetState | None = None) -> View:
    """The View of `state` (or of `fleet`) under `config`, with the cost model built from it."""
    config = config if config is not None else Config()
    return View(config, cost_model_from_config(config), state, fleet)
