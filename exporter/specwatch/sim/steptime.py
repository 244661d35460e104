"""Step time of the simulated engine: the ONE place the simulator asks "how long does a step take".

By default it uses the project's cost model, built with ``costmodel.build_cost_model`` from the
scenario's `hardware`, `model`, `dtype`, `tensor_parallel` and `method`, exactly as the sidecar builds
it from its config, with the per-request context set to the scenario's mean context. So the
simulated ITL and the sidecar's break-even come from the same maths, and the scenario's documented
verdict crossings are what a correct sidecar must find. A speculative step pays the model's
drafting and its fixed costs of speculation (docs/costmodel.md).

A scenario's `spec_cost_scale` multiplies the fixed costs of speculation (verify overhead, per
request, per drafting pass) of that cost model: the truth of a server whose prior is wrong by that
factor. A scenario's `step_time:` section (scenario.StepCurve) replaces that with a curve of its own, unlike
every preset; the sidecar must then learn it (costmodel/learned.py). The truth (break-even,
speedup, best K) always comes from the step times the engine really uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from specwatch import costmodel
from specwatch.costmodel.breakeven import first_drop_best

if TYPE_CHECKING:
    from specwatch.sim.scenario import Scenario, StepCurve


class StepTimer:
    """Step and draft time of the simulated target, and the break-even maths at nominal parameters.

    step_time(tokens, context_tokens): one target forward over `tokens` query tokens with
    `context_tokens` KV tokens in the whole batch. draft_time(batch, k): what a speculative step pays
    beyond that forward (drafting `k` tokens for each of `batch` requests and the fixed costs).
    breakeven/speedup/best_k use `context_per_request` per request."""

    def __init__(self, scenario: Scenario, context_per_request: float):
        self.context_per_request = float(context_per_request)
        self.curve: StepCurve | None = scenario.step_time
        #: Reported as the simulator's `step_time_model` in its truth.
        self.which = "costmodel" if self.curve is None else "scenario"
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
            # A simulated vLLM pays vLLM's fixed costs of speculation (its engine prior; V0's for
            # the V0 schema), as the sidecar prices a payload it reads as vLLM.
            engine="vllm",
            engine_version="0" if scenario.schema == "v0" else None,
        )
        #: The engine's own step-cost profile (its adaptive controller plans with it): the cost model
        #: without spec_cost_scale, wrong by that factor about the costs of speculation.
        self.profile_model = self.cost_model
        scale = scenario.spec_cost_scale
        if scale != 1.0:
            cm = self.cost_model
            self.cost_model = dataclasses.replace(
                cm,
                verify_overhead_seconds=scale * cm.verify_overhead_seconds,
                verify_seconds_per_request=scale * cm.verify_seconds_per_request,
                draft=dataclasses.replace(cm.draft, fixed_seconds=scale * cm.draft.fixed_seconds),
            )
        self.ngram = self.cost_model.draft.method in ("ngram", "suffix")

    # -- timing used by the engine step -------------------------------------------------------
    def step_time(self, tokens: float, context_tokens: float) -> float:
        c = self.curve
        if c is None:
            return self.cost_model.step_time(tokens, context_tokens)
        n = max(float(tokens), 1.0)
        return (
            c.fixed_seconds
            + c.seconds_per_token * min(n, c.knee_tokens)
            + c.seconds_per_token_after_knee * max(n - c.knee_tokens, 0.0)
            + c.seconds_per_kv_token * max(float(context_tokens), 0.0)
        )

    def draft_time(self, batch: float, k: int) -> float:
        if k <= 0 or batch <= 0:
            return 0.0
        c = self.curve
        cm = self.cost_model
        b = max(float(batch), 1.0)
        if c is None:
            return cm.draft_time(b, k) + cm.spec_overhead_time(b, b * (k + 1))
        if self.ngram:
            drafting = costmodel.NGRAM_FRACTION_OF_VERIFY * self.step_time(b * (k + 1), b * self.context_per_request)
        else:
            drafting = k * c.draft_seconds
        return c.spec_overhead_seconds + drafting

    def profile_step(self, batch: int, k: int, context_tokens: float) -> float:
        """What the engine's adaptive controller expects a step of ``batch`` decoding requests
        drafting ``k`` tokens each to take (its step-cost profile, see ``profile_model``)."""
        b = max(float(batch), 1.0)
        if self.curve is not None:
            return self.step_time(b * (k + 1), context_tokens) + self.draft_time(b, k)
        cm = self.profile_model
        step = cm.step_time(b * (k + 1), context_tokens)
        return step + cm.draft_time(b, k) + cm.spec_overhead_time(b, b * (k + 1)) if k > 0 else step

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
        return (self._spec(batch, k) / self._base(batch) - 1.0) / k

    def speedup(self, batch: float, per_pos: Sequence[float]) -> float:
        """(1 + sum p_i) · T_base / T_spec with K = len(per_pos)."""
        if not per_pos:
            return 1.0
        return (1.0 + float(sum(per_pos))) * self._base(batch) / self._spec(batch, len(per_pos))

    def best_k(self, batch: float, per_pos: Sequence[float]) -> int:
        """Best K' in 0..len(p), scanning up and stopping at the first drop (as the sidecar does)."""
        return first_drop_best(self.speedup(batch, per_pos[:kk]) for kk in range(1, len(per_pos) + 1))
