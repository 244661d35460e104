"""The page, the status document and /metrics are rendered on their first read from the last
published view, at most once per view, and are the bytes their plain renderings give."""

from __future__ import annotations

import threading

from prometheus_client import generate_latest

from specwatch import sim
from specwatch.export import metrics_text
from specwatch.export.page import render_page
from specwatch.export.status import encode_status
from specwatch.serve.http_server import Rendered
from specwatch.serve.service import Service
from specwatch.sidecar.scrape import ScrapeResult
from support.builders import scenario_config
from support.prom_oracle import plain_text


class _Answer:
    def __init__(self) -> None:
        self.text = ""

    def fetch(self) -> ScrapeResult:
        return ScrapeResult(self.text, 0.001, len(self.text))

    def close(self) -> None:
        return None


def _polled(polls: int = 20) -> Service:
    clock = [0.0]
    service = Service(scenario_config("steady"), clock=lambda: clock[0])
    answer = _Answer()
    service.poller.scrapers["vllm"] = answer  # type: ignore[assignment]
    simulator = sim.Simulator(sim.load_scenario("steady"), seed=1)
    for i in range(1, polls + 1):
        simulator.advance_to(5.0 * i)
        clock[0], answer.text = 5.0 * i, simulator.render()
        service.poll_once()
    return service


def test_rendered_is_rendered_once_on_first_read_even_from_many_threads():
    calls = []
    rendered = Rendered(lambda: calls.append(1) or b"x")
    assert not rendered.rendered and not calls
    threads = [threading.Thread(target=rendered.get) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rendered.get() == b"x" and calls == [1] and rendered.rendered


def test_nothing_is_rendered_for_a_view_nobody_reads_and_each_read_renders_once():
    service = _polled()
    try:
        published = service.published
        for part in ("page", "status", "metrics", "openmetrics"):
            assert not getattr(published, f"rendered_{part}").rendered, part
        assert published.page is published.page  # the same bytes, rendered once
        assert published.rendered_page.rendered and not published.rendered_status.rendered
    finally:
        service.stop()


def test_each_rendering_is_the_plain_rendering_of_the_same_view():
    service = _polled()
    try:
        published = service.published
        view = published.view
        assert published.status == encode_status(view)
        page = published.page  # shows the poll's wall time as "updated"
        plain = render_page(view, service.page_history, now=_shown_time(page))
        assert page == plain
        metrics = published.metrics
        # The families as of the poll, then the process's own (whose values move between readings).
        specwatch_part = metrics.split(b"# HELP process_", 1)[0]
        assert specwatch_part == generate_latest(service.registry)
        assert b"process_resident_memory_bytes" in metrics and b"python_info" in metrics
        assert published.openmetrics.endswith(b"# EOF\n")
    finally:
        service.stop()


def _shown_time(page: bytes) -> float:
    import calendar
    import time

    shown = page.decode().split("updated ", 1)[1].split(" UTC", 1)[0]
    return float(calendar.timegm(time.strptime(shown, "%Y-%m-%d %H:%M:%S")))


def test_a_read_of_an_older_view_after_a_newer_poll_gets_the_newer_page():
    service = _polled()
    try:
        older = service.published
        simulator = sim.Simulator(sim.load_scenario("steady"), seed=2)
        simulator.advance_to(200.0)
        service.poller.scrapers["vllm"].text = simulator.render()  # type: ignore[attr-defined]
        service.poll_once()
        assert older.page == service.published.page
    finally:
        service.stop()


def test_the_fast_metrics_path_serves_the_same_bytes_as_prometheus_client():
    service = _polled()
    try:
        families = metrics_text.collect(service.registry)
        assert metrics_text.render_text(families) == plain_text(families)
    finally:
        service.stop()


def test_the_views_families_are_built_at_the_first_read_of_metrics_not_at_the_poll(monkeypatch):
    from specwatch.export import collector

    built = []
    original = collector.SpecwatchCollector.collect

    def counted(self):
        built.append(1)
        return original(self)

    monkeypatch.setattr(collector.SpecwatchCollector, "collect", counted)
    service = _polled(polls=3)
    try:
        assert built == []  # three polls, nobody scraping
        published = service.published
        text, openmetrics = published.metrics, published.openmetrics
        assert built == [1]  # once for both formats
        specwatch_part = text.split(b"# HELP process_", 1)[0]
        assert specwatch_part == generate_latest(service.registry)
        assert openmetrics.endswith(b"# EOF\n")
    finally:
        service.stop()


def test_live_families_hold_the_polls_values_when_metrics_is_read_later():
    service = _polled(polls=3)
    try:
        published = service.published
        service.poll_errors += 7  # after the poll: the poll's published /metrics must not show it
        assert b"specwatch_poll_errors_total 0.0\n" in published.metrics
        service.poll_once()
        assert b"specwatch_poll_errors_total 7.0\n" in service.published.metrics
    finally:
        service.stop()
