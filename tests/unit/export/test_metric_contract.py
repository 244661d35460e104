"""The metric contract is the code: every name the metric contract (docs/architecture.md, "Metric
contract") promises is in the sidecar's real exposition and documented there, and every metric that
rules/, dashboards/ and so the Helm chart read is either in that exposition or recorded by rules/.
The exposition comes from the collector itself, fed a simulated vLLM, not from a hand-kept list."""

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwatch import sim
from specwatch.config import from_mapping
from specwatch.serve.service import Service
from specwatch.sim.polling import simulated_polls
from support.builders import scenario_raw_config
from support.metric_names import (
    CONTROLLER_GAIN,
    EXPORTED,
    GAUGE_BASIS,
    GRADING,
    READBACK,
    RELOAD,
    STEP_TIME_FIT,
)
from support.rule_files import all_rules, recorded_names, selectors
from support.views import view_of

promql_parser = pytest.importorskip("promql_parser")
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def exposition() -> set[str]:
    """Sample names of the real /metrics after the alpha-drop scenario, with a baseline configured."""
    scenario = sim.load_scenario("alpha-drop")
    raw = scenario_raw_config(scenario)
    route = scenario.model_names[0]
    raw["routes"] = [{"name": route, "match": {"model_name": route}, "baseline_itl_p99_seconds": 0.05}]
    # The speculative config vLLM runs with, so the config-check gauges are exported too.
    raw["draft"]["config"] = {"method": "eagle3", "num_speculative_tokens": scenario.num_speculative_tokens}
    config = from_mapping(raw, environ={})
    # The service's registry: the collector's families plus the service's own (config reloads).
    service = Service(config)
    pipeline = service.poller.pipeline
    for _ in simulated_polls(sim.Simulator(scenario, seed=1), pipeline, interval=5.0, count=79):
        pass
    service.published = service._publish(ready=True)
    service.stop()
    text = service.published.metrics.decode()
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_the_sidecar_exports_every_name_of_the_contract(exposition):
    # Grading and the step-time fit need a change of draft or a learned curve (none in this scenario);
    # the acceptance basis a gauge-only engine (tests/unit/engines/test_load_sequence_replays.py); the
    # read-back's outcome a `readback:` section; the controller's gain an engine that moves K itself
    # (tests/unit/sim/test_controllers.py).
    assert (EXPORTED - GRADING - STEP_TIME_FIT - GAUGE_BASIS - READBACK - CONTROLLER_GAIN) - exposition == set()


#: prometheus_client's own self-metrics (ProcessCollector, PlatformCollector): not the
#: contract's, served after its families so the sidecar's memory can be read against its limit.
SELF_METRICS = ("process_", "python_")


def test_the_sidecar_exports_nothing_outside_the_contract(exposition):
    assert {n for n in exposition - EXPORTED if not n.startswith(SELF_METRICS)} == set()


def test_the_sidecar_exports_its_process_metrics(exposition):
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "python_info"} <= exposition


def _family(name: str) -> str:
    return re.sub(r"_(bucket|sum|count)$", "", name) if name.startswith("specwatch_itl_seconds_") else name


def test_every_exported_name_is_documented_in_the_repo(exposition):
    architecture = (REPO / "docs" / "architecture.md").read_text()
    contract = architecture[architecture.index("## 4. Metric contract") : architecture.index("## 5.")]
    undocumented = {n for n in EXPORTED - RELOAD if f"`{_family(n)}" not in contract}
    assert undocumented == set(), "missing from docs/architecture.md, Metric contract"
    operations = (REPO / "docs" / "kubernetes.md").read_text() + (REPO / "docs" / "runbook.md").read_text()
    assert {n for n in RELOAD if f"`{n}" not in operations} == set()


def _selectors(expr: str) -> set[str]:
    return {sel.name for sel in selectors(expr) if sel.name}


@pytest.fixture(scope="module")
def fleet_exposition() -> set[str]:
    """Sample names fleet mode exports on its own (the query source's health and the fleet rows)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from specwatch.export.collector import SpecwatchCollector
    from specwatch.view.fleet import FleetRow, FleetState

    row = FleetRow("chat", "5m", 2, {"keep": 2}, 0.6, 0.1, 100.0)
    state = FleetState((), 1.0, True, 1.0, 0.01, 3, 3, {}, 0, 0, (), (row,))
    registry = CollectorRegistry()
    registry.register(SpecwatchCollector(lambda: view_of(fleet=state)))
    text = generate_latest(registry).decode()
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


# kube-state-metrics' pod phase: SpecDecodeExporterDown leaves Pending pods out (and joins nothing without it)
KUBE_STATE_METRICS = {"kube_pod_status_phase"}


def test_every_metric_the_rules_read_is_exported_or_recorded(exposition, fleet_exposition):
    # The grading gauges need a change of draft length, the controller's gain an engine that moves K
    # itself (none in these scenarios): known by the contract.
    known = (
        exposition
        | fleet_exposition
        | recorded_names()
        | {"up", "ALERTS"}
        | KUBE_STATE_METRICS
        | GRADING
        | CONTROLLER_GAIN
    )
    used = set()
    for rule in all_rules():
        if rule.get("record", "").startswith(("fleet_route:", "fleet_replica:")):
            continue  # engine-side (rules/specwatch-fleet-recording.yaml): they read the engine's own series
        used |= _selectors(rule["expr"])
        for text in (rule.get("annotations") or {}).values():
            for query in re.findall(r"printf\s+`([^`]*)`", text):
                used |= _selectors(re.sub(r"%[sdvf]", "x", query))
    assert used, "no metric found in rules/"
    assert used - known == set()


def test_every_metric_the_dashboard_reads_is_exported_or_recorded(exposition, fleet_exposition):
    known = exposition | fleet_exposition | recorded_names() | {"ALERTS"}
    used = set()
    for path in sorted((REPO / "dashboards").glob("*.json")):
        text = path.read_text()
        for expr in re.findall(r'"(?:expr|query)":\s*"((?:[^"\\]|\\.)*)"', text):
            expr = json.loads(f'"{expr}"')
            if not expr or expr.startswith("label_values") or ("(" not in expr and "{" not in expr and "_" not in expr):
                continue
            expr = re.sub(r"\$\{?__\w+\}?", "5m", expr)
            expr = re.sub(r"\$\{?(\w+)(:\w+)?\}?", "x", expr)
            used |= _selectors(expr)
    assert used, "no metric found in dashboards/"
    assert used - known == set()
