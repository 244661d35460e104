"""Fleet mode's learned step-time curve per route, and the measured baseline it rests on.

Learning from spec-on steps alone keeps the prior's split between the target's step and the cost
of speculation (a uniform learned scale cancels out of the speedup ratio), so a wrong prior stays
wrong. Spec-off windows measure the target's own step time T(B) and fix it: the learner's spec-off
bins take precedence, and where they cover the spec-on steps' tokens the spec-on excess measures
the drafting and fixed costs (costmodel/learned.py). Fleet mode has two sources of them:

- canary: replicas of the route that run without speculation. The fleet's config names one
  hardware, model and engine for every replica, so a route (one model) shares one curve: every
  replica of the route, spec on or off, feeds the route's one learner. Automatic: any replica of the
  route whose windows carry no speculative counter; ``prometheus.canary`` (label matchers over the
  replica labels and model_name) restricts it to the replicas it matches, and the spec-off windows
  of the others are then not learned from (another pool, other hardware).
- history: the windows of replicas now running speculation from before it was switched on (or of
  replicas that switched it off). They stay in the learner's bins, bounded, fading with
  ``learning.half_life`` and dropped BASELINE_HALF_LIVES half-lives after the last one.

A canary counts only when it is like-for-like (``like_for_like``): its plain step at its batch must
be consistent with the spec-on replicas' measured steps of the same poll at the nearest batch, as
the prior relates a plain step to a speculative one: not slower per step than a spec-on replica at
the same batch, nor more than CANARY_FACTOR faster or slower than the prior's ratio says (another
pool, other hardware). A canary with no spec-on replica beside it counts: nothing
there contradicts it.

One point per replica per shortest window (non-overlapping spans, as the sidecar's), all of one
poll added together. What each route's verdicts rest on is reported (RouteBaseline): its source
(the prior's: default, preset, profile; or learned) and its baseline (canary, history, none).
Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specwatch import costmodel
from specwatch.config.cost_model import prior_source
from specwatch.costmodel.observation import StepObservation, prior_step_seconds
from specwatch.verdict.bookkeeping import LEARNERS, EvaluationContext, RouteLearning, window_point
from specwatch.view.fleet import ReplicaKey, RouteBaseline
from specwatch.windows.window import WindowView

CANARY, HISTORY, NONE = "canary", "history", "none"
#: How far a canary's step may be from what the spec-on replicas' steps and the prior's ratio say.
CANARY_FACTOR = 2.0
#: Batches this close (ratio) are "the same batch": a plain step must not be slower than the spec one.
SAME_BATCH = 1.25


@dataclass(frozen=True)
class ReplicaWindow:
    """One replica's shortest window in one poll, as the learner may read it."""

    replica: ReplicaKey
    model_name: str
    view: WindowView
    spec: bool  # the window carries speculative counters
    method: str  # the replica's cost class ("auto:unknown" until inferred)


@dataclass
class _Route(RouteLearning):
    until: dict[ReplicaKey, float] = field(default_factory=dict)  # end of each replica's last point
    seen: dict[ReplicaKey, int] = field(default_factory=dict)  # each replica's last poll
    canaries: int = 0


def canary_matches(canary: Mapping[str, str], replica: ReplicaKey, model_name: str) -> bool:
    """Whether a spec-off replica may be the route's canary: always without ``prometheus.canary``,
    else when every one of its labels (replica labels or model_name) has the given value."""
    labels = dict(replica)
    labels["model_name"] = model_name
    return all(labels.get(name) == value for name, value in canary.items())


class FleetLearning:
    """One StepTimeLearner per route, fed by every replica of it (pure state, no I/O), on the
    evaluator's context (its config and cost model)."""

    def __init__(self, context: EvaluationContext) -> None:
        self.context = context
        self._routes: dict[str, _Route] = {}
        self._polls = 0
        # The engine and schema each route's replicas were last read as: which engine prior it uses.
        self.engine_of: dict[str, tuple[str, str | None]] = {}
        self.unlike_canaries = 0  # spec-off replica windows not counted: not like-for-like

    def prior_model(self, route: str) -> costmodel.CostModel:
        """The route's model before learning: the configured one, with its engine's prior."""
        engine = self.engine_of.get(route)
        return self.context.cost_model if engine is None else self.context.route_model(*engine)

    def reconfigure(self, rebuilt: Sequence[str]) -> None:
        """After the context's reconfigure: the same points refitted under a new prior; learning
        switched (auto included) or its settings changed start afresh."""
        if LEARNERS in rebuilt:
            self._routes.clear()
        for name, route in self._routes.items():
            route.carry(rebuilt, self.prior_model(name))

    def observe(self, now: float, windows: Mapping[str, Sequence[ReplicaWindow]]) -> None:
        """One poll: each route's replicas' shortest windows; a replica gives a point when its last
        one ended at least a window ago."""
        self._polls += 1
        config, enabled = self.context.config, self.context.learning_enabled
        canary = config.prometheus.canary if config.prometheus is not None else {}
        width = min(config.windows)
        for name, replicas in windows.items():
            spec_method = next((_class(w.method) for w in replicas if w.spec and _class(w.method) != "unknown"), None)
            route = self._routes.get(name)
            if route is None:
                route = self._routes[name] = _Route()
            if route.follow(spec_method or "unknown", self.prior_model(name), config.learning):
                route.until, route.seen = {}, {}  # another drafter: a new fit
            assert route.learner is not None  # follow gave the route one
            points = []
            canaries = 0
            spec_points = [obs for w in replicas if w.spec and (obs := window_point(w.view, now)) is not None]
            for w in replicas:
                route.seen[w.replica] = self._polls
                if not enabled:
                    continue  # the route is still reported: on the prior
                obs = window_point(w.view, now)
                if not self._counts(w, obs, spec_points, route, canary):
                    continue  # not named as a canary, or another pool or hardware: not this route's baseline
                canaries += not w.spec
                since = route.until.get(w.replica)
                if since is not None and now - since < width - 1e-6:
                    continue
                route.until[w.replica] = now
                if obs is not None:
                    points.append(obs)
            route.canaries = canaries
            if points:
                route.learner.add_together(points)
        self._expire()

    def _counts(
        self,
        w: ReplicaWindow,
        obs: StepObservation | None,
        spec: Sequence[StepObservation],
        route: _Route,
        canary: Mapping[str, str],
    ) -> bool:
        """A spec-on window always; a spec-off one when the config names it a canary (or names
        none) and it is like-for-like (counted when not)."""
        if not w.spec and canary and not canary_matches(canary, w.replica, w.model_name):
            return False
        if w.spec or obs is None or route.learner is None or like_for_like(obs, spec, route.learner.prior):
            return True
        self.unlike_canaries += 1
        return False

    def _expire(self) -> None:
        """Replicas gone route_ttl_polls polls are forgotten; a route with none left goes too."""
        for name in list(self._routes):
            route = self._routes[name]
            for replica in self.context.expired(route.seen.items(), self._polls):
                del route.seen[replica]
                route.until.pop(replica, None)
            if not route.seen:
                del self._routes[name]

    def cost_model_for(self, route: str) -> costmodel.CostModel:
        """The route's cost model now: over its learned curve, else the configured one."""
        state = self._routes.get(route)
        if state is None or state.learner is None or not self.context.learning_enabled:
            return self.prior_model(route)
        return state.model_over(self.prior_model(route), state.learner.curve())

    def baselines(self) -> tuple[RouteBaseline, ...]:
        """Per route: what its verdicts rest on (the prior's source until a curve is learned)."""
        prior = prior_source(self.context.config)
        out = []
        for name, route in sorted(self._routes.items()):
            learner = route.learner
            if learner is None:
                continue  # (follow gives every route one)
            curve = learner.curve()
            measured = learner.baseline_points
            if curve is None or not self.context.learning_enabled:
                source, baseline = prior, NONE
            else:
                source = "learned"
                baseline = (CANARY if route.canaries else HISTORY) if measured > 0 else NONE
            out.append(RouteBaseline(name, source, baseline, route.canaries, learner.points, measured))
        return tuple(out)


def like_for_like(canary: StepObservation, spec: Sequence[StepObservation], prior: costmodel.CostModel) -> bool:
    """Whether a spec-off window's step is consistent with the spec-on replicas' measured steps at
    the nearest batch (true when there is none to compare with)."""
    if not spec or canary.batch <= 0 or canary.step_seconds <= 0:
        return True
    other = min(spec, key=lambda o: abs(math.log(max(o.batch, 1e-9) / canary.batch)))
    if other.step_seconds <= 0 or other.batch <= 0:
        return True
    measured = canary.step_seconds / other.step_seconds
    plain, speculative = prior_step_seconds(prior, canary), prior_step_seconds(prior, other)
    if not (plain > 0 and speculative > 0):
        return True
    expected = plain / speculative
    if max(other.batch, canary.batch) / min(other.batch, canary.batch) <= SAME_BATCH and measured > 1.05:
        return False  # slower per step than speculation at the same batch: not the same hardware
    return 1 / CANARY_FACTOR <= measured / expected <= CANARY_FACTOR


def _class(method: str) -> str:
    """The cost class of a replica's method label ("auto:ngram" -> "ngram")."""
    return method.rsplit(":", maxsplit=1)[-1]
