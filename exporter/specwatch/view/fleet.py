"""The fleet section of a View: what one fleet poll shows of every replica and of the query API.

Built by fleet/evaluator.py (FleetEvaluator.state); rendered by export/ without knowing the
evaluator. The replica and rollout keys and their names live here, so a renderer can name a replica
as the evaluator keys it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from specwatch.engines.series import DEFAULT_ENGINE
from specwatch.verdict.controller import Controller
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.verdict.grading import Grading
from specwatch.view.routes import RouteRow

ReplicaKey = tuple[tuple[str, str], ...]  # the replica labels, in configured order
DeploymentKey = tuple[tuple[str, str], ...]  # prometheus.deployment_labels' values, in configured order
RolloutKey = tuple[str, DeploymentKey]  # (route, deployment): what one rollout grading is kept per

#: Why a query failed: each is counted (specwatch_prometheus_query_errors_total{reason}).
QUERY_ERROR_REASONS = ("timeout", "connect", "tls", "http_4xx", "http_5xx", "too_large", "warnings", "limit", "invalid")


def replica_name(replica: ReplicaKey) -> str:
    return "/".join(value for _, value in replica) or "-"


def rollout_name(key: RolloutKey) -> str:
    """A grading's name in /api/v1/status: the route, then its deployment as a series selector
    (chat{namespace="team-a"}); the route alone when no deployment labels are configured."""
    route, deployment = key
    if not deployment:
        return route
    return route + "{" + ",".join(f"{name}={json.dumps(value)}" for name, value in deployment) + "}"


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
class FleetRow:
    """One route across the fleet, for one window."""

    route: str
    window: str
    replicas: int
    verdicts: Mapping[str, int]
    acceptance_rate: float | None  # token-weighted: sum accepted / sum draft tokens
    losing_token_share: float | None  # decode tokens served where expected speedup < 1
    generation_tokens: float


@dataclass(frozen=True)
class HistoryRead:
    """What live fleet mode replayed of the history before it started (fleet/history.py)."""

    lookback: float  # seconds asked for (prometheus.history_lookback)
    start: float | None  # first and last step replayed (None: none)
    end: float | None
    steps: int  # steps evaluated, learning only
    queries: int  # range queries sent
    seconds: float  # wall time the read took
    error: str | None = None  # the reason it stopped early or failed (a query error reason), else None


@dataclass(frozen=True)
class ReplicaRouteState:
    replica: ReplicaKey
    route: str
    model_name: str
    method: str
    stale: bool
    evaluations: tuple[RouteEvaluation, ...]
    # The controller of K the replica's engine runs, with the evidence (None before an evaluation).
    controller: Controller | None = None

    @property
    def engine(self) -> str:
        """The serving engine its series came from."""
        return self.evaluations[0].stats.engine if self.evaluations else DEFAULT_ENGINE


@dataclass(frozen=True)
class FleetState:
    replica_labels: tuple[str, ...]
    t: float | None
    up: bool | None
    last_success: float | None
    query_duration: float | None
    queries: int
    queries_per_poll: int
    errors: Mapping[str, int]
    stale_replicas: int
    stale_evaluations: int
    routes: tuple[ReplicaRouteState, ...]
    fleet: tuple[FleetRow, ...]
    # Configured spec-off ITL P99 baselines by route name (exported per replica, as the sidecar does).
    baselines: Mapping[str, float] = field(default_factory=dict)
    # Series in the last successful poll's window answers (None before one): 0 means the selector
    # matched nothing (logged once as prometheus_selector_matches_nothing).
    series: int | None = None
    # Per (route, deployment): the latest rollout graded across replicas (old pods' windows vs new
    # pods'); the deployment is () unless deployment_labels are configured.
    gradings: Mapping[RolloutKey, Grading] = field(default_factory=dict)
    # Per route: what its verdicts rest on (the learned curve's source and measured baseline).
    cost_models: tuple[RouteBaseline, ...] = ()
    # Live fleet mode: the history replayed at its start (None: none asked, or not done yet), and
    # the reads that failed, by reason, over the process's evaluators (None: not live).
    history: HistoryRead | None = None
    history_errors: Mapping[str, int] | None = None
    # prometheus.deployment_labels: the labels of each grading's deployment (exported with it).
    deployment_labels: tuple[str, ...] = ()

    def rows(self) -> tuple[RouteRow, ...]:
        """Every replica route with windows, none from a failed poll or for a stale replica."""
        if not self.up:
            return ()
        with_instance = "instance" not in self.replica_labels
        rows = []
        for r in self.routes:
            if r.stale or not r.evaluations:
                continue
            target = replica_name(r.replica)
            values = (*(value for _, value in r.replica), *([target] if with_instance else []))
            stats = r.evaluations[0].stats
            baseline = self.baselines.get(r.route)
            rows.append(
                RouteRow(
                    r.route,
                    target,
                    values,
                    r.model_name,
                    r.method,
                    stats.schema,
                    stats.engine,
                    baseline,
                    r.evaluations,
                    controller=r.controller,
                    replica_labels=r.replica,
                    spec_present=stats.spec_present,
                    configured_k=stats.configured_k,
                )
            )
        return tuple(rows)
