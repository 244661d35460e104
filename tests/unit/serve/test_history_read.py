"""The service's bookkeeping of fleet mode's history read (serve/service.py), against a Prometheus
that refuses connections: once per evaluator, counted once, and a poll-loop bug's recovery."""

from __future__ import annotations

import threading

import pytest

from specwatch.config import from_mapping
from specwatch.fleet import source as fleet_source
from specwatch.serve.service import Service
from support.loopback import free_port


def _fleet(url: str, **prometheus: object):
    return from_mapping(
        {"listen": "127.0.0.1:0", "prometheus": {"url": url, "timeout": "1s", **prometheus}}, environ={}
    )


def _tick(service: Service) -> None:
    """One tick of the poll loop: a bug is recovered as _poll_loop recovers it."""
    try:
        service.poll_once()
    except Exception as exc:  # noqa: BLE001 - what _poll_loop catches
        service._recover(exc)


def test_an_unreachable_prometheus_counts_the_history_once_and_a_new_evaluator_reads_it_again():
    url = f"http://127.0.0.1:{free_port()}"
    service = Service(_fleet(url), clock=lambda: 1e9)
    service.poll_once()
    service.poll_once()
    assert service.poller.history is not None and (service.poller.history.steps, service.poller.history.error) == (
        0,
        "connect",
    )
    assert service.poller.history_errors["connect"] == 1, "read once per evaluator, not per poll"
    evaluator = service.poller.fleet.evaluator if service.poller.fleet else None
    service.apply(_fleet(url, history_lookback="1h"))
    assert service.poller.fleet is not None and service.poller.fleet.evaluator is evaluator, (
        "the lookback alone rebuilds nothing"
    )
    service.poll_once()
    assert service.poller.history_errors["connect"] == 1
    service.apply(_fleet(url, selector='{job="other"}'))
    assert service.poller.history is None, "a new evaluator: its history is not read yet"
    service.poll_once()
    assert service.poller.history_errors["connect"] == 2


def test_history_lookback_0s_reads_nothing_and_says_so():
    service = Service(_fleet(f"http://127.0.0.1:{free_port()}", history_lookback="0s"), clock=lambda: 1e9)
    service.poll_once()
    assert service.poller.history is not None and (service.poller.history.steps, service.poller.history.queries) == (
        0,
        0,
    )
    assert sum(service.poller.history_errors.values()) == 0
    assert b"specwatch_history_steps 0.0" in service.published.metrics


def test_a_poll_loop_bug_that_recurs_rereads_the_history_at_most_once_an_hour():
    service = Service(_fleet(f"http://127.0.0.1:{free_port()}"), clock=lambda: 1e9)
    service.poll_once()
    assert service.poller.history_errors["connect"] == 1
    for _ in range(8):  # one malformed live sample, every poll: no re-read storm
        service._recover(RuntimeError("a bug in a live poll"))
        service.poll_once()
    assert service.poller.history_errors["connect"] == 1, "read once, not once per recovered poll"
    assert service.poller.history_read_at is not None
    service.poller.history_read_at -= fleet_source.HISTORY_REREAD_SECONDS  # an hour later
    service._recover(RuntimeError("a bug in a live poll"))
    assert service.poller.history is None, "the new evaluator has read nothing yet"
    service.poll_once()
    assert service.poller.history_errors["connect"] == 2, "its learners get the history again"
    assert service.poller.history is not None and service.poller.history.error == "connect"


def test_a_bug_in_the_history_read_is_recovered_once_by_the_poll_loop_and_not_retried(monkeypatch):
    calls, hooked = [], []

    def buggy(*_args: object, **_kwargs: object) -> None:
        calls.append(1)
        raise ValueError("injected history bug")

    monkeypatch.setattr(fleet_source, "read_history", buggy)
    monkeypatch.setattr(threading, "excepthook", hooked.append)
    service = Service(_fleet(f"http://127.0.0.1:{free_port()}"), clock=lambda: 1e9)
    with pytest.raises(ValueError, match="injected history bug"):
        service.poll_once()  # raised in the poll thread, as it was raised in the reader
    assert hooked == [], "nothing goes to threading.excepthook"
    service._recover(ValueError("injected history bug"))
    for _ in range(3):
        _tick(service)
    assert len(calls) == 1, "the rebuilt evaluator does not read again"
    assert service.poll_errors == 1
    assert service.poller.history is None
