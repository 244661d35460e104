"""The `prometheus:` section: typed, validated, every error naming its key; and the query set's
size does not depend on the fleet."""
from __future__ import annotations

import pytest
from specwatch import promql
from specwatch.backtest import parse_time
from specwatch.config import ConfigError
from specwatch.promsource import parse_prometheus_source


def test_a_full_section_parses_with_env_headers_and_durations(tmp_path) -> None:
    token = tmp_path / "token"
    token.write_text("secret\n")
    source = parse_prometheus_source({
        "url": "http://prometheus:9090/", "selector": '{namespace="llm", job="vllm"}',
        "replica_labels": ["namespace", "pod"], "headers": {"X-Scope-OrgID": "${TENANT}"},
        "bearer_token_file": str(token), "timeout": "3s", "scrape_interval": "15s"}, environ={"TENANT": "team-a"})
    assert source.url == "http://prometheus:9090"
    assert source.matchers == 'namespace="llm", job="vllm"'
    assert source.replica_labels == ("namespace", "pod")
    assert source.headers == {"X-Scope-OrgID": "team-a"}
    assert (source.timeout, source.scrape_interval) == (3.0, 15.0)


@pytest.mark.parametrize(("raw", "key"), [
    ({}, "prometheus.url"),
    ({"url": "file:///etc/passwd"}, "prometheus.url"),
    ({"url": "http://p:9090", "selector": '{job="vllm"'}, "prometheus.selector"),
    ({"url": "http://p:9090", "replica_labels": []}, "prometheus.replica_labels"),
    ({"url": "http://p:9090", "replica_labels": ["pod", "engine"]}, "prometheus.replica_labels[1]"),
    ({"url": "http://p:9090", "headers": {"X-Scope-OrgID": "${MISSING}"}}, "prometheus.headers.X-Scope-OrgID"),
    ({"url": "http://p:9090", "bearer_token_file": "/nonexistent/token"}, "prometheus.bearer_token_file"),
    ({"url": "http://p:9090", "timeout": "soon"}, "prometheus.timeout"),
    ({"url": "http://p:9090", "step": "5s"}, "prometheus.step"),
])
def test_a_bad_value_is_one_error_naming_its_key(raw, key) -> None:
    with pytest.raises(ConfigError) as error:
        parse_prometheus_source(raw, environ={})
    assert str(error.value).startswith(key + ":")


def test_the_query_count_per_poll_is_the_windows_plus_one_whatever_the_selector() -> None:
    one = promql.query_set((60.0, 300.0), ("1m", "5m"), "", ("instance",))
    many = promql.query_set((60.0, 300.0), ("1m", "5m"), 'namespace=~"a|b|c"', ("namespace", "pod", "container"))
    assert one.count == many.count == 3
    assert all("sum by (namespace, pod, container, model_name, engine" in q for _, _, q in many.windows)


def test_backtest_times_are_rfc3339_or_unix_seconds() -> None:
    assert parse_time("2026-11-30T17:00:00Z", "--start") == parse_time("1796058000", "--start") == 1796058000.0
    with pytest.raises(ConfigError, match="--end"):
        parse_time("yesterday", "--end")
