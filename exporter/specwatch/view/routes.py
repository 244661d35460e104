"""The route rows of a View: what a renderer needs of one route, whichever section produced it.

The targets section gives one row per route of a target, the fleet section one per replica route
(View.route_rows). The collector renders the per-route and per-window families of either mode from
them with one function; what only one mode has (a target's mirrored counters, the fleet rows) stays
in that mode's section.
"""

from __future__ import annotations

from dataclasses import dataclass

from specwatch.verdict.controller import Controller
from specwatch.verdict.evaluation import RouteEvaluation


@dataclass(frozen=True)
class RouteRow:
    route: str
    target: str  # the target's name, or the replica's (its label values joined by "/")
    # The replica's label values (and its name as `instance` when that is not a replica label),
    # exported after the route's own labels; none for a target's route.
    replica: tuple[str, ...]
    model_name: str
    method: str
    schema: str
    engine: str
    baseline_itl_p99_seconds: float | None
    evaluations: tuple[RouteEvaluation, ...]
    # Whether its windows are served now: not while its target is down or the route is missing
    # from the target's latest good poll (its windows are kept for its return, never served stale).
    served: bool = True
    # The controller of K its engine runs, with the evidence (None before an evaluation).
    controller: Controller | None = None
