"""The route rows of a View: what a renderer needs of one route, whichever section produced it.

The targets section gives one row per route of a target, the fleet section one per replica route
(View.route_rows). The collector, the status document's route list and the page's route sections
render either mode from them with one function each; what only one mode has (a target's mirrored
counters, the fleet rows, the query API's health) stays in that mode's section. A fact one mode
does not know is None in its rows (a replica has no configured route grading of its own: fleet mode
grades rollouts across replicas).
"""

from __future__ import annotations

from dataclasses import dataclass

from specwatch.verdict.controller import Controller
from specwatch.verdict.evaluation import RouteEvaluation
from specwatch.verdict.grading import Grading


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
    # The replica's labels, names with values, in configured order; None for a target's route.
    replica_labels: tuple[tuple[str, str], ...] | None = None
    # Whether the route was in its target's latest good poll (a replica row always is).
    current: bool = True
    spec_present: bool | None = None  # the engine exports speculation's counters
    configured_k: int | None = None  # the draft length K its series show
    expects_speculation: bool | None = None  # the route is configured to speculate (sidecar)
    grading: Grading | None = None  # the latest change of K or method, graded (sidecar)
