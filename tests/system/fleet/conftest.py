"""Fixtures shared by the fleet-mode tests; every test here carries the `fleet` marker
(`-m fleet` runs them alone, `-m "not fleet"` leaves them out; CI runs them with the suite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specwatch import config as config_mod

from .promharness import PROMETHEUS, PROMTOOL, serve_scenarios

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.fleet)


REPLICAS = {"sim-a:8000": "alpha-drop", "sim-b:8000": "mixed-routes"}
POLL = 5.0
DURATION = 420.0


def backfilled_config(prometheus: dict[str, object] | None) -> config_mod.Config:
    """What the history of `backfilled` is read with: fleet mode with this prometheus: section,
    sidecar mode (polling targets) with None."""
    # Hardware and model stated (the defaults) and a loose confidence: on assumed ones, or at 0.9 on
    # this 8B model, every verdict is undecided and a comparison would cover no decided one.
    return config_mod.from_mapping(
        {
            "windows": ["1m", "5m"],
            "poll_interval": f"{POLL:g}s",
            "prometheus": prometheus,
            "hardware": {"preset": "h100-sxm"},
            "model": {"preset": "llama-3.1-8b"},
            "decision": {"confidence": 0.6},
        },
        environ={},
    )


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
