"""Fleet mode, last stage: what one poll leaves to serve and to print.

The immutable FleetState that fleet_metrics and /api/v1/status render, the fleet row per route and
window (token-weighted over the replicas' evaluations), and the JSON lines `specwatch backtest`
writes (a `specwatch replay` line plus the replica's labels, and the fleet rows).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specwatch.engines.series import DEFAULT_ENGINE
from specwatch.fleet.baseline import RouteBaseline
from specwatch.fleet.grouping import ReplicaKey, RolloutKey
from specwatch.verdict import decide
from specwatch.verdict.evaluation import RouteEvaluation, evaluation_record
from specwatch.verdict.grading import Grading


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
    # Live fleet mode: the history replayed at its start (None: none asked, or not done yet).
    history: HistoryRead | None = None
    # prometheus.deployment_labels: the labels of each grading's deployment (exported with it).
    deployment_labels: tuple[str, ...] = ()


def fleet_rows(evaluations: Sequence[tuple[ReplicaKey, RouteEvaluation]]) -> tuple[FleetRow, ...]:
    """One row per route and window over the replicas evaluated this poll."""
    groups: dict[tuple[str, str], list[RouteEvaluation]] = defaultdict(list)
    for _, evaluation in evaluations:
        groups[(evaluation.stats.route, evaluation.stats.window)].append(evaluation)
    rows = []
    for (route, window), items in sorted(groups.items()):
        verdicts: dict[str, int] = dict.fromkeys(decide.VERDICTS, 0)
        accepted = proposed = generated = losing = 0.0
        for e in items:
            if e.verdict is not None:
                verdicts[e.verdict] += 1
            tokens = e.stats.generation_tokens or 0.0
            generated += tokens
            if e.guard_passed and e.stats.accepted_tokens is not None and e.stats.draft_tokens:
                accepted += e.stats.accepted_tokens
                proposed += e.stats.draft_tokens
            speedup = e.value("expected_speedup")
            if speedup is not None and speedup < 1.0:
                losing += tokens
        rows.append(
            FleetRow(
                route,
                window,
                len(items),
                verdicts,
                accepted / proposed if proposed > 0 else None,
                losing / generated if generated > 0 else None,
                generated,
            )
        )
    return tuple(rows)


def replica_record(replica: ReplicaKey | None, evaluation: RouteEvaluation) -> dict[str, object]:
    """A `specwatch replay` line plus the replica's labels."""
    record = evaluation_record(evaluation)
    record["replica"] = dict(replica) if replica is not None else None
    return record


def fleet_record(t: float, row: FleetRow) -> dict[str, object]:
    return {
        "t": t,
        "route": row.route,
        "window": row.window,
        "replica": None,
        "replicas": row.replicas,
        "acceptance_rate": row.acceptance_rate,
        "losing_token_share": row.losing_token_share,
        "generation_tokens": row.generation_tokens,
        "verdicts": dict(row.verdicts),
    }
