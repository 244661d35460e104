"""The route rows of a View: one per target route or fresh replica route, whichever section has them."""

from __future__ import annotations

import dataclasses

import pytest

from specwatch.view.fleet import FleetState, ReplicaRouteState
from specwatch.view.targets import State
from support.views import alpha_drop_state, view_of


@pytest.fixture(scope="module")
def targets() -> State:
    return alpha_drop_state()


def _fleet(state: State, *, up: bool = True, replica_labels: tuple[str, ...] = ("namespace", "pod")) -> FleetState:
    route = state.routes[0]

    def replica(pod: str, stale: bool = False, evaluated: bool = True) -> ReplicaRouteState:
        evaluations = route.evaluations if evaluated else ()
        key = (("namespace", "a"), ("pod", pod))
        return ReplicaRouteState(key, route.route, route.model_name, route.method, stale, evaluations)

    routes = (replica("p0"), replica("p1", stale=True), replica("p2", evaluated=False))
    return FleetState(replica_labels, state.t, up, state.t, 0.02, 3, 3, {}, 1, 0, routes, (), {route.route: 0.05})


def test_each_target_route_is_a_row_served_only_while_its_target_is_up(targets):
    assert [r.served for r in targets.rows()] == [True] * len(targets.routes)
    down = dataclasses.replace(targets, targets=tuple(dataclasses.replace(t, up=False) for t in targets.targets))
    rows = down.rows()
    assert [(r.route, r.target, r.served) for r in rows] == [(r.route, r.target, False) for r in targets.routes]
    assert all(r.replica == () and r.evaluations for r in rows)


def test_a_target_route_missing_from_the_latest_poll_is_not_served(targets):
    gone = dataclasses.replace(targets, routes=(dataclasses.replace(targets.routes[0], current=False),))
    assert [r.served for r in gone.rows()] == [False]


def test_fleet_rows_are_the_fresh_evaluated_replica_routes_named_by_their_replica(targets):
    rows = _fleet(targets).rows()
    assert [(r.target, r.replica) for r in rows] == [("a/p0", ("a", "p0", "a/p0"))]
    assert rows[0].baseline_itl_p99_seconds == 0.05 and rows[0].engine == rows[0].evaluations[0].stats.engine


def test_a_replica_labelled_instance_gets_no_second_instance(targets):
    rows = _fleet(targets, replica_labels=("namespace", "instance")).rows()
    assert rows[0].replica == ("a", "p0")


def test_a_failed_query_poll_has_no_rows(targets):
    assert _fleet(targets, up=False).rows() == ()
    assert view_of(targets).route_rows() == targets.rows()
