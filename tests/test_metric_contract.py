"""The metric contract is the code: every name the metric contract (docs/architecture.md, "Metric
contract") promises is in the sidecar's real exposition and documented there, and every metric that
rules/, dashboards/ and so the Helm chart read is either in that exposition or recorded by rules/.
The exposition comes from the collector itself, fed a simulated vLLM, not from a hand-kept list."""

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from specwatch import sim
from specwatch.config import from_mapping
from specwatch.demo import sidecar_config_for
from specwatch.service import Service

promql_parser = pytest.importorskip("promql_parser")
REPO = Path(__file__).resolve().parents[1]

# The tables of docs/architecture.md "Metric contract" (counter restarts are
# specwatch_target_restarts_total: promtool check metrics rejects a type word such as "counter" in a name).
CONTRACT = {
    "specwatch_drafts_total",
    "specwatch_draft_tokens_total",
    "specwatch_accepted_tokens_total",
    "specwatch_accepted_tokens_by_position_total",
    "specwatch_generation_tokens_total",
    "specwatch_itl_seconds_bucket",
    "specwatch_itl_seconds_sum",
    "specwatch_itl_seconds_count",
    "specwatch_acceptance_rate",
    "specwatch_mean_acceptance_length",
    "specwatch_draft_length",
    "specwatch_position_acceptance_rate",
    "specwatch_batch_size",
    "specwatch_itl_p50_seconds",
    "specwatch_itl_p99_seconds",
    "specwatch_itl_per_token_mean_seconds",
    "specwatch_breakeven_acceptance_rate",
    "specwatch_acceptance_margin",
    "specwatch_expected_speedup",
    "specwatch_recommended_draft_length",
    "specwatch_max_speculative_batch_size",
    "specwatch_window_drafts",
    "specwatch_verdict",
    "specwatch_target_up",
    "specwatch_scrape_duration_seconds",
    "specwatch_scrape_errors_total",
    "specwatch_target_restarts_total",
    "specwatch_last_scrape_success_timestamp_seconds",
    "specwatch_build_info",
    "specwatch_route_info",
}
# Also documented there: the alerts' routing and annotations.
ALERT_METADATA = {
    "specwatch_recommended_config_info",
    "specwatch_route_expects_speculation",
    "specwatch_baseline_itl_p99_seconds",
}
# The speculation-cannot-pay flag beside the capped break-even, the draft.config check and the
# before/after grading of applied advice.
ADVICE = {
    "specwatch_speculation_cannot_pay",
    "specwatch_speculative_config_mismatch",
    "specwatch_configured_draft_length",
}
# Exported only once a change of draft length or method was seen (none in this scenario).
GRADING = {"specwatch_advice_predicted_gain_ratio", "specwatch_advice_measured_gain_ratio"}
# Config reloads, under the names Prometheus uses for its own (documented in docs/kubernetes.md and the
# SpecwatchConfigReloadFailed entry of docs/runbook.md).
RELOAD = {"specwatch_config_last_reload_successful", "specwatch_config_last_reload_success_timestamp_seconds"}
# What the verdict rests on and how well the learned step-time curve fits (docs/costmodel.md).
LEARNING = {
    "specwatch_cost_model_info",
    "specwatch_step_time_fit_points",
    "specwatch_step_time_fit_residual_ratio",
    "specwatch_step_time_predicted_seconds",
    "specwatch_step_time_observed_seconds",
}


@pytest.fixture(scope="module")
def exposition() -> set[str]:
    """Sample names of the real /metrics after the alpha-drop scenario, with a baseline configured."""
    scenario = sim.load_scenario("alpha-drop")
    raw = sidecar_config_for(
        scenario, target_url="http://127.0.0.1:1/metrics", listen="127.0.0.1:0", poll_interval=5.0, windows=("1m", "5m")
    )
    route = scenario.model_names[0]
    raw["routes"] = [{"name": route, "match": {"model_name": route}, "baseline_itl_p99_seconds": 0.05}]
    # The speculative config vLLM runs with, so the config-check gauges are exported too.
    raw["draft"]["config"] = {"method": "eagle3", "num_speculative_tokens": scenario.num_speculative_tokens}
    config = from_mapping(raw, environ={})
    # The service's registry: the collector's families plus the service's own (config reloads).
    service = Service(config)
    pipeline = service.pipeline
    simulator = sim.Simulator(scenario, seed=1)
    for i in range(1, 80):
        simulator.advance_to(5.0 * i)
        pipeline.ingest("vllm", 5.0 * i, simulator.render(), duration=0.01)
        pipeline.evaluate(5.0 * i)
    service.published = service._publish(ready=True)
    service.stop()
    text = service.published.metrics.decode()
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_the_sidecar_exports_every_name_of_the_contract(exposition):
    assert (CONTRACT | ALERT_METADATA | ADVICE | RELOAD | {"specwatch_cost_model_info"}) - exposition == set()


def test_the_sidecar_exports_nothing_outside_the_contract(exposition):
    assert exposition - CONTRACT - ALERT_METADATA - ADVICE - GRADING - LEARNING - RELOAD == set()


def _family(name: str) -> str:
    return re.sub(r"_(bucket|sum|count)$", "", name) if name.startswith("specwatch_itl_seconds_") else name


def test_every_exported_name_is_documented_in_the_repo(exposition):
    architecture = (REPO / "docs" / "architecture.md").read_text()
    contract = architecture[architecture.index("## 4. Metric contract") : architecture.index("## 5.")]
    undocumented = {
        n for n in CONTRACT | ALERT_METADATA | ADVICE | GRADING | LEARNING if f"`{_family(n)}" not in contract
    }
    assert undocumented == set(), "missing from docs/architecture.md, Metric contract"
    operations = (REPO / "docs" / "kubernetes.md").read_text() + (REPO / "docs" / "runbook.md").read_text()
    assert {n for n in RELOAD if f"`{n}" not in operations} == set()


def _selectors(expr: str) -> set[str]:
    names = set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector) and node.name:
            names.add(node.name)
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def _rules():
    for path in sorted((REPO / "rules").glob("*.yaml")):
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            yield from group.get("rules", [])


def _recorded() -> set[str]:
    return {r["record"] for r in _rules() if "record" in r}


def test_every_metric_the_rules_read_is_exported_or_recorded(exposition):
    known = exposition | _recorded() | {"up", "ALERTS"}
    used = set()
    for rule in _rules():
        used |= _selectors(rule["expr"])
        for text in (rule.get("annotations") or {}).values():
            for query in re.findall(r"printf\s+`([^`]*)`", text):
                used |= _selectors(re.sub(r"%[sdvf]", "x", query))
    assert used, "no metric found in rules/"
    assert used - known == set()


def test_every_metric_the_dashboard_reads_is_exported_or_recorded(exposition):
    known = exposition | _recorded() | {"ALERTS"}
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
