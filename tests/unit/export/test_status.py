"""The /api/v1/status document (export/status.py): one route list for either mode, beside what only
that mode has."""

from __future__ import annotations

import dataclasses

import pytest

from specwatch.export.status import status_document
from specwatch.view.fleet import FleetState, ReplicaRouteState
from specwatch.view.targets import State
from support.views import alpha_drop_state, view_of


@pytest.fixture(scope="module")
def targets() -> State:
    return alpha_drop_state()


def _fleet(state: State, *, up: bool = True) -> FleetState:
    route = state.routes[0]
    replicas = [(("namespace", "a"), ("pod", f"p{i}")) for i in range(2)]
    routes = tuple(
        ReplicaRouteState(key, route.route, route.model_name, route.method, False, route.evaluations)
        for key in replicas
    )
    return FleetState(("namespace", "pod"), state.t, up, state.t, 0.02, 3, 3, {}, 0, 0, routes, (), {route.route: 0.05})


def test_both_modes_list_their_routes_with_the_same_fields(targets):
    sidecar = status_document(view_of(targets))
    fleet = status_document(view_of(fleet=_fleet(targets)))
    assert (sidecar["mode"], fleet["mode"]) == ("sidecar", "fleet")
    assert len(sidecar["routes"]) == 1 and len(fleet["routes"]) == 2
    assert [list(r) for r in fleet["routes"]] == [list(sidecar["routes"][0])] * 2
    target, replica = sidecar["routes"][0], fleet["routes"][0]
    assert target["replica"] is None and target["target"] == "vllm"
    assert replica["replica"] == {"namespace": "a", "pod": "p0"} and replica["target"] == "a/p0"
    # What a replica's series show is given as a target's route gives it; what only the sidecar
    # knows (the route's configured expectation, its own grading) is null.
    assert (replica["schema"], replica["spec_present"]) == (target["schema"], True)
    configured_k = targets.routes[0].evaluations[0].stats.configured_k
    assert configured_k is not None and replica["configured_k"] == configured_k
    assert replica["baseline_itl_p99_seconds"] == 0.05
    assert replica["expects_speculation"] is None and replica["grading"] is None
    assert replica["windows"] == target["windows"]


def test_each_mode_keeps_only_its_own_sections(targets):
    sidecar = status_document(view_of(targets))
    fleet = status_document(view_of(fleet=_fleet(targets)))
    shared = {"version", "mode", "t", "time", "routes", "windows", "speedup_confidence", "assumptions"}
    assert set(sidecar) - shared == {"targets"}
    assert set(fleet) - shared == {"prometheus", "fleet", "rollouts", "history", "cost_models"}
    later = dataclasses.replace(_fleet(targets), t=targets.t + 5)
    assert (sidecar["t"], status_document(view_of(fleet=later))["t"]) == (targets.t, targets.t + 5)


def test_a_failed_query_poll_lists_no_route(targets):
    document = status_document(view_of(fleet=_fleet(targets, up=False)))
    assert document["routes"] == [] and document["prometheus"]["up"] is False
