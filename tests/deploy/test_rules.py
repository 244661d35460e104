"""rules/: promtool check + unit tests, the metric contract, conventions, and that the suite can fail.

- `promtool check rules` (with --lint=all) accepts every rule file; `promtool test rules` passes for
  every per-group test file, run from another directory (rule_files are relative to the test file).
- Contract: every metric a rule or an annotation template query reads is exported by the sidecar
  (the metric contract, tests/test_metric_contract.py), recorded by a rule, or Prometheus's `up`;
  every derived `{route,window}` gauge is read with `window="5m"` pinned.
- Conventions the chart and users rely on: the alert names in their groups, one `for:` each,
  severity/summary/description/runbook_url, runbook sections that exist.
- Mutation tests: plausible mistakes in the rules make `promtool test rules` fail, so the promtool
  cases are not vacuous.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support.metric_names import EXPORTED, MIRRORED, WINDOW_DERIVED
from support.rule_files import RULES_DIR, all_rules, recorded_names, rule_files, rule_groups, selectors

promql_parser = pytest.importorskip("promql_parser")

ROOT = Path(__file__).resolve().parents[2]
TESTS = RULES_DIR / "tests"
RUNBOOK = ROOT / "docs" / "runbook.md"
RUNBOOK_URL = "https://github.com/specwatch/specwatch/blob/main/docs/runbook.md#"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")

# What rules may read: what the sidecar exports (tests/support/metric_names.py) and Prometheus's own `up`.
PROMETHEUS_OWN = {"up"}
# Fleet mode's own health (specwatch/export/collector.py, docs/fleet.md) and kube-state-metrics'
# pod phase (SpecDecodeExporterDown leaves Pending pods out; without kube-state-metrics it joins nothing).
FLEET_HEALTH = {
    "specwatch_prometheus_up",
    "specwatch_prometheus_last_success_timestamp_seconds",
    "specwatch_prometheus_query_errors_total",
    "specwatch_stale_replicas",
}
KUBE_STATE_METRICS = {"kube_pod_status_phase"}
CONTRACT = EXPORTED | PROMETHEUS_OWN | FLEET_HEALTH | KUBE_STATE_METRICS
# The label every aggregation and join keeps (kubernetes-mixin's clusterLabel; the chart's
# prometheusRule.clusterLabel renames it and prometheusRule.additionalAggregationLabels extends it).
CLUSTER = "cluster"
DASHBOARD_URL = "https://grafana.example.com/d/specwatch/specwatch?orgId=1"
# Shared causes (one ConfigMap, one --speculative-config): one alert per job (and route), not per pod.
AGGREGATED = {"SpecDecodeMetricsMissing", "SpecDecodeConfigMismatch", "SpecwatchConfigReloadFailed"}

ALERTS = {
    "spec-decode": {
        "SpecDecodeFleetBelowBreakeven",
        "SpecDecodeBelowBreakeven",
        "SpecDecodeProbablyLosing",
        "SpecDecodeShorterDraftRecommended",
        "SpecDecodeITLP99Regression",
        "SpecDecodeAppliedAdviceSlowedDecode",
        "SpecDecodeMetricsMissing",
        "SpecDecodeSpeculationStopped",
        "SpecDecodeControllerLosing",
    },
    "specwatch-health": {"SpecDecodeTargetDown", "SpecDecodeExporterDown", "SpecwatchConfigReloadFailed"},
    "specwatch-config-check": {"SpecDecodeConfigMismatch"},
    "specwatch-fleet": {"SpecwatchPrometheusDown", "SpecwatchPrometheusQueryErrors", "SpecwatchStaleReplicas"},
    "specwatch-fleet-shards": {"SpecwatchFleetShardDown"},
    "specwatch-fleet-replicas": {
        "SpecwatchReplicaDraftLengthDiffers",
        "SpecwatchReplicaBelowBreakeven",
        "SpecwatchReplicaStale",
    },
}
# Engine-side recording rules (rules/specwatch-fleet-recording.yaml, written by fleet/recorded.py):
# they aggregate the engine's own series for fleet mode, so the contract and naming of specwatch's
# mirrored-counter rules do not apply (tests/unit/fleet/test_recorded.py checks them).
ENGINE_SIDE = ("fleet_route:", "fleet_replica:")
# Recording rules in the alerts file: replica counts per route for the fleet alert. They count the
# per-replica margin gauge (window pinned), which is the only place a verdict per replica exists.
REPLICA_COUNTS = {
    "namespace_route:specwatch_replicas_below_breakeven:count",
    "namespace_route:specwatch_replicas_assessed:count",
}
# alerts whose severity is decided at each evaluation (warning while probable, critical once clear)
TEMPLATED_SEVERITY = {
    "SpecDecodeControllerLosing": {"{{ if lt $value 1.0 }}critical{{ else }}warning{{ end }}"},
}
# alerts about spec-decode performance: their description carries the live numbers + recommendation
PERFORMANCE_ALERTS = {"SpecDecodeBelowBreakeven", "SpecDecodeShorterDraftRecommended", "SpecDecodeITLP99Regression"}
# alerts that warn while the verdict is still undecided (the speedup's interval reaches 1): they quote the
# probability and the interval and name the measurement that would decide (the action="measure" series,
# the status JSON's measurement), never a config to apply; silent where the verdict says disable/spec_off
MEASURE_ALERTS = {"SpecDecodeProbablyLosing"}


def alerts() -> dict[str, dict]:
    return {r["alert"]: r for r in all_rules() if "alert" in r}


def template_queries(text: str) -> list[str]:
    """PromQL of the template `query` calls: printf `…` with every %s replaced by a label value."""
    return [q.replace("%s", "x") for q in re.findall(r"printf `([^`]*)`[^}]*\|\s*query", text)]


def every_expression() -> list[tuple[str, str]]:
    """(where, PromQL) for every rule expression and every annotation template query."""
    out = []
    for rule in all_rules():
        name = rule.get("alert") or rule.get("record")
        out.append((f"{name}.expr", rule["expr"]))
        for key, text in (rule.get("annotations") or {}).items():
            out += [(f"{name}.annotations.{key}", q) for q in template_queries(text)]
    return out


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


# ---- promtool -------------------------------------------------------------------------------------


@needs_promtool
def test_promtool_check_rules_accepts_every_rule_file_with_all_lints_fatal():
    result = promtool("check", "rules", "--lint=all", "--lint-fatal", *map(str, rule_files()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(rule_files())


@needs_promtool
def test_promtool_unit_tests_pass_for_every_group_from_any_working_directory(tmp_path):
    test_files = sorted(TESTS.glob("*.yaml"))
    result = promtool("test", "rules", *map(str, test_files), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(test_files), result.stdout


def test_each_rule_group_has_its_own_promtool_test_file_loading_its_rule_file_relatively():
    for path, group in rule_groups():
        test_file = TESTS / f"{group['name']}.yaml"
        assert test_file.exists(), f"group {group['name']} of {path.name} has no {test_file.relative_to(ROOT)}"
        spec = yaml.safe_load(test_file.read_text())
        assert spec["rule_files"] == [f"../{path.name}"], spec["rule_files"]
        names = [t.get("name") for t in spec["tests"]]
        assert all(names) and len(set(names)) == len(names), "every test case needs a unique name"
        tested = {case["alertname"] for t in spec["tests"] for case in t.get("alert_rule_test", [])}
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["alert"] in tested, f"{rule['alert']} has no case in {test_file.name}"


def test_every_alert_has_a_firing_case_with_annotations_asserted_in_full_and_a_silent_case():
    cases: dict[str, list[dict]] = {}
    for test_file in TESTS.glob("*.yaml"):
        for t in yaml.safe_load(test_file.read_text())["tests"]:
            for case in t.get("alert_rule_test", []):
                cases.setdefault(case["alertname"], []).append(case)
    for name, rule in alerts().items():
        firing = [a for c in cases.get(name, []) for a in c.get("exp_alerts") or []]
        assert firing, f"{name}: no case where it fires"
        for alert in firing:
            assert set(alert["exp_annotations"]) == set(rule["annotations"]), (
                f"{name}: annotations not asserted in full"
            )
        assert any(not c.get("exp_alerts") for c in cases[name]), f"{name}: no case where it stays silent"


# ---- contract -------------------------------------------------------------------------------------


def test_every_metric_read_by_rules_and_annotations_is_exported_or_recorded():
    allowed = CONTRACT | recorded_names()
    unknown = {}
    for where, expr in every_expression():
        if where.startswith(ENGINE_SIDE):
            continue
        for sel in selectors(expr):
            if sel.name not in allowed:
                unknown.setdefault(sel.name, []).append(where)
    assert not unknown, f"metrics neither in the contract nor recorded: {unknown}"


def test_derived_gauges_are_always_read_with_window_5m_pinned():
    loose = []
    for where, expr in every_expression():
        for sel in selectors(expr):
            if sel.name in WINDOW_DERIVED:
                pins = [(m.name, m.op, m.value) for m in sel.matchers.matchers if m.name == "window"]
                if pins != [("window", promql_parser.MatchOp.Equal, "5m")]:
                    loose.append((where, sel.name, pins))
    assert not loose, loose


def test_recording_rules_are_built_from_mirrored_counters_never_from_ratio_gauges():
    for rule in all_rules():
        if "record" not in rule or rule["record"] in REPLICA_COUNTS or rule["record"].startswith(ENGINE_SIDE):
            continue
        level, metric, ops = rule["record"].split(":")
        assert level and metric.startswith("specwatch_") and ops, rule["record"]
        for sel in selectors(rule["expr"]):
            assert sel.name in MIRRORED or sel.name in recorded_names(), (rule["record"], sel.name)
        assert not re.search(r"\bavg\b", rule["expr"]), f"{rule['record']} averages"


def test_recording_rule_names_follow_level_metric_operations_with_level_matching_the_aggregation():
    for rule in all_rules():
        if "record" not in rule or rule["record"].startswith(ENGINE_SIDE):
            continue
        level = rule["record"].split(":")[0]
        node = promql_parser.parse(rule["expr"])
        if type(node).__name__ == "AggregateExpr":
            kept = sorted(set(node.modifier.labels) - {CLUSTER})
            assert level.split("_") == sorted(kept, key=level.split("_").index), (rule["record"], kept)


# ---- conventions ----------------------------------------------------------------------------------


def test_every_alert_lives_in_its_group_once():
    seen: dict[str, set[str]] = {}
    names = []
    for _, group in rule_groups():
        for rule in group["rules"]:
            if "alert" in rule:
                seen.setdefault(group["name"], set()).add(rule["alert"])
                names.append(rule["alert"])
    assert seen == ALERTS
    assert len(names) == len(set(names)) == sum(map(len, ALERTS.values()))


def test_every_alert_has_one_plain_for_severity_summary_description_and_runbook_url():
    text = "".join(path.read_text() for path in rule_files())
    for name, rule in alerts().items():
        assert re.fullmatch(r"\d+[smh]", str(rule["for"])), (name, rule["for"])
        assert rule["labels"]["severity"] in {"critical", "warning", "info"} | TEMPLATED_SEVERITY.get(name, set())
        ann = rule["annotations"]
        assert ann["summary"].strip().endswith(".") and ann["summary"][0].isalpha(), ann["summary"]
        assert ann["runbook_url"] == RUNBOOK_URL + name.lower()
        assert ann["dashboard_url"].startswith(DASHBOARD_URL), (name, ann["dashboard_url"])
        assert ann["description"].strip()
        if name in PERFORMANCE_ALERTS:
            for needle in (
                "alpha=",
                "break-even",
                "B=",
                "K=",
                "speedup",
                "--speculative-config",
                "specwatch_recommended_config_info",
            ):
                assert needle in ann["description"], (name, needle)
    # exactly one `for:` line per alert, so a chart can rewrite it by alert name
    assert len(re.findall(r"^\s+for:\s", text, flags=re.MULTILINE)) == len(alerts())


def test_template_queries_of_route_series_key_on_job_instance_target_and_route():
    # one specwatch in prometheus/fleet mode exports every replica: without target, `first` picks any
    # (aggregated alerts list their replicas by (cluster, namespace, job, route) and then key on target)
    for name, rule in alerts().items():
        for query in template_queries(rule["annotations"]["description"]):
            if 'route="' in query and not query.startswith("namespace_route:"):
                assert 'target="' in query or name in AGGREGATED, (name, query)


def test_every_aggregation_join_and_template_query_keeps_the_cluster_label():
    """Two clusters under one ruler stay apart (rules/tests/clusters.yaml shows it on data)."""
    for where, expr in every_expression():
        for clause in re.findall(r"\b(?:by|on) \(([^)]*)\)", expr):
            if clause and not where.endswith(("description", "summary")):
                assert clause.split(", ")[0] == CLUSTER, (where, clause)
    for name, rule in alerts().items():
        for query in template_queries(rule["annotations"]["description"]):
            if "{" in query:
                assert f'{CLUSTER}="x"' in query, (name, query)


def test_shared_cause_alerts_fire_once_per_job_and_keep_no_per_pod_label():
    for name in AGGREGATED:
        expr = alerts()[name]["expr"]
        node = promql_parser.parse(expr)
        assert type(node).__name__ == "AggregateExpr", name
        assert list(node.modifier.labels)[:3] == [CLUSTER, "namespace", "job"], (name, node.modifier.labels)


def test_every_alert_quoting_the_recommendation_renders_it_by_action_with_one_template():
    pattern = (
        r"Recommended: \{\{ with printf `specwatch_recommended_config_info.*?no recommendation exported\{\{ end \}\}"
    )
    snippets = {
        name: re.findall(pattern, rule["annotations"]["description"])
        for name, rule in alerts().items()
        if "specwatch_recommended_config_info" in rule["annotations"]["description"] and name not in MEASURE_ALERTS
    }
    assert set(snippets) == PERFORMANCE_ALERTS
    rendered = {s for found in snippets.values() for s in found}
    assert len(rendered) == 1 and all(len(found) == 1 for found in snippets.values()), snippets
    (template,) = rendered
    for branch in ('eq $action "apply"', 'eq $action "remove_speculative_config"', "merge {{ $config }}", "no change"):
        assert branch in template, branch


def test_undecided_warnings_quote_probability_and_interval_name_the_measurement_and_yield_to_the_verdict():
    for name in MEASURE_ALERTS:
        rule = alerts()[name]
        desc = rule["annotations"]["description"]
        assert "Recommended:" not in desc, name
        measure = [q for q in template_queries(desc) if q.startswith("specwatch_recommended_config_info")]
        assert measure and all('action="measure"' in q for q in measure), (name, measure)
        for needle in (
            "$value | humanizePercentage",
            "specwatch_expected_speedup_lower",
            "specwatch_expected_speedup_upper",
            "/api/v1/status",
            ".measurement",
            'specwatch_recommended_config_info{action="measure"}',
            "spec-off canary",
        ):
            assert needle in desc, (name, needle)
        # the verdict in effect on the same window and replica: disable (SpecDecodeBelowBreakeven) or spec_off
        assert (
            "unless on (cluster, job, instance, target, route)\n"
            '(specwatch_verdict{window="5m", verdict=~"disable|spec_off"} == 1)'
        ) in rule["expr"], rule["expr"]


def test_runbook_has_a_section_for_every_alert_at_its_runbook_url_anchor():
    headings = re.findall(r"^## (\S+)\s*$", RUNBOOK.read_text(), flags=re.MULTILINE)
    anchors = {h.lower() for h in headings}
    for name, rule in alerts().items():
        assert rule["annotations"]["runbook_url"].split("#", 1)[1] in anchors, name
    assert set(headings) == set(alerts())


# ---- the promtool suite can fail ------------------------------------------------------------------

MUTATIONS = [
    # (rule file, original text, mutated text, why a correct suite must fail)
    (
        "specwatch-alerts.yaml",
        'specwatch_expected_speedup_upper{window="5m"} >= 1\n        for: 15m',
        'specwatch_expected_speedup_upper{window="5m"} >= 1\n        for: 5m',
        "fires before for: 15m",
    ),
    (
        "specwatch-alerts.yaml",
        '\n            unless on (cluster, job, instance, target, route)\n          specwatch_expected_speedup_upper{window="5m"} >= 1\n',
        "\n",
        "an undecided replica (speedup interval reaching 1) fires the below-break-even alert",
    ),
    (
        "specwatch-alerts.yaml",
        '\n          specwatch_acceptance_margin{window="5m"} < 0\n',
        "\n          specwatch_acceptance_margin < 0\n",
        "window not pinned: the 1m window of another route fires",
    ),
    (
        "specwatch-alerts.yaml",
        "1.2 * specwatch_baseline_itl_p99_seconds",
        "1.0 * specwatch_baseline_itl_p99_seconds",
        "ITL factor lost",
    ),
    (
        "specwatch-alerts.yaml",
        "< on (cluster, job, instance, target, route) group_left ()",
        "< on (cluster, job, instance, target, route)",
        "one-to-one join drops the alert's namespace/pod/target/window",
    ),
    (
        "specwatch-alerts.yaml",
        "< on (cluster, job, instance, target, route) group_left ()",
        "< on (cluster, job, instance, route) group_left ()",
        "fleet mode: the replicas one specwatch exports share job/instance, only target tells them apart",
    ),
    (
        "specwatch-alerts.yaml",
        "unless on (cluster, job, instance, target, route)\n            specwatch_drafts_total",
        "unless on (cluster, job, instance, route)\n            specwatch_drafts_total",
        "fleet mode: one replica's drafts hide another replica's missing metrics",
    ),
    ("specwatch-alerts.yaml", ") >= 1\n", ") >= 0\n", "K'=0 reported as a shorter draft"),
    (
        "specwatch-alerts.yaml",
        "\n            (specwatch_target_up == 1)",
        "\n            (specwatch_target_up >= 0)",
        "missing-metrics fires on a down target",
    ),
    (
        "specwatch-alerts.yaml",
        "and on (cluster, job, instance, target)\n            (specwatch_target_up == 1)",
        "and on (cluster, job, instance)\n            (max by (cluster, job, instance) (specwatch_target_up) == 1)",
        "missing-metrics fires for a down target of a sidecar whose other target is up",
    ),
    (
        "specwatch-alerts.yaml",
        "(time() - specwatch_last_scrape_success_timestamp_seconds) > 300",
        "(time() - specwatch_last_scrape_success_timestamp_seconds) > 3000",
        "wedged poller missed",
    ),
    (
        "specwatch-alerts.yaml",
        'up{job=~".*specwatch.*"} == 0\n',
        'up{job=~".*specwatch.*"} == 0 or on () absent(up{job=~".*specwatch.*"})\n',
        "fires when vLLM scales to zero",
    ),
    (
        "specwatch-alerts.yaml",
        '            unless on (cluster, namespace, pod)\n          (kube_pod_status_phase{phase="Pending"} == 1)\n',
        "",
        "a cold start that pulls the vLLM image for 25 minutes fires ExporterDown",
    ),
    (
        "specwatch-alerts.yaml",
        '            up{endpoint="http-specwatch"} == 0\n',
        '            up{job=~".*specwatch.*"} == 0\n',
        "a release named without 'specwatch' (fullnameOverride) is never matched",
    ),
    (
        "specwatch-alerts.yaml",
        "count by (cluster, namespace, job) (specwatch_config_last_reload_successful == 0)",
        "specwatch_config_last_reload_successful == 0",
        "40 sidecars of one bad ConfigMap fire 40 alerts",
    ),
    (
        "specwatch-alerts.yaml",
        "count by (cluster, namespace, job) (specwatch_config_last_reload_successful == 0)",
        "count by (namespace, job) (specwatch_config_last_reload_successful == 0)",
        "two clusters under one ruler merge into one alert",
    ),
    (
        "specwatch-alerts.yaml",
        'count by (cluster, namespace, route) (\n            specwatch_acceptance_margin{window="5m"} < 0',
        'count by (namespace, route) (\n            specwatch_acceptance_margin{window="5m"} < 0',
        "fleet counts of two clusters merge",
    ),
    (
        "specwatch-alerts.yaml",
        '            specwatch_expected_speedup_upper{window="5m"} >= 1\n          )',
        '            specwatch_expected_speedup_upper{window="5m"} >= 100\n          )',
        "an undecided replica counts below break-even in the fleet alert",
    ),
    (
        "specwatch-alerts.yaml",
        "specwatch_prometheus_up == 0\n",
        "specwatch_prometheus_up == 2\n",
        "fleet-mode query failure does not fire",
    ),
    (
        "specwatch-alerts.yaml",
        "(changes(specwatch_prometheus_last_success_timestamp_seconds[15m]) > 0)",
        "(changes(specwatch_prometheus_last_success_timestamp_seconds[15m]) >= 0)",
        "a full outage fires the intermittent-errors alert too",
    ),
    (
        "specwatch-alerts.yaml",
        "severity: warning\n        annotations:\n          summary: specwatch cannot read",
        "severity: critical\n        annotations:\n          summary: specwatch cannot read",
        "target down pages",
    ),
    ("specwatch-alerts.yaml", "> 300\n        for: 20m", "> 300\n        for: 10m", "a cold start fires target down"),
    ("specwatch-alerts.yaml", ") >= 0.25", ") >= 0", "fleet alert fires for a route with no replica below"),
    (
        "specwatch-alerts.yaml",
        '(\n            specwatch_acceptance_margin{window="5m"} < 0',
        "(\n            specwatch_acceptance_margin < 0",
        "fleet count reads every window",
    ),
    (
        "specwatch-alerts.yaml",
        'specwatch_loss_probability{window="5m"} >= 0.8',
        'specwatch_loss_probability{window="5m"} >= 0.75',
        "probably-losing fires at 0.79",
    ),
    (
        "specwatch-alerts.yaml",
        'specwatch_loss_probability{window="5m"} >= 0.8',
        'specwatch_loss_probability{window="5m"} > 0.8',
        "probably-losing misses exactly 0.8 (at or above)",
    ),
    (
        "specwatch-alerts.yaml",
        'specwatch_loss_probability{window="5m"} >= 0.8',
        "specwatch_loss_probability >= 0.8",
        "probably-losing reads every window: another route's 1m window fires",
    ),
    (
        "specwatch-alerts.yaml",
        'specwatch_controller_loss_probability{window="5m"} >= 0.8)',
        'specwatch_controller_loss_probability{window="5m"} >= 0.9)',
        "controller-losing misses a probable loss of 0.85",
    ),
    (
        "specwatch-alerts.yaml",
        'specwatch_controller_loss_probability{window="5m"} >= 0.8)',
        "specwatch_controller_loss_probability >= 0.8)",
        "controller-losing reads every window: another replica's 1m window fires",
    ),
    (
        "specwatch-alerts.yaml",
        "severity: '{{ if lt $value 1.0 }}critical{{ else }}warning{{ end }}'",
        "severity: warning",
        "a controller whose interval is clear of 1 does not page",
    ),
    (
        "specwatch-alerts.yaml",
        '(specwatch_verdict{window="5m", verdict=~"disable|spec_off"} == 1)\n        for: 15m',
        '(specwatch_verdict{window="5m", verdict=~"disable|spec_off"} == 1)\n        for: 5m',
        "probably-losing fires before for: 15m",
    ),
    (
        "specwatch-alerts.yaml",
        "\n            unless on (cluster, job, instance, target, route)\n"
        '          (specwatch_verdict{window="5m", verdict=~"disable|spec_off"} == 1)\n',
        "\n",
        "probably-losing fires beside the disable verdict's own alert",
    ),
    (
        "specwatch-alerts.yaml",
        'verdict=~"disable|spec_off"',
        'verdict=~"disable"',
        "probably-losing fires on a server that no longer speculates (spec_off)",
    ),
    (
        "specwatch-alerts.yaml",
        'specwatch_verdict{window="5m", verdict=~"disable|spec_off"}',
        'specwatch_verdict{verdict=~"disable|spec_off"}',
        "probably-losing silenced by another window's disable",
    ),
    (
        "specwatch-alerts.yaml",
        'unless on (cluster, job, instance, target, route)\n          (specwatch_verdict{window="5m"',
        'unless on (cluster, job, instance, route)\n          (specwatch_verdict{window="5m"',
        "standalone/fleet mode: one target's disable silences another target's probably-losing",
    ),
    (
        "specwatch-alerts.yaml",
        '(specwatch_speculation_controller_info{mode="stopped"} == 1)\n            and on',
        '(specwatch_speculation_controller_info{mode=~"stopped|gated"} == 1)\n            and on',
        "a stated gate that has not fired reads as stopped",
    ),
    (
        "specwatch-alerts.yaml",
        "\n            and on (cluster, job, instance, target, route)\n"
        '          (specwatch_drafts_total or specwatch_window_drafts{window="5m"})\n',
        "\n",
        "speculation stopped fires where the metrics are simply missing (SpecDecodeMetricsMissing's case)",
    ),
    (
        "specwatch-alerts.yaml",
        "and on (cluster, job, instance, target, route)\n          (specwatch_drafts_total",
        "and on (cluster, job, instance, route)\n          (specwatch_drafts_total",
        "fleet mode: one replica's counters make another replica's stopped mark fire",
    ),
    (
        "specwatch-alerts.yaml",
        'specwatch_window_drafts{window="5m"})\n        for: 5m',
        'specwatch_window_drafts{window="5m"})\n        for: 3m',
        "speculation stopped fires before for: 5m",
    ),
    (
        "specwatch-config-check.yaml",
        "\n              unless on (cluster, job, instance, target, route)\n"
        '            (specwatch_speculation_controller_info{mode="stopped"} == 1)\n',
        "\n",
        "a schedule data parallelism dropped fires the config mismatch beside speculation stopped",
    ),
    (
        "specwatch-config-check.yaml",
        "unless on (cluster, job, instance, target, route)\n            (specwatch_speculation_controller_info",
        "unless on (cluster, job, instance, route)\n            (specwatch_speculation_controller_info",
        "fleet mode: one replica's stopped mark silences another replica's config mismatch",
    ),
    (
        "specwatch-recording.yaml",
        "sum by (cluster, namespace, route) (rate(specwatch_accepted_tokens_total[5m]))",
        "avg by (cluster, namespace, route) (rate(specwatch_accepted_tokens_total[5m]))",
        "averaging across pods",
    ),
    (
        "specwatch-recording.yaml",
        "(namespace_route:specwatch_draft_tokens:rate5m > 0)",
        "(namespace_route:specwatch_draft_tokens:rate5m >= 0)",
        "idle route yields NaN instead of absent",
    ),
    (
        "specwatch-recording.yaml",
        "histogram_quantile(0.99, namespace_route_le",
        "histogram_quantile(0.9, namespace_route_le",
        "wrong quantile",
    ),
    (
        "specwatch-alerts.yaml",
        'instance="%s",namespace="%s",target="%s",route="%s"}` $labels.cluster $labels.job $labels.instance'
        " $labels.namespace $labels.target",
        'instance="%s",target="%s",route="%s"}` $labels.cluster $labels.job $labels.instance $labels.target',
        "fleet mode with deployment_labels: one namespace's alert quotes another namespace's predicted gain",
    ),
]


@needs_promtool
@pytest.mark.parametrize("file, original, mutated, why", MUTATIONS, ids=[m[3] for m in MUTATIONS])
def test_promtool_suite_fails_on_a_broken_rule(tmp_path, file, original, mutated, why):
    shutil.copytree(RULES_DIR, tmp_path / "rules")
    target = tmp_path / "rules" / file
    text = target.read_text()
    assert text.count(original) == 1, f"mutation anchor not found once in {file}: {original!r}"
    target.write_text(text.replace(original, mutated))
    assert promtool("check", "rules", str(target)).returncode == 0, "the mutant must still be valid PromQL"
    result = promtool("test", "rules", *map(str, sorted((tmp_path / "rules" / "tests").glob("*.yaml"))))
    assert result.returncode != 0, f"promtool tests did not catch: {why}"
