"""The chart's fleet shards and recorded-series sizing (prometheus mode): fleet.shards > 1 renders a
StatefulSet whose pods each take their shard from their ordinal, the shard alert reads the chart's
own job, and with config.prometheus.recorded the memory follows the route aggregates, not the replicas
(rendered with the real Helm engine, as tests/deploy/test_helm_chart.py does)."""

from __future__ import annotations

import pytest

# (test_helm_chart skips itself, and so this module, without helm-python-sdk)
from deploy.test_helm_chart import (  # noqa: F401  (chart: the fixture)
    PROMETHEUS,
    chart,
    merged,
    render,
    rendered_alerts,
    rendered_config,
    validation_errors,
)
from specwatch import config as config_mod


def _workloads(objects: list[dict]) -> dict[str, list[dict]]:
    return {kind: [o for o in objects if o["kind"] == kind] for kind in ("Deployment", "StatefulSet")}


def test_fleet_shards_render_a_statefulset_whose_pods_take_their_shard_from_their_ordinal(chart):  # noqa: F811
    objects = render(chart, merged(PROMETHEUS, {"fleet": {"shards": 3}}))
    workloads = _workloads(objects)
    assert workloads["Deployment"] == []
    (statefulset,) = workloads["StatefulSet"]
    assert statefulset["spec"]["replicas"] == 3
    assert validation_errors(statefulset) == []
    (container,) = statefulset["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["SPECWATCH_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    template = env["SPECWATCH_PROMETHEUS__SHARD"]["value"]
    name = statefulset["metadata"]["name"]
    for ordinal in range(3):  # what the kubelet expands $(SPECWATCH_POD_NAME) to in pod <name>-<i>
        value = template.replace("$(SPECWATCH_POD_NAME)", f"{name}-{ordinal}")
        loaded = config_mod.from_mapping(rendered_config(objects), environ={"SPECWATCH_PROMETHEUS__SHARD": value})
        assert loaded.prometheus is not None and loaded.prometheus.shard == (ordinal, 3)


def test_one_shard_keeps_the_single_deployment_without_a_shard(chart):  # noqa: F811
    for values in (PROMETHEUS, merged(PROMETHEUS, {"fleet": {"shards": 1}})):
        workloads = _workloads(render(chart, values))
        assert workloads["StatefulSet"] == [] and len(workloads["Deployment"]) == 1
        (container,) = workloads["Deployment"][0]["spec"]["template"]["spec"]["containers"]
        assert "SPECWATCH_PROMETHEUS__SHARD" not in {e["name"] for e in container["env"]}


def test_the_shard_alert_reads_the_job_of_the_charts_own_scrape(chart):  # noqa: F811
    objects = render(chart, merged(PROMETHEUS, {"fleet": {"shards": 2}, "prometheusRule": {"enabled": True}}))
    (service,) = [o for o in objects if o["kind"] == "Service"]
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    alert = rendered_alerts(rule["spec"]["groups"])["SpecwatchFleetShardDown"]
    assert f'up{{job="{service["metadata"]["name"]}"}}' in alert["expr"]
    assert 'job="specwatch-fleet"' not in alert["expr"]


@pytest.mark.parametrize(("routes", "memory"), [(100, "89Mi"), (1000, "314Mi"), (8, "66Mi")])
def test_with_recorded_series_the_memory_follows_the_route_aggregates_not_the_replicas(chart, routes, memory):  # noqa: F811
    """64 MiB + (64 + 192) KiB per aggregate: the polls' and the history read's, each per aggregate."""
    values = merged(
        PROMETHEUS,
        {
            "config": {"prometheus": {"recorded": True}},
            "prometheus": {"expectedReplicas": 10000, "expectedRoutes": routes},
        },
    )
    objects = render(chart, values)
    (deployment,) = _workloads(objects)["Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["memory"] == container["resources"]["requests"]["memory"] == memory
