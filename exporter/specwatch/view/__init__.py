"""What one poll publishes: the View a source (sidecar/ or fleet/) builds and export/ renders.

A View is immutable and says all a renderer needs: the config it was polled under, the cost model
the verdicts rest on (carried, never rebuilt from the config by a renderer), the scraped targets
and their routes (targets.py), and in fleet mode the fleet section (fleet.py): every replica's
routes, the fleet rows and the query API's health. Both give their routes as route rows
(routes.py, View.route_rows). The collector, the status document, the page
and its history each render the one View; none of them knows which source built it beyond what
the View holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from specwatch.config import Config
from specwatch.costmodel import CostModel
from specwatch.view.fleet import FleetState
from specwatch.view.routes import RouteRow
from specwatch.view.targets import NO_TARGETS, State

__all__ = ["View"]


@dataclass(frozen=True)
class View:
    config: Config  # the config the poll ran under (windows, hold, poll interval, the query API)
    cost_model: CostModel  # the configured cost model the verdicts rest on (learned ones: per route)
    targets: State = NO_TARGETS  # the scraped targets and their routes (none in fleet mode)
    fleet: FleetState | None = None  # fleet mode: the replicas, fleet rows and query API health

    @property
    def t(self) -> float | None:
        """The time of the poll it shows (None before one)."""
        return self.fleet.t if self.fleet is not None else self.targets.t

    def route_rows(self) -> tuple[RouteRow, ...]:
        """The routes a renderer shows, from whichever section this View has."""
        return self.fleet.rows() if self.fleet is not None else self.targets.rows()
