"""/metrics' fast path (export/metrics_text.render_text) against prometheus_client's rendering of
the same families, byte for byte, and the OpenMetrics rendering served when asked for."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, Summary
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from specwatch import sim
from specwatch.export import metrics_text
from specwatch.serve.service import Service
from support.builders import scenario_config


class _Odd:
    """Families prometheus_client renders with every special case: label values to escape, a
    counter's _total (and its _created, with the HELP escaped), an unknown type, timestamps, non-finite and huge values."""

    def collect(self):
        g = GaugeMetricFamily("odd_gauge", "help with \\ and\nnewline", labels=["a", "b"])
        g.add_metric(['quote " back \\ nl \n', "ü"], float("nan"))
        g.add_metric(["x", "y"], float("inf"))
        g.add_metric(["x", "z"], 1.5e300, timestamp=1700000000.25)
        g.add_metric(["x", "w"], -0.0)
        yield g
        c = CounterMetricFamily("odd_things", "a counter, \\ and\nnewline", labels=["k"], created=1700000000.0)
        c.add_metric(["v"], 3.0, created=1700000000.0)
        yield c
        yield HistogramMetricFamily("odd_hist", "h", buckets=[("0.1", 1.0), ("+Inf", 2.0)], sum_value=0.3)


def _registries() -> list[CollectorRegistry]:
    reg = CollectorRegistry()
    reg.register(_Odd())
    Counter("client_requests", "c", ["route"], registry=reg).labels("a/b").inc(2)
    Gauge("client_temp", "g", registry=reg).set(1234567.0)
    Histogram("client_latency_seconds", "h", registry=reg).observe(0.2)
    Summary("client_size_bytes", "s", registry=reg).observe(3)
    Info("client_build", "i", registry=reg).info({"version": "1"})
    return [reg]


@pytest.fixture(scope="module")
def sidecar_families():
    """A sidecar's families after polls of the simulator (every contract family that one exports)."""
    scenario = sim.load_scenario("steady")
    service = Service(scenario_config("steady"))
    simulator = sim.Simulator(scenario, seed=1)
    try:
        for i in range(1, 30):
            simulator.advance_to(5.0 * i)
            service.poller.pipeline.ingest("vllm", 5.0 * i, simulator.render(), 0.001)
            service.poller.pipeline.evaluate(5.0 * i)
        service.published = service._publish(ready=True)
        return metrics_text.collect(service.registry), service._self_families()
    finally:
        service.stop()


def test_the_fast_path_renders_the_sidecars_families_as_prometheus_client_does(sidecar_families):
    families, own = sidecar_families
    assert len(families) > 20
    assert metrics_text.render_text(families, own) == metrics_text.plain_text(families, own)
    # twice: the second rendering uses the cached names and heads
    assert metrics_text.render_text(families, own) == metrics_text.plain_text(families, own)


@pytest.mark.parametrize("registry", _registries())
def test_the_fast_path_renders_every_special_case_as_prometheus_client_does(registry):
    families = metrics_text.collect(registry)
    assert metrics_text.render_text(families) == metrics_text.plain_text(families)


def test_openmetrics_is_prometheus_clients_rendering_and_ends_in_eof(sidecar_families):
    families, own = sidecar_families
    text = metrics_text.render_openmetrics(families, own).decode()
    assert text.endswith("# EOF\n")
    plain = {
        s.name for f in text_string_to_metric_families(metrics_text.render_text(families).decode()) for s in f.samples
    }
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse

    opened = {s.name for f in om_parse(text) for s in f.samples}
    assert plain <= opened
