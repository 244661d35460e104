"""What the sidecar's Pipeline and fleet mode's FleetEvaluator both keep between polls.

- EvaluationContext: what an evaluator derives from its config (the cost model, the stated
  schedule, the assessment memo), with the one `reconfigure` that derives it again on a reload and
  says what was rebuilt; the expiry after `route_ttl_polls` polls unseen.
- RouteRecord: what evaluate_route reads and writes for one route (the sidecar's) or one
  replica's route (fleet mode's): its cost class, verdicts and advice, and its last evaluations.
- RouteLearning: one step-time learner and the rules both modes apply to it: the prior follows the
  route's cost class, the points are refitted under a new prior on a reload, and the cost model over
  the learned curve stays one object while the curve holds (the memos key on it).

Each evaluator keeps only its own on top: the sidecar its targets, scrapes and windows (a learner
per route); fleet mode its Prometheus answers, replicas and freshness (a learner per route fed by
all its replicas). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from specwatch import costmodel
from specwatch.config import Config, LearningConfig
from specwatch.config.cost_model import cost_model_from_config, learning_enabled
from specwatch.costmodel import learned
from specwatch.engines.vllm_schedule import schedule_from_config
from specwatch.verdict.decide import Assessment, VerdictState
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.verdict.memo import AssessmentCache

__all__ = ["COST_MODEL", "LEARNERS", "EvaluationContext", "RouteLearning", "RouteRecord"]

#: What a reconfigure may report as rebuilt.
COST_MODEL, LEARNERS = "cost_model", "learners"

_K = TypeVar("_K")


class EvaluationContext:
    """The config and what is derived from it, shared by every route an evaluator evaluates."""

    def __init__(self, config: Config, cost_model: costmodel.CostModel | None = None) -> None:
        self.config = config
        self.cost_model = cost_model if cost_model is not None else cost_model_from_config(config)
        self._derive(config)

    def _derive(self, config: Config) -> None:
        """What follows from the config alone, whether or not its cost inputs changed."""
        self.schedule = schedule_from_config(config.draft.config)  # validated when the config loaded
        self.assessments = AssessmentCache()  # an unchanged window is not assessed twice
        # learning.enabled, auto meaning: when the verdict would rest on defaults (no profile).
        self.learning_enabled = learning_enabled(config)

    def reconfigure(self, config: Config) -> list[str]:
        """Take a reloaded config: the schedule and the memo are derived again, the cost model only
        when its inputs changed ("cost_model"); a change of `learning` means fresh learners
        ("learners"). Returns what was rebuilt, for the evaluator to carry its learners over."""
        old, rebuilt = self.config, []
        self.config = config
        self._derive(config)
        if config.cost_inputs() != old.cost_inputs():
            self.cost_model = cost_model_from_config(config)
            rebuilt.append(COST_MODEL)
        if config.learning != old.learning:
            rebuilt.append(LEARNERS)
        return rebuilt

    def expired(self, seen: Iterable[tuple[_K, int]], poll: int) -> list[_K]:
        """Of (key, poll last seen in): those unseen for route_ttl_polls polls at `poll`."""
        ttl = self.config.route_ttl_polls
        return [key for key, last in seen if poll - last >= ttl]


@dataclass
class RouteRecord:
    """What one route keeps between evaluations (evaluation.RouteMemory, and its output)."""

    method: str = "auto:unknown"
    verdicts: dict[str, VerdictState] = field(default_factory=dict)
    advice: dict[str, Assessment] = field(default_factory=dict)  # per window: behind the verdict
    evaluations: tuple[RouteEvaluation, ...] = ()
    seen_poll: int = 0  # the last poll that carried it (EvaluationContext.expired)


@dataclass
class RouteLearning:
    """A route's step-time learner (None: not learning yet), the cost class its prior was built
    for ("unknown" until inferred), and the cost model over its current curve."""

    learner: learned.StepTimeLearner | None = None
    learner_method: str = ""
    learned_model: costmodel.CostModel | None = None

    def follow(self, method: str, cost_model: costmodel.CostModel, settings: LearningConfig) -> bool:
        """Give the learner the prior of the route's cost class `method` ("unknown": not known).
        Once inferred, the points taken before (the same drafter, class not yet known) are refitted
        under its prior; a change of class (another drafter) starts a new fit. True when a new
        learner was started."""
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
        """After EvaluationContext.reconfigure: fresh learners when `learning` changed (False:
        this one is gone), else the same points refitted under the new cost model's prior."""
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


def _prior_method(method: str) -> str | None:
    return None if method == "unknown" else method
