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

One point per replica per shortest window (non-overlapping spans, as the sidecar's), all of one
poll added together. What each route's verdicts rest on is reported (RouteBaseline): its source
(the prior's: default, preset, profile; or learned) and its baseline (canary, history, none).
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specwatch import costmodel
from specwatch.config import Config
from specwatch.config.cost_model import learning_enabled, prior_source
from specwatch.costmodel import learned
from specwatch.engines.series import Counter
from specwatch.fleet.grouping import ReplicaKey
from specwatch.windows.window import WindowView, increases_by_counter

CANARY, HISTORY, NONE = "canary", "history", "none"

#: What a point reads of a window (fleet mode's queries carry no prefill counter: it counts as 0).
_POINT_COUNTERS = (Counter.ITL_SUM, Counter.ITL_COUNT, Counter.STEPS, Counter.DRAFT_TOKENS, Counter.DRAFTS)


@dataclass(frozen=True)
class RouteBaseline:
    """What one route's verdicts rest on now."""

    route: str
    source: str  # default | preset | profile | learned
    baseline: str  # canary | history | none
    canaries: int  # spec-off replicas of the route in the last poll that feed its curve
    points: float  # forgotten weight of the windows behind the curve (0: not learning)
    baseline_points: float  # ... of its spec-off windows


@dataclass(frozen=True)
class ReplicaWindow:
    """One replica's shortest window in one poll, as the learner may read it."""

    replica: ReplicaKey
    model_name: str
    view: WindowView
    spec: bool  # the window carries speculative counters
    method: str  # the replica's cost class ("auto:unknown" until inferred)


@dataclass
class _Route:
    learner: learned.StepTimeLearner
    method: str
    until: dict[ReplicaKey, float] = field(default_factory=dict)  # end of each replica's last point
    seen: dict[ReplicaKey, int] = field(default_factory=dict)  # each replica's last poll
    canaries: int = 0
    model: costmodel.CostModel | None = None  # over the current curve, one object while it holds


def canary_matches(canary: Mapping[str, str], replica: ReplicaKey, model_name: str) -> bool:
    """Whether a spec-off replica may be the route's canary: always without ``prometheus.canary``,
    else when every one of its labels (replica labels or model_name) has the given value."""
    labels = dict(replica)
    labels["model_name"] = model_name
    return all(labels.get(name) == value for name, value in canary.items())


class FleetLearning:
    """One StepTimeLearner per route, fed by every replica of it (pure state, no I/O)."""

    def __init__(self, config: Config, cost_model: costmodel.CostModel) -> None:
        self.config = config
        self.cost_model = cost_model
        self.enabled = learning_enabled(config)
        self.canary: Mapping[str, str] = config.prometheus.canary if config.prometheus is not None else {}
        self._routes: dict[str, _Route] = {}
        self._polls = 0

    def reconfigure(self, config: Config, cost_model: costmodel.CostModel) -> None:
        """A reloaded config: the same points refitted under a new prior; learning switched or its
        settings changed start afresh."""
        old, self.config = self.config, config
        self.canary = config.prometheus.canary if config.prometheus is not None else {}
        if config.learning != old.learning or learning_enabled(config) != self.enabled:
            self._routes.clear()
        elif cost_model is not self.cost_model:
            for route in self._routes.values():
                route.learner = route.learner.with_prior(cost_model.with_method(_prior_method(route.method)))
                route.model = None
        self.enabled = learning_enabled(config)
        self.cost_model = cost_model

    def observe(self, now: float, windows: Mapping[str, Sequence[ReplicaWindow]]) -> None:
        """One poll: each route's replicas' shortest windows; a replica gives a point when its last
        one ended at least a window ago."""
        self._polls += 1
        settings = self.config.learning
        width = min(self.config.windows)
        for name, replicas in windows.items():
            spec_method = next((_class(w.method) for w in replicas if w.spec and _class(w.method) != "unknown"), None)
            route = self._routes.get(name)
            if route is None or (spec_method is not None and spec_method != route.method and route.method != "unknown"):
                prior = self.cost_model.with_method(spec_method)
                learner = learned.StepTimeLearner(
                    prior, min_points=settings.min_points, half_life_seconds=settings.half_life
                )
                route = self._routes[name] = _Route(learner, spec_method or "unknown")
            elif spec_method is not None and route.method == "unknown":
                # The method class became known: the points so far are the same drafter's.
                route.learner = route.learner.with_prior(self.cost_model.with_method(spec_method))
                route.method, route.model = spec_method, None
            points = []
            canaries = 0
            for w in replicas:
                route.seen[w.replica] = self._polls
                if not self.enabled:
                    continue  # the route is still reported: on the prior
                if not w.spec and self.canary and not canary_matches(self.canary, w.replica, w.model_name):
                    continue  # a spec-off replica the config does not name as a canary
                canaries += not w.spec
                since = route.until.get(w.replica)
                if since is not None and now - since < width - 1e-6:
                    continue
                d = increases_by_counter(w.view.increases(), _POINT_COUNTERS)
                obs = learned.observation_from_deltas(
                    now,
                    d[Counter.ITL_SUM],
                    d[Counter.ITL_COUNT],
                    d[Counter.STEPS],
                    d[Counter.DRAFT_TOKENS],
                    d[Counter.DRAFTS],
                )
                route.until[w.replica] = now
                if obs is not None:
                    points.append(obs)
            route.canaries = canaries
            if points:
                route.learner.add_together(points)
        self._expire()

    def _expire(self) -> None:
        """Replicas gone route_ttl_polls polls are forgotten; a route with none left goes too."""
        ttl = self.config.route_ttl_polls
        for name in list(self._routes):
            route = self._routes[name]
            for replica in [r for r, poll in route.seen.items() if self._polls - poll >= ttl]:
                del route.seen[replica]
                route.until.pop(replica, None)
            if not route.seen:
                del self._routes[name]

    def cost_model_for(self, route: str) -> costmodel.CostModel:
        """The route's cost model now: over its learned curve, else the configured one."""
        state = self._routes.get(route)
        curve = state.learner.curve() if state is not None and self.enabled else None
        if state is None or curve is None:
            return self.cost_model
        if state.model is None or state.model.profile is not curve:
            state.model = learned.learned_cost_model(self.cost_model, curve)
        return state.model

    def baselines(self) -> tuple[RouteBaseline, ...]:
        """Per route: what its verdicts rest on (the prior's source until a curve is learned)."""
        prior = prior_source(self.config)
        out = []
        for name, route in sorted(self._routes.items()):
            learner = route.learner
            curve = learner.curve()
            measured = learner.baseline_points
            if curve is None or not self.enabled:
                source, baseline = prior, NONE
            else:
                source = "learned"
                baseline = (CANARY if route.canaries else HISTORY) if measured > 0 else NONE
            out.append(RouteBaseline(name, source, baseline, route.canaries, learner.points, measured))
        return tuple(out)


def _class(method: str) -> str:
    """The cost class of a replica's method label ("auto:ngram" -> "ngram")."""
    return method.rsplit(":", maxsplit=1)[-1]


def _prior_method(method: str) -> str | None:
    return None if method == "unknown" else method
