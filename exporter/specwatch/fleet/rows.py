"""Fleet mode, last stage: the fleet row per route and window (token-weighted over the replicas'
evaluations) for the View's fleet section, and the JSON lines `specwatch backtest` writes (a
`specwatch replay` line plus the replica's labels, and the fleet rows).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from specwatch.verdict import decide
from specwatch.verdict.evaluation import RouteEvaluation, evaluation_record
from specwatch.view.fleet import FleetRow, ReplicaKey


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
