"""The verdict a sidecar that knows its model's error can give on the simulator's truth: the true
verdict where the true speedup's interval (the model's error only, no sampling noise) is clear of 1
on the verdict's side, else undecided (costmodel/uncertainty.py, verdict/decide.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from specwatch.config import Config
from specwatch.config.cost_model import cost_model_from_config, route_cost_model
from specwatch.costmodel import uncertainty


def decidable_verdict(config: Config, widen: float = 1.0) -> Callable[[dict[str, Any]], str]:
    """A function of one route's truth (Simulator.truth()["routes"][name]); ``widen`` scales the
    interval's width (a tolerance for truths at its edge)."""
    # the simulated vLLM's routes, priced as the sidecar prices them (the detected engine's prior)
    cm = route_cost_model(cost_model_from_config(config), config, "vllm", None)
    z = uncertainty.z_for(config.decision.confidence)

    def verdict_of(truth: dict[str, Any]) -> str:
        verdict, speedup = truth["verdict"], truth["expected_speedup"]
        if verdict == "spec_off" or speedup is None:
            return str(verdict)
        half = widen * z * uncertainty.model_log_error(cm, truth.get("batch"))
        pays, loses = speedup * math.exp(-half) > 1.0, speedup * math.exp(half) < 1.0
        clear = {"keep": pays, "disable": loses}.get(verdict, pays or loses)
        return str(verdict) if clear else "undecided"

    return verdict_of
