"""Fixtures shared by the fleet-mode tests; every test here carries the `fleet` marker
(`-m fleet` runs them alone, `-m "not fleet"` leaves them out; CI runs them with the suite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .promharness import PROMETHEUS, PROMTOOL, serve_scenarios

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.fleet)


REPLICAS = {"sim-a:8000": "alpha-drop", "sim-b:8000": "mixed-routes"}
POLL = 5.0
DURATION = 420.0


@pytest.fixture(scope="session")
def backfilled(tmp_path_factory: pytest.TempPathFactory):
    """A Prometheus serving a TSDB backfilled by promtool from simulated recordings (5 s polls)."""
    if PROMETHEUS is None or PROMTOOL is None:
        pytest.skip("prometheus/promtool not installed")
    replicas = [(scenario, {"instance": instance, "job": "vllm"}) for instance, scenario in REPLICAS.items()]
    served = serve_scenarios(tmp_path_factory.mktemp("backfill"), replicas, poll=POLL, duration=DURATION)
    try:
        yield served.prometheus, {instance: served.recordings[scenario] for instance, scenario in REPLICAS.items()}
    finally:
        served.prometheus.stop()
