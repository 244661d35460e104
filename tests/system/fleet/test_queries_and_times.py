"""The fleet evaluator's inputs: the query set's size does not depend on the fleet, it needs the
`prometheus:` section (validated by the one config schema, tests/test_config.py), and backtest
times are RFC 3339 or Unix seconds."""

from __future__ import annotations

import dataclasses

import pytest

from specwatch.config import ConfigError, from_mapping
from specwatch.engines.registry import ENGINES
from specwatch.engines.schema import CounterSource, per_position
from specwatch.fleet import queries as promql
from specwatch.fleet.backtest import parse_time
from specwatch.fleet.evaluator import FleetEvaluator


def test_the_query_count_per_poll_is_the_windows_plus_one_whatever_the_selector() -> None:
    one = promql.query_set((60.0, 300.0), ("1m", "5m"), "", ("instance",))
    many = promql.query_set((60.0, 300.0), ("1m", "5m"), 'namespace=~"a|b|c"', ("namespace", "pod", "container"))
    assert one.count == many.count == 3
    assert all("sum by (namespace, pod, container, model_name, engine" in q for _, _, q in many.windows)


def test_the_evaluator_reads_the_prometheus_section_of_the_one_config() -> None:
    config = from_mapping(
        {"prometheus": {"url": "http://p:9090/", "selector": '{job="vllm"}', "replica_labels": ["namespace", "pod"]}},
        environ={},
    )
    evaluator = FleetEvaluator(config)
    assert evaluator.source is config.prometheus
    assert all(
        'job="vllm"' in q and "sum by (namespace, pod, model_name, engine" in q for _, _, q in evaluator.queries.windows
    )


def test_the_evaluator_without_a_prometheus_section_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError) as error:
        FleetEvaluator(from_mapping({}, environ={}))
    assert error.value.key == "prometheus"


def test_backtest_times_are_rfc3339_or_unix_seconds() -> None:
    assert parse_time("2026-11-30T17:00:00Z", "--start") == parse_time("1796058000", "--start") == 1796058000.0
    with pytest.raises(ConfigError, match="--end"):
        parse_time("yesterday", "--end")


def test_every_engine_is_asked_in_the_same_queries_and_a_position_label_of_another_name_is_read_as_position() -> None:
    query = promql.window_query(60.0, "", ("pod",))
    for engine in ENGINES:
        assert f'"{promql.ENGINE_LABEL}", "{engine.name}"' in query, engine.name
    renamed = dataclasses.replace(
        ENGINES[0],
        name="renamed",
        counters=(
            CounterSource(("x:accepted_per_pos",), per_position("pos", "token_position"), True, False, counter="pos"),
        ),
        running=None,
        position_label="token_position",
    )
    one = promql.window_query(60.0, "", ("pod",), (renamed,))
    assert "sum by (pod, model_name, engine, token_position)" in one
    assert "label_replace(sum by" in one and '"position", "$1", "token_position", "(.*)"' in one
