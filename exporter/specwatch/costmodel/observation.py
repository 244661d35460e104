"""One evaluation window as a point of the step-time curve, and what a cost model predicts for it.

Each window gives one point: ``B`` requests decoded per engine step (ΔITL count / Δsteps), ``n``
query tokens per step (B plus the draft tokens of the step: Δdraft_tokens / Δsteps) and the mean
step time (ΔITL sum / ΔITL count: vLLM observes one inter-token latency per request per engine step,
so with speculation one observation spans one verify step over B·(1 + coverage·K) query tokens).
A cost model prices that very step: verify + drafting + the fixed costs of speculation for spec-on
windows, the plain step for spec-off windows (model_step_seconds). The learner (learned.py) fits
the ratio of the two. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specwatch.costmodel.roofline import CostModel, draft_coverage

#: A window must cover at least this many engine steps to be a point.
MIN_STEPS_PER_POINT = 20.0


@dataclass(frozen=True)
class StepObservation:
    """One window of one route: the measured mean step at a load."""

    t: float
    batch: float  # requests decoded per engine step
    query_tokens: float  # decode tokens the target verifies per step (B + draft tokens)
    step_seconds: float  # mean engine step time
    draft_length: float  # mean K of the drafts in the window (0: no speculation)
    draft_coverage: float  # share of request-steps that carried a draft, (0, 1]
    steps: float  # engine steps in the window
    prefill_tokens: float = 0.0  # prompt tokens per step (chunked prefill riding along)


def observation_from_deltas(
    t: float,
    itl_sum: float,
    itl_count: float,
    steps: float,
    draft_tokens: float,
    drafts: float,
    prompt_tokens: float = 0.0,
) -> StepObservation | None:
    """A point from one window's counter increases (ITL histogram sum/count, engine steps from
    vllm:iteration_tokens_total's count, draft tokens and drafts, prefill tokens from
    vllm:prompt_tokens). None when the window says nothing reliable: too few steps, or values no
    engine produces."""
    if not (steps >= MIN_STEPS_PER_POINT and itl_count > 0 and itl_sum > 0):
        return None
    batch = itl_count / steps
    step_seconds = itl_sum / itl_count
    if not (math.isfinite(batch) and math.isfinite(step_seconds)) or batch < 0.5 or step_seconds <= 0:
        return None
    k = draft_tokens / drafts if drafts > 0 else 0.0
    coverage = min(drafts / itl_count, 1.0) if drafts > 0 else 0.0
    tokens = max(batch, 1.0) + max(draft_tokens, 0.0) / steps
    return StepObservation(
        t=t,
        batch=batch,
        query_tokens=tokens,
        step_seconds=step_seconds,
        draft_length=k if coverage > 0 else 0.0,
        draft_coverage=coverage,
        steps=steps,
        prefill_tokens=max(prompt_tokens, 0.0) / steps,
    )


def model_step_seconds(model: CostModel, obs: StepObservation, prior: CostModel | None = None) -> float:
    """What ``model`` predicts for the mean step the observation measured: the target's forward
    over its decode tokens (B plus drafts), made longer by the prefill riding along by the factor
    the prior gives it (``prior``: default ``model``; on the roofline prefill is nearly free below
    the knee), plus, with speculation, drafting and the fixed costs of a speculative step."""
    b = max(obs.batch, 1.0)
    context = b * model.context_tokens
    target = model.step_time(obs.query_tokens, context)
    if obs.prefill_tokens > 0:
        shape = prior or model
        target *= shape.step_time(obs.query_tokens + obs.prefill_tokens, context) / shape.step_time(
            obs.query_tokens, context
        )
    return target + spec_extra_seconds(model, obs)


def spec_extra_seconds(model: CostModel, obs: StepObservation) -> float:
    """Drafting plus the fixed costs of a speculative step, as ``model`` prices them (0 spec off)."""
    if not (obs.draft_length > 0 and obs.draft_coverage > 0):
        return 0.0
    b = max(obs.batch, 1.0)
    c = draft_coverage(obs.draft_coverage)
    verify = b * (1 + c * obs.draft_length)
    context = b * model.context_tokens
    return model.spec_step_time(b, obs.draft_length, c) - model.step_time(verify, context)


def prior_step_seconds(prior: CostModel, obs: StepObservation) -> float:
    """What the prior predicts for the step the observation measured."""
    return model_step_seconds(prior, obs)
