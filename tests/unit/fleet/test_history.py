"""The history read's grid and the service's bookkeeping of it (no query answers here: the reads
against a real Prometheus are tests/system/fleet/test_history_at_start.py)."""

from __future__ import annotations

from specwatch.config import from_mapping
from specwatch.fleet.history import MAX_STEPS, history_grid
from specwatch.serve.service import Service
from support.loopback import free_port


def test_the_history_grid_is_backtests_steps_before_now_capped_to_the_newest():
    assert history_grid(10_000.0, 600.0, 60.0) == (9_400.0, 10)
    assert history_grid(10_000.0, 630.0, 60.0) == (9_400.0, 10), "a partial step is not read"
    assert history_grid(10_000.0, 0.0, 60.0) == (10_000.0, 0), "0s: off"
    assert history_grid(1e9, 30 * 86400.0, 60.0) == (1e9 - MAX_STEPS * 60.0, MAX_STEPS)


def _fleet(url: str, **prometheus: object):
    return from_mapping(
        {"listen": "127.0.0.1:0", "prometheus": {"url": url, "timeout": "1s", **prometheus}}, environ={}
    )


def test_an_unreachable_prometheus_counts_the_history_once_and_a_new_evaluator_reads_it_again():
    url = f"http://127.0.0.1:{free_port()}"
    service = Service(_fleet(url), clock=lambda: 1e9)
    service.poll_once()
    service.poll_once()
    assert service.history is not None and (service.history.steps, service.history.error) == (0, "connect")
    assert service.history_errors["connect"] == 1, "read once per evaluator, not per poll"
    evaluator = service.fleet.evaluator if service.fleet else None
    service.apply(_fleet(url, history_lookback="1h"))
    assert service.fleet is not None and service.fleet.evaluator is evaluator, "the lookback alone rebuilds nothing"
    service.poll_once()
    assert service.history_errors["connect"] == 1
    service.apply(_fleet(url, selector='{job="other"}'))
    assert service.history is None, "a new evaluator: its history is not read yet"
    service.poll_once()
    assert service.history_errors["connect"] == 2


def test_history_lookback_0s_reads_nothing_and_says_so():
    service = Service(_fleet(f"http://127.0.0.1:{free_port()}", history_lookback="0s"), clock=lambda: 1e9)
    service.poll_once()
    assert service.history is not None and (service.history.steps, service.history.queries) == (0, 0)
    assert sum(service.history_errors.values()) == 0
    assert b"specwatch_history_steps 0.0" in service.published.metrics
