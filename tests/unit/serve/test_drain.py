"""The sidecar's drain after SIGTERM (serve/drain.py): which answers say vLLM has gone, how fast it
polls meanwhile, and a default cap that fits Kubernetes' default grace period. The whole process
(signals, exit times) is tests/system/reliability/test_drain.py; the chart's side is
tests/deploy/test_helm_chart.py."""

from __future__ import annotations

import pytest

from specwatch.config import Config, from_mapping
from specwatch.serve.drain import DEFAULT_SHUTDOWN_DRAIN, DRAIN_POLL_INTERVAL, STOP_MARGIN, Drain
from specwatch.serve.service import Service
from specwatch.sidecar.scrape import ScrapeError, ScrapeResult
from support.paths import fixture_path

PAYLOAD = (fixture_path("vllm-cpu-real") / "003.prom").read_text()
KUBERNETES_DEFAULT_GRACE = 30.0


class FakeScraper:
    """Answers each fetch from a script: a body (str) or a ScrapeError reason (ScrapeError)."""

    def __init__(self, answer: str | ScrapeError):
        self.answer = answer

    def fetch(self) -> ScrapeResult:
        if isinstance(self.answer, ScrapeError):
            raise self.answer
        return ScrapeResult(self.answer, 0.001, len(self.answer))

    def close(self) -> None:
        pass


def _service(*names: str) -> Service:
    targets = [{"name": n, "url": f"http://127.0.0.1:9/{n}/metrics"} for n in names or ("vllm",)]
    service = Service(from_mapping({"poll_interval": "5s", "targets": targets}, environ={}))
    for name in service.poller.scrapers:
        service.poller.scrapers[name] = FakeScraper(PAYLOAD)  # type: ignore[assignment]
    return service


def test_the_default_cap_ends_before_kubernetes_default_grace_period_with_the_stop_margin():
    assert Config().shutdown_drain == DEFAULT_SHUTDOWN_DRAIN == from_mapping({}, environ={}).shutdown_drain
    assert Config().shutdown_drain + STOP_MARGIN <= KUBERNETES_DEFAULT_GRACE
    assert STOP_MARGIN >= 3.0  # the stop after the cap: the last poll's thread is given 1.5 s


@pytest.mark.parametrize("reason", ["connect", "http_status", "tls", "too_large", "invalid", "parse"])
def test_the_first_refused_connection_or_non_metrics_answer_ends_a_target(reason):
    drain = Drain()
    drain.begin()
    drain.note("vllm", None)
    assert not drain.check(["vllm"])
    drain.note("vllm", reason)
    assert drain.check(["vllm"]) and drain.done.is_set()
    assert drain.ended == {"vllm": reason}


def test_one_timeout_is_vllm_busy_two_in_a_row_are_gone():
    drain = Drain()
    drain.begin()
    drain.note("vllm", "timeout")
    drain.note("vllm", None)  # answered again: the count starts afresh
    drain.note("vllm", "timeout")
    assert not drain.check(["vllm"])
    drain.note("vllm", "timeout")
    assert drain.check(["vllm"]) and drain.ended == {"vllm": "timeout"}


def test_nothing_ends_before_sigterm_and_every_target_must_end():
    drain = Drain()
    drain.note("a", "connect")  # before SIGTERM: a failed poll is only a failed poll
    assert not drain.check(["a"]) and drain.ended == {}
    drain.begin()
    drain.note("a", "connect")
    drain.note("a", None)  # ended stays ended: the first refusal counts
    assert not drain.check(["a", "b"])
    drain.note("b", "parse")
    assert drain.check(["a", "b"])


def test_it_polls_every_half_second_while_draining_or_faster_if_configured():
    assert DRAIN_POLL_INTERVAL == 0.5
    assert Drain.interval(5.0) == 0.5
    assert Drain.interval(0.2) == 0.2


def test_a_poll_after_sigterm_notes_a_refused_target_and_a_200_non_metrics_page():
    service = _service("a", "b", "c")
    service.poll_once()  # before SIGTERM: noted nowhere
    assert service.drain.ended == {}
    service.drain.begin()
    service.poll_once()
    assert service.drain.ended == {} and not service.drain.check(["a", "b", "c"])
    service.poller.scrapers["a"].answer = ScrapeError("connect", "cannot connect: ConnectionRefusedError")  # type: ignore[attr-defined]
    service.poller.scrapers["b"].answer = "<!doctype html><html><body>502 Bad Gateway</body></html>\n"  # type: ignore[attr-defined]
    service.poll_once()
    assert service.drain.ended == {"a": "connect", "b": "parse"}
    assert not service.drain.check(["a", "b", "c"])  # c still answers with metrics: keep polling
    service.poller.scrapers["c"].answer = ScrapeError("http_status", "HTTP 503")  # type: ignore[attr-defined]
    service.poll_once()
    assert service.drain.check(t.name for t in service.config.targets)
    service.stop()
