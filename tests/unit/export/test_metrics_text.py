"""/metrics' renderings (export/metrics_text: the text format and OpenMetrics) against
prometheus_client's renderings of the same families, byte for byte, and read back by its parsers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, Summary
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families

from specwatch import sim
from specwatch.export import metrics_text
from specwatch.export.families import Metric
from specwatch.serve.service import Service
from support.builders import scenario_config
from support.prom_oracle import plain_openmetrics, plain_text


class _Odd:
    """Families prometheus_client renders with every special case: label values to escape, a
    counter's _total (and its _created, with the HELP escaped), an unknown type, timestamps,
    non-finite and huge values, names outside the legacy character set."""

    def collect(self):
        g = GaugeMetricFamily("odd_gauge", 'help with \\ and\nnewline and "quotes"', labels=["a", "b"])
        g.add_metric(['quote " back \\ nl \n', "ü"], float("nan"))
        g.add_metric(["x", "y"], float("inf"))
        g.add_metric(["x", "v"], float("-inf"))
        g.add_metric(["x", "z"], 1.5e300, timestamp=1700000000.25)
        g.add_metric(["x", "w"], -0.0)
        g.add_metric(["x", "u"], 12345678.0)
        yield g
        c = CounterMetricFamily("odd_things", "a counter, \\ and\nnewline", labels=["k"], created=1700000000.0)
        c.add_metric(["v"], 3.0, created=1700000000.0)
        yield c
        yield HistogramMetricFamily("odd_hist", "h", buckets=[("0.1", 1.0), ("+Inf", 2.0)], sum_value=0.3)
        u = GaugeMetricFamily("odd.name:colon-ü", "utf-8 names", labels=["la.bel", "9lives"])
        u.add_metric(["1", "2"], 4.0)
        yield u


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
    """A sidecar's families after polls of the simulator (every contract family that one exports),
    and the process's own."""
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


def test_the_text_format_renders_the_sidecars_families_as_prometheus_client_does(sidecar_families):
    families, own = sidecar_families
    assert len(families) > 20
    assert {f.name for f in own} >= {"process_resident_memory_bytes", "process_cpu_seconds", "python_info"}
    assert metrics_text.render_text(families, own) == plain_text(families, own)
    # twice: the second rendering uses the cached names and heads
    assert metrics_text.render_text(families, own) == plain_text(families, own)


def test_openmetrics_renders_the_sidecars_families_as_prometheus_client_does(sidecar_families):
    families, own = sidecar_families
    assert metrics_text.render_openmetrics(families, own) == plain_openmetrics(families, own)
    assert metrics_text.render_openmetrics(families, own) == plain_openmetrics(families, own)


@pytest.mark.parametrize("registry", _registries())
def test_both_formats_render_every_special_case_as_prometheus_client_does(registry):
    families = metrics_text.collect(registry)
    assert metrics_text.render_text(families) == plain_text(families)
    assert metrics_text.render_openmetrics(families) == plain_openmetrics(families)


def test_openmetrics_ends_in_eof_and_reads_back_as_the_same_samples_as_the_text_format(sidecar_families):
    families, own = sidecar_families
    text = metrics_text.render_openmetrics(families, own).decode()
    assert text.endswith("# EOF\n")
    plain = {
        (s.name, tuple(sorted(s.labels.items())))
        for f in text_string_to_metric_families(metrics_text.render_text(families).decode())
        for s in f.samples
    }
    opened = {(s.name, tuple(sorted(s.labels.items()))) for f in om_parse(text) for s in f.samples}
    assert plain <= opened


@given(st.floats())
def test_values_are_written_as_prometheus_client_writes_them(value):
    from prometheus_client.utils import floatToGoString

    assert metrics_text.go_float(value) == floatToGoString(value)


@given(
    st.text(min_size=1, max_size=12),
    st.text(min_size=1, max_size=8),
    st.text(max_size=12),
    st.sampled_from(["gauge", "counter"]),
    st.floats(),
    st.none() | st.floats(min_value=0, max_value=4e9),
)
def test_any_name_label_and_value_is_written_as_prometheus_client_writes_it(
    name, label, label_value, typ, value, timestamp
):
    family = Metric(name, f"help of {name}", typ, [label])
    family.add_metric([label_value], value, timestamp)
    assert metrics_text.render_text([family]) == plain_text([family])
    assert metrics_text.render_openmetrics([family]) == plain_openmetrics([family])


def test_the_content_types_are_prometheus_clients_latest():
    from prometheus_client import CONTENT_TYPE_LATEST
    from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_LATEST

    assert metrics_text.CONTENT_TYPE == CONTENT_TYPE_LATEST
    assert metrics_text.OPENMETRICS_CONTENT_TYPE == OPENMETRICS_LATEST
