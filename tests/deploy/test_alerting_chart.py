"""The chart's alerting values on the rules and dashboard of rules/ and dashboards/ (rendered by the real
Helm engine, as tests/deploy/test_helm_chart.py does):

- prometheusRule.clusterLabel / additionalAggregationLabels: every by/on of every rule keeps them, and
  the annotation queries match the cluster label by its name (kubernetes-mixin's clusterLabel);
- portName: SpecDecodeExporterDown selects the port the chart's monitors scrape, never the release name;
- prometheusRule.dashboardUrl / runbookUrl: the alerts' dashboard_url and runbook_url, and the
  dashboard's own runbook links, follow them;
- several releases: the monitoring-only pattern (rules and dashboard rendered by one release only)
  gives one PrometheusRule and one dashboard uid, and the rules name no release.
"""

from __future__ import annotations

import json
import re

# (test_helm_chart skips itself, and so this module, without helm-python-sdk)
from deploy.test_helm_chart import chart, of_kind, one, render, rendered_alerts  # noqa: F401  (chart: the fixture)

ON = {"prometheusRule": {"enabled": True}}


def rules_of(objects: list[dict]) -> list[dict]:
    return [r for g in one(objects, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]


def test_every_aggregation_and_join_keeps_the_configured_cluster_and_pass_through_labels(chart):  # noqa: F811
    values = {
        "prometheusRule": {"enabled": True, "clusterLabel": "k8s_cluster", "additionalAggregationLabels": ["team"]}
    }
    rules = rules_of(render(chart, values))
    clauses = [c for r in rules for c in re.findall(r"\b(?:by|on) \(([^)]+)\)", r["expr"])]
    assert clauses and all(c.startswith("k8s_cluster, team, ") for c in clauses), clauses
    for r in rules:
        text = json.dumps(r.get("annotations", {}))
        assert 'cluster="%s"' not in text and "$labels.cluster " not in text, r.get("alert")
        if "alert" in r and "| query" in text:
            assert 'k8s_cluster=\\"%s\\"' in text and "$labels.k8s_cluster" in text, r["alert"]
    fleet = rendered_alerts(one(render(chart, values), "PrometheusRule")["spec"]["groups"])[
        "SpecDecodeFleetBelowBreakeven"
    ]
    assert "on (k8s_cluster, team, namespace, route)" in fleet["expr"]
    counts = [r for r in rules if r.get("record", "").endswith("replicas_below_breakeven:count")]
    assert counts[0]["expr"].startswith("count by (k8s_cluster, team, namespace, route)")


def test_exporter_down_selects_the_scraped_port_and_never_the_release_name(chart):  # noqa: F811
    for release, port in (("vllm-monitor", "http-specwatch"), ("llama", "metrics")):
        values = {**ON, "portName": port, "fullnameOverride": f"{release}-x"}
        alerts = rendered_alerts(one(render(chart, values, name=release), "PrometheusRule")["spec"]["groups"])
        expr = alerts["SpecDecodeExporterDown"]["expr"]
        assert f'up{{endpoint="{port}"}} == 0' in expr
        assert 'kube_pod_status_phase{phase="Pending"}' in expr
        assert release not in json.dumps(one(render(chart, values, name=release), "PrometheusRule")["spec"])


def test_dashboard_url_and_runbook_links_follow_the_chart_values(chart):  # noqa: F811
    values = {
        "prometheusRule": {
            "enabled": True,
            "runbookUrl": "https://wiki.example.org/specwatch#",
            "dashboardUrl": "https://grafana.example.org/d/specwatch/specwatch",
        },
        "dashboards": {"enabled": True},
    }
    objects = render(chart, values)
    for name, alert in rendered_alerts(one(objects, "PrometheusRule")["spec"]["groups"]).items():
        assert alert["annotations"]["runbook_url"] == "https://wiki.example.org/specwatch#" + name.lower()
        assert alert["annotations"]["dashboard_url"].startswith("https://grafana.example.org/d/specwatch/specwatch?")
    (cm,) = [o for o in of_kind(objects, "ConfigMap") if "grafana_dashboard" in o["metadata"]["labels"]]
    text = next(iter(cm["data"].values()))
    assert "github.com/specwatch/specwatch/blob/main/docs/runbook.md" not in text
    links = [link["url"] for p in json.loads(text)["panels"] for link in p.get("links", [])]
    assert links and all(u.startswith("https://wiki.example.org/specwatch#") for u in links)


def test_several_releases_monitoring_only_pattern_renders_rules_and_dashboard_once(chart):  # noqa: F811
    """Release `monitoring` renders rules + dashboard; `vllm-a` and `vllm-b` only their ConfigMap (defaults)."""
    releases = {
        "monitoring": {"prometheusRule": {"enabled": True}, "dashboards": {"enabled": True}},
        "vllm-a": {},
        "vllm-b": {},
    }
    objects = [o for name, values in releases.items() for o in render(chart, values, name=name)]
    assert len(of_kind(objects, "PrometheusRule")) == 1
    dashboards = [o for o in of_kind(objects, "ConfigMap") if "grafana_dashboard" in o["metadata"]["labels"]]
    uids = [json.loads(next(iter(cm["data"].values())))["uid"] for cm in dashboards]
    assert uids == ["specwatch"]
    spec = json.dumps(one(objects, "PrometheusRule")["spec"])
    for name in releases:
        assert name not in spec, f"the rules name release {name}: they would not cover the others"
