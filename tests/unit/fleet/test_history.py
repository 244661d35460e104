"""The history read's grid, its bounded client and what it reads of the evaluator (against a
Prometheus that refuses connections: the reads against a real one are
tests/system/fleet/test_history_at_start.py; the service's bookkeeping is tests/unit/serve/)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from specwatch.config import from_mapping
from specwatch.costmodel import learned
from specwatch.fleet.backtest import RANGE_QUERY_TIMEOUT
from specwatch.fleet.client import PromClient, PromQueryError
from specwatch.fleet.evaluator import FleetEvaluator
from specwatch.fleet.history import MAX_STEPS, _BoundedClient, _QueryBudgetSpent, history_grid, read_history
from support.loopback import free_port


def _fleet(url: str, **prometheus: object):
    return from_mapping(
        {"listen": "127.0.0.1:0", "prometheus": {"url": url, "timeout": "1s", **prometheus}}, environ={}
    )


def test_the_history_grid_is_backtests_steps_before_now_capped_to_the_newest():
    assert history_grid(10_000.0, 600.0, 60.0) == (9_400.0, 10)
    assert history_grid(10_000.0, 630.0, 60.0) == (9_400.0, 10), "a partial step is not read"
    assert history_grid(10_000.0, 0.0, 60.0) == (10_000.0, 0), "0s: off"
    assert history_grid(1e9, 30 * 86400.0, 60.0) == (1e9 - MAX_STEPS * 60.0, MAX_STEPS)


def test_the_step_cap_is_the_learners_baseline_horizon_at_a_1m_window():
    assert MAX_STEPS * 60.0 == learned.BASELINE_HALF_LIVES * learned.DEFAULT_HALF_LIFE_SECONDS


def test_the_bounded_client_takes_at_most_its_query_cap_and_gives_each_query_the_time_left():
    config = _fleet(f"http://127.0.0.1:{free_port()}")
    assert config.prometheus is not None
    client = PromClient(config.prometheus)
    try:
        bounded = _BoundedClient(client, time.monotonic() + 3600.0, max_queries=2)
        for _ in range(2):
            with pytest.raises(PromQueryError) as refused:
                bounded.query_range("up", 0.0, 60.0, 60.0)
            assert refused.value.reason == "connect", "each query goes to the server"
        assert client.config.timeout == RANGE_QUERY_TIMEOUT, "the budget left is longer than a range query's"
        with pytest.raises(_QueryBudgetSpent):
            bounded.query_range("up", 0.0, 60.0, 60.0)
        assert bounded.queries == 2, "the third is not sent"
        short = _BoundedClient(client, time.monotonic() + 30.0, max_queries=2)
        with pytest.raises(PromQueryError):
            short.query_range("up", 0.0, 60.0, 60.0)
        assert 0 < client.config.timeout <= 30.0, "a query gets no more than the budget left"
    finally:
        client.close()


def test_the_bounded_client_past_its_deadline_sends_nothing_and_says_timeout():
    config = _fleet(f"http://127.0.0.1:{free_port()}")
    assert config.prometheus is not None
    client = PromClient(config.prometheus)
    try:
        bounded = _BoundedClient(client, time.monotonic() - 1.0, max_queries=64)
        with pytest.raises(PromQueryError) as refused:
            bounded.query_range("up", 0.0, 60.0, 60.0)
        assert refused.value.reason == "timeout" and bounded.queries == 0
    finally:
        client.close()


def test_the_query_cap_ends_the_read_as_budget_and_the_client_gets_its_own_config_back():
    url = f"http://127.0.0.1:{free_port()}"
    evaluator = FleetEvaluator(_fleet(url, history_lookback="1h"))
    own = _fleet(url, timeout="3s").prometheus
    assert own is not None
    client = PromClient(own)
    try:
        read = read_history(evaluator, 1e9, client=client, max_queries=0)
        assert (read.error, read.queries, read.steps) == ("budget", 0, 0), "not the server's limit: no split"
        assert client.config is own
    finally:
        client.close()


def test_the_lookback_read_is_the_reloaded_configs():
    url = f"http://127.0.0.1:{free_port()}"
    config = _fleet(url, history_lookback="1h")
    evaluator = FleetEvaluator(config)
    assert config.prometheus is not None
    evaluator.reconfigure(replace(config, prometheus=replace(config.prometheus, history_lookback=0.0)))
    read = read_history(evaluator, 1e9)
    assert (read.lookback, read.steps, read.queries, read.error) == (0.0, 0, 0, None)
