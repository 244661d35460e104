"""What the sidecar's Pipeline and fleet mode's FleetEvaluator both keep between polls: the
EvaluationContext (config, cost model, stated schedule, assessment memo, one reconfigure) and a
route's step-time learner with its rules (RouteLearning); their per-route records extend
evaluation.RouteRecord. Each keeps only its own on top: the sidecar its targets, scrapes and
windows; fleet mode its Prometheus answers, replicas and freshness. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from specwatch import costmodel
from specwatch.config import Config, LearningConfig
from specwatch.config.cost_model import cost_model_from_config, learning_enabled, route_cost_model
from specwatch.costmodel import learned
from specwatch.engines.series import Counter
from specwatch.engines.vllm_schedule import schedule_from_config
from specwatch.verdict.grading import k_plan
from specwatch.verdict.memo import AssessmentCache
from specwatch.windows.window import WindowView, increases_by_counter

__all__ = ["COST_MODEL", "LEARNERS", "EvaluationContext", "RouteLearning"]

#: What a reconfigure may report as rebuilt.
COST_MODEL, LEARNERS = "cost_model", "learners"

_K = TypeVar("_K")

#: What a step-time point reads of a window, in observation_from_deltas's order (fleet mode's
#: queries carry no prefill counter: 0).
_POINT_COUNTERS = (
    Counter.ITL_SUM,
    Counter.ITL_COUNT,
    Counter.STEPS,
    Counter.DRAFT_TOKENS,
    Counter.DRAFTS,
    Counter.PROMPT,
)


class EvaluationContext:
    """The config and what is derived from it, shared by every route an evaluator evaluates."""

    def __init__(self, config: Config, cost_model: costmodel.CostModel | None = None) -> None:
        self.config = config
        self.cost_model = cost_model if cost_model is not None else cost_model_from_config(config)
        self._derive(config)

    def _derive(self, config: Config) -> None:
        """What follows from the config alone, whether or not its cost inputs changed."""
        self.schedule = schedule_from_config(config.draft.config)  # validated when the config loaded
        self.k_plan = k_plan(config.draft.config)  # K moving along it is no change to grade
        self.assessments = AssessmentCache()  # an unchanged window is not assessed twice
        self.labelled_windows = tuple(zip(config.windows, config.window_labels, strict=True))
        # learning.enabled, auto meaning: when the verdict would rest on defaults (no profile).
        self.learning_enabled = learning_enabled(config)

    def reconfigure(self, config: Config) -> list[str]:
        """Take a reloaded config: the schedule and the memo are derived again, the cost model only
        when its inputs changed ("cost_model"); a change of `learning`, or of whether learning is on
        (auto turns it off when a preset or profile is added), means fresh learners ("learners").
        Returns what was rebuilt, for the evaluator to carry its learners over."""
        old, was_enabled, rebuilt = self.config, self.learning_enabled, []
        self.config = config
        self._derive(config)
        if config.cost_inputs() != old.cost_inputs():
            self.cost_model = cost_model_from_config(config)
            rebuilt.append(COST_MODEL)
        if config.learning != old.learning or self.learning_enabled != was_enabled:
            rebuilt.append(LEARNERS)
        return rebuilt

    def route_model(self, engine: str, schema: str | None) -> costmodel.CostModel:
        """The cost model of a route read as ``engine`` (``schema``): the configured one with the
        detected engine's prior, unless ``engine:`` is configured."""
        return route_cost_model(self.cost_model, self.config, engine, schema)

    def expired(self, seen: Iterable[tuple[_K, int]], poll: int) -> list[_K]:
        """Of (key, poll last seen in): those unseen for route_ttl_polls polls at `poll`."""
        ttl = self.config.route_ttl_polls
        return [key for key, last in seen if poll - last >= ttl]


@dataclass
class RouteLearning:
    """A route's step-time learner (None: not learning yet), the cost class its prior was built
    for ("unknown" until inferred), and the cost model over its current curve."""

    learner: learned.StepTimeLearner | None = None
    learner_method: str = ""
    learned_model: costmodel.CostModel | None = None

    def follow(self, method: str, cost_model: costmodel.CostModel, settings: LearningConfig) -> bool:
        """Give the learner the prior of the cost class `method`: once inferred, the points taken
        before ("unknown", the same drafter) are refitted; another class starts anew (True)."""
        if self.learner is not None and method in (self.learner_method, "unknown"):
            return False
        prior = cost_model.with_method(_prior_method(method))
        started = self.learner is None or self.learner_method != "unknown"
        if self.learner is not None and not started:
            self.learner = self.learner.with_prior(prior)
        else:
            self.learner = learned.StepTimeLearner(
                prior, min_points=settings.min_points, half_life_seconds=settings.half_life
            )
        self.learner_method, self.learned_model = method, None
        return started

    def carry(self, rebuilt: Sequence[str], cost_model: costmodel.CostModel) -> bool:
        """After a reconfigure: the same points under the new prior, or gone (False) on `learning`."""
        self.learned_model = None
        if self.learner is None:
            return True
        if LEARNERS in rebuilt:
            self.learner, self.learner_method = None, ""
            return False
        if COST_MODEL in rebuilt:
            self.learner = self.learner.with_prior(cost_model.with_method(_prior_method(self.learner_method)))
        return True

    def model_over(
        self, cost_model: costmodel.CostModel, curve: learned.LearnedStepCurve | None
    ) -> costmodel.CostModel:
        """The route's cost model: `cost_model` over `curve`, or `cost_model` itself without one."""
        if curve is None:
            return cost_model
        if self.learned_model is None or self.learned_model.profile is not curve:
            self.learned_model = learned.learned_cost_model(cost_model, curve)
        return self.learned_model


def window_point(view: WindowView, t: float) -> learned.StepObservation | None:
    """A window's increases as one step-time point at `t` (None: it says nothing reliable)."""
    d = increases_by_counter(view.increases(), _POINT_COUNTERS)
    return learned.observation_from_deltas(t, *(d[counter] for counter in _POINT_COUNTERS))


def _prior_method(method: str) -> str | None:
    return None if method == "unknown" else method
