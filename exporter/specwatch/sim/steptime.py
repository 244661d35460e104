"""Step time of the simulated engine: the ONE place the simulator asks "how long does a step take".

It uses the project's cost model, built with ``costmodel.build_cost_model`` from the scenario's
`hardware`, `model`, `dtype`, `tensor_parallel` and `method`, exactly as the sidecar builds it from
its config, with the per-request context set to the scenario's mean context. So the simulated ITL
and the sidecar's break-even come from the same maths, and the scenario's documented verdict
crossings are what a correct sidecar must find. The model is described in docs/costmodel.md.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import costmodel

if TYPE_CHECKING:
    from .scenario import Scenario


class StepTimer:
    """Step and draft time of the simulated target, and the break-even maths at nominal parameters.

    step_time(tokens, context_tokens): one target forward over `tokens` query tokens with
    `context_tokens` KV tokens in the whole batch. draft_time(batch, k): proposing k tokens for each
    of `batch` requests. breakeven/speedup/best_k use `context_per_request` per request."""

    #: Reported as the simulator's `step_time_model` in its truth.
    which = "costmodel"

    def __init__(self, scenario: Scenario, context_per_request: float):
        self.context_per_request = float(context_per_request)
        # Errors (a bad preset) propagate: the scenario is wrong.
        self.cost_model = costmodel.build_cost_model(
            hardware=scenario.hardware,
            tensor_parallel=scenario.tensor_parallel or 1,
            model=scenario.model,
            dtype=scenario.dtype or "bf16",
            context_tokens=self.context_per_request,
            draft_method=scenario.method or "auto",
            draft_cost_per_token=scenario.draft_cost_per_token,
            draft_k=scenario.num_speculative_tokens or costmodel.DEFAULT_DRAFT_K,
        )

    # -- timing used by the engine step -------------------------------------------------------
    def step_time(self, tokens: float, context_tokens: float) -> float:
        return self.cost_model.step_time(tokens, context_tokens)

    def draft_time(self, batch: float, k: int) -> float:
        if k <= 0 or batch <= 0:
            return 0.0
        return self.cost_model.draft_time(batch, k)

    # -- nominal maths (truth) -----------------------------------------------------------------
    def _base(self, batch: float) -> float:
        b = max(batch, 1.0)
        return self.step_time(b, b * self.context_per_request)

    def _spec(self, batch: float, k: int) -> float:
        b = max(batch, 1.0)
        return self.step_time(b * (k + 1), b * self.context_per_request) + self.draft_time(b, k)

    def plain_step(self, batch: float) -> float:
        return self._base(batch)

    def spec_step(self, batch: float, k: int) -> float:
        return self._spec(batch, k) if k > 0 else self._base(batch)

    def breakeven(self, batch: float, k: int) -> float:
        """alpha*(B, K) = (T_spec / T_base - 1) / K."""
        if k <= 0:
            return float("nan")
        return costmodel.breakeven_acceptance_rate(self.cost_model, max(batch, 1.0), k)

    def speedup(self, batch: float, per_pos: Sequence[float]) -> float:
        """(1 + sum p_i) · T_base / T_spec with K = len(per_pos)."""
        if not per_pos:
            return 1.0
        return costmodel.expected_speedup_for_positions(self.cost_model, max(batch, 1.0), per_pos)

    def best_k(self, batch: float, per_pos: Sequence[float]) -> int:
        return costmodel.best_draft_length(self.cost_model, max(batch, 1.0), per_pos)
