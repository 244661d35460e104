"""The page at `/` (export/page.py) and its history (export/page_history.py), from real states.

States come from the real Pipeline fed the simulator's payloads (no I/O), or from a real Service
polling a closed port (a down target); fleet mode's from a FleetState built in-process around
those evaluations (the fleet's own types; fleet_rows as the evaluator builds them).
"""

from __future__ import annotations

import dataclasses
import re
import time
from html import escape as html_escape

import pytest

from specwatch import sim
from specwatch.config import from_mapping
from specwatch.export import page as page_mod
from specwatch.export.page import DASH, MAX_ROUTES, num, render_page
from specwatch.export.page_history import PageHistory, page_order
from specwatch.fleet.rows import fleet_rows
from specwatch.serve.service import Service
from specwatch.sidecar.pipeline import Pipeline
from specwatch.view.fleet import FleetState, ReplicaRouteState
from specwatch.view.routes import RouteRow
from support.builders import OFFLINE_URL, scenario_config, scenario_raw_config
from support.views import view_of

EVIL = '<script>alert("x")</script>'
POLL = 5.0


def _config(scenario: sim.Scenario, url: str = OFFLINE_URL, min_drafts: int = 50, hold: int = 2):
    return scenario_config(scenario, poll_interval=POLL, url=url, min_drafts=min_drafts, hold=hold)


def _run(scenario_name: str, polls: int, *, rename=None, config=None):
    """Feed `polls` polls of the scenario into a real Pipeline, recording every published state
    into a PageHistory as the service does. `rename`: payload text -> text (hostile labels)."""
    scenario = sim.load_scenario(scenario_name)
    config = config or _config(scenario)
    pipeline, history = Pipeline(config), PageHistory()
    simulator = sim.Simulator(scenario, seed=1)
    state = pipeline.state()
    for i in range(1, polls + 1):
        t = POLL * i
        simulator.advance_to(t)
        text = simulator.render()
        pipeline.ingest("vllm", t, rename(text) if rename else text, duration=0.01)
        pipeline.evaluate(t)
        state = pipeline.state()
        history.record(view_of(state))
    return config, state, history


@pytest.fixture(scope="module")
def alpha_drop():
    return _run("alpha-drop", 80)


def _text(page: bytes) -> str:
    """The page's visible text, roughly (tags dropped, entities left)."""
    return re.sub(r"<[^>]+>", " ", page.decode())


def test_the_page_shows_each_windows_verdict_numbers_config_and_plots(alpha_drop):
    config, state, history = alpha_drop
    page = render_page(view_of(state, config), history, now=0.0)
    html = page.decode()
    route = state.routes[0]
    for e in route.evaluations:
        assert f"{e.acceptance_rate:.3f}" in html
        assert f"{e.breakeven_acceptance_rate:.3f}" in html
        assert f"{e.expected_speedup:.2f}×" in html
        assert f"v-{e.verdict}" in html
    assert "remove --speculative-config" in html  # alpha-drop ends in disable
    assert "What the cost model assumed" in html and "h100-sxm" in html
    polylines = re.findall(r'<polyline class="(\w+)" points="([^"]+)"', html)
    assert {cls for cls, _ in polylines} == {"alpha", "breakeven", "speedup", "p50", "p99"}
    assert all(len(points.split()) > 10 for cls, points in polylines if cls == "alpha")
    # Air-gapped: nothing is fetched, no script runs, and the CSP forbids both.
    assert "<script" not in html and "src=" not in html and 'http-equiv="refresh" content="5"' in html
    assert "default-src 'none'" in html
    assert re.findall(r'href="([^"#]+)"', html) == ["/metrics", "/api/v1/status", "/healthz", "/readyz"]


def test_the_plot_draws_alpha_falling_below_break_even(alpha_drop):
    """The picture tells the alpha-drop story: α starts above break-even and ends below it."""
    config, state, history = alpha_drop
    svg = page_mod.plots(history, ("vllm", state.routes[0].route, "5m"), config.poll_interval)

    def ys(cls):
        run = re.findall(rf'<polyline class="{cls}" points="([^"]+)"', svg)[-1].split()
        return [float(p.split(",")[1]) for p in run]  # SVG y grows downwards

    alpha, breakeven = ys("alpha"), ys("breakeven")
    assert alpha[-1] > breakeven[-1]  # below break-even at the end
    assert min(alpha) < min(breakeven)  # above it earlier


def test_a_hostile_model_name_is_escaped_everywhere():
    config, state, history = _run(
        "alpha-drop",
        20,
        rename=lambda t: t.replace('model_name="llama-70b"', 'model_name="' + EVIL.replace('"', '\\"') + '"'),
    )
    assert state.routes and state.routes[0].route == EVIL
    html = render_page(view_of(state, config), history).decode()
    assert "<script" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    # and in fleet mode, where replica label values come from Prometheus
    fleet = _fleet(state, replicas=[(("namespace", "llm"), ("pod", f'a"><img src=x onerror={EVIL}>'))])
    html = render_page(view_of(state, _fleet_config(config), fleet), PageHistory()).decode()
    assert "<script" not in html and "<img" not in html and "onerror=&lt;script" in html


def test_absent_values_are_a_dash_never_zero():
    assert num(None) == DASH and num(float("nan")) == DASH and num(float("inf")) == DASH and num("0.5") == DASH
    assert num(0.0) == "0.000"
    # Two polls: every window is below the sample guard, so no alpha, break-even or speedup yet.
    config, state, history = _run("alpha-drop", 2, config=_config(sim.load_scenario("alpha-drop"), min_drafts=10**9))
    html = render_page(view_of(state, config), history).decode()
    row = re.search(r"<tbody><tr><td class=\"l\">1m</td>(.*?)</tr>", html).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    alpha, breakeven, margin, _, _, speedup = cells[2:8]
    assert alpha == breakeven == margin == speedup == DASH
    assert "0.000" not in html and "0.00×" not in html
    # The plots have nothing to draw where there is nothing (NaN is a gap, not a zero).
    assert 'class="alpha" points' not in html


def test_a_down_target_is_shown_down_with_its_last_error():
    scenario = sim.load_scenario("steady")
    service = Service(_config(scenario, url="http://127.0.0.1:1/metrics"))  # nothing listens on port 1
    try:
        service.poll_once()
        html = service.published.page.decode()
    finally:
        service.stop()
    targets = html.split("<h2>Targets</h2>", 1)[1].split("</table>", 1)[0]
    assert '<span class="down">down</span>' in targets
    assert "<b>connect</b>:" in targets  # the reason, then the message
    assert "connect 1" in targets  # the error counts
    assert "Connection refused" in targets or "refused" in targets.lower()


def test_the_page_is_bounded_in_routes_and_says_how_many_more(alpha_drop):
    config, state, history = alpha_drop
    route = state.routes[0]
    many = tuple(dataclasses.replace(route, route=f"route-{i}") for i in range(MAX_ROUTES + 25))
    big = dataclasses.replace(state, routes=many)
    started = time.perf_counter()
    page = render_page(view_of(big, config), history)
    took = time.perf_counter() - started
    html = page.decode()
    assert html.count('<section class="route"') == MAX_ROUTES
    assert "and 25 more routes not shown" in html
    assert len(page) < 400_000, len(page)
    assert took < 0.5, took


def test_the_history_is_bounded_in_series_and_points():
    history = PageHistory(max_points=100, max_series=3)
    _, state, _ = _run("steady", 30)
    route = state.routes[0]
    for i in range(1000):  # 1000 polls, 3 hours at the given step
        t = 100.0 + i * history.step
        routes = tuple(
            dataclasses.replace(
                route,
                route=f"r{j}",
                evaluations=tuple(
                    dataclasses.replace(e, stats=dataclasses.replace(e.stats, t=t, route=f"r{j}"))
                    for e in route.evaluations
                ),
            )
            for j in range(4)
        )
        history.record(view_of(dataclasses.replace(state, routes=routes, t=t)))
    assert len(history) == 3 and history.dropped_series > 0
    for key in history:
        series = history.series(key)
        assert len(series) <= 100 + 100 // 8
        assert series.column("t")[-1][0] == 100.0 + 999 * history.step
    # A faster poll than the step is thinned: the newest point replaces the last one inside it.
    fast = PageHistory(max_points=10, horizon=100.0)
    for i in range(50):
        t = 1000.0 + i  # 1 s apart, step 10 s
        evaluations = tuple(dataclasses.replace(e, stats=dataclasses.replace(e.stats, t=t)) for e in route.evaluations)
        fast.record(
            view_of(dataclasses.replace(state, routes=(dataclasses.replace(route, evaluations=evaluations),), t=t))
        )
    series = fast.series(next(iter(fast)))
    assert 5 <= len(series) <= 12 and series.last_t() == 1049.0


def test_the_candidate_verdict_is_shown_with_its_hold():
    scenario = sim.load_scenario("alpha-drop")
    raw_hold = _config(scenario, hold=100)  # 100 evaluations: a hold of 99 polls, over 8 minutes
    config, state, history = _run("alpha-drop", 80, config=raw_hold)
    e = next(e for e in state.routes[0].evaluations if e.stats.window == "1m")
    # At batch 160 and alpha 0.8 vLLM's speculation pays (1.37x, clear of 1): keep from the start,
    # and disable waits out its hold after the drop.
    assert e.verdict == "keep" and e.assessment.candidate == "disable"  # still held
    html = render_page(view_of(state, config), history).decode()
    assert re.search(r'v-disable">disable</span> <span class=small>for \d+ (s|min) of a 8 min hold', html)


def _fleet_config(_config=None):
    """Fleet mode's config for the same deployment (as tests/system/e2e/test_dashboard_live.py writes it)."""
    raw = scenario_raw_config("alpha-drop", poll_interval=POLL, min_drafts=50)
    raw.pop("targets")
    raw["prometheus"] = {
        "url": "http://prom.example:9090",
        "selector": '{job="vllm"}',
        "replica_labels": ["namespace", "pod"],
    }
    return from_mapping(raw, environ={})


def _fleet(state, replicas, *, up=True):
    route = state.routes[0]
    routes = tuple(
        ReplicaRouteState(replica, route.route, route.model_name, route.method, False, route.evaluations)
        for replica in replicas
    )
    rows = fleet_rows([(r.replica, e) for r in routes for e in r.evaluations])
    return FleetState(
        ("namespace", "pod"),
        state.t,
        up,
        state.t,
        0.02,
        12,
        3,
        {"timeout": 0, "http_status": 0},
        0,
        0,
        routes,
        rows,
        series=42,
    )


def test_the_fleet_page_shows_each_replica_and_the_fleet_rows(alpha_drop):
    config, state, _ = alpha_drop
    replicas = [(("namespace", "llm"), ("pod", f"vllm-{i}")) for i in range(3)]
    fleet = _fleet(state, replicas)
    history = PageHistory()
    history.record(view_of(state, fleet=fleet))
    html = render_page(view_of(state, _fleet_config(config), fleet), history).decode()
    assert "fleet mode" in html and "Query source" in html and "http://prom.example:9090" in html
    for i in range(3):
        assert f"replica llm/vllm-{i}" in html or f"vllm-{i}" in html
    fleet_table = html.split("<h2>The fleet, per route</h2>", 1)[1].split("</table>", 1)[0]
    assert fleet_table.count("<tr>") == 1 + 2  # head + one row per window
    assert "disable 3" in fleet_table  # three replicas, each disable
    assert html.count('<polyline class="alpha"') >= 3
    # Each replica's section reads as a target's route's does: where, the labels, what it runs.
    sections = re.findall(r'<section class="route" id="r\d+">(.*?)</section>', html)
    assert len(sections) == 3
    meta = re.search(r"<p class=meta>(.*?)</p>", sections[0]).group(1)
    route = state.routes[0]
    assert meta.startswith("replica llm/vllm-0 · namespace llm · pod vllm-0 · engine vllm · ")
    assert f"method {route.method} · K {route.evaluations[0].stats.configured_k} · schema {route.schema}" in meta
    answers = html.split("<h2>The answer, per route</h2>", 1)[1].split("</table>", 1)[0]
    assert [re.sub("<[^>]+>", "", c) for c in re.findall(r"<td class=\"l\">(.*?)</td>", answers)][1::3] == [
        f"llm/vllm-{i}" for i in range(3)
    ]
    # Prometheus down: shown down with its last error reason; no replica served from a failed poll.
    down = dataclasses.replace(fleet, up=False, errors={"timeout": 1, "http_status": 0}, t=fleet.t + 5)
    history.record(view_of(state, fleet=down))
    html = render_page(view_of(state, _fleet_config(config), down), history).decode()
    source = html.split("<h2>Query source</h2>", 1)[1].split("</table>", 1)[0]
    assert '<span class="down">down</span>' in source and "<b>timeout</b>" in source
    assert "replica llm/vllm-0" not in html


def test_the_page_shows_the_loss_probability_beside_the_speedups_interval():
    config, state, history = _run("alpha-drop", 80)
    e = next(e for e in state.routes[0].evaluations if e.stats.window == "1m")
    assert e.loss_probability is not None
    html = render_page(view_of(state, config), history).decode()
    lower, upper = e.expected_speedup_lower, e.expected_speedup_upper
    assert f"({num(lower, '.2f')}–{num(upper, '.2f')}, P(loss) {num(e.loss_probability, '.2f')})" in html


# ---- hostile labels: bidi controls and size ------------------------------------------------------------

PAGE_CAP = 512 * 1024  # the bound docs/architecture.md states (page.MAX_PAGE_BYTES)
#: Every bidi control the page neutralises: the embeddings and overrides, the isolates, the marks.
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"


def _renamed(state, count: int, name):
    """`state` with `count` routes, route i named name(i) (its target and model_name too)."""
    route = state.routes[0]
    routes = tuple(dataclasses.replace(route, route=name(i), target=name(i), model_name=name(i)) for i in range(count))
    return dataclasses.replace(state, routes=routes)


def test_bidi_controls_in_labels_are_shown_as_code_points_never_raw(alpha_drop):
    config, state, history = alpha_drop
    spoof = "llama\u202eexe.3b\u2066admin\u2069\u200f\u061c"
    html = render_page(view_of(_renamed(state, 2, lambda i: f"{spoof}-{i}"), config), history).decode()
    assert not set(html) & set(BIDI), "a raw bidi control reached the page"
    assert "llama[U+202E]exe.3b[U+2066]admin[U+2069][U+200F][U+061C]-0" in html
    # fleet mode: replica label names and values come from Prometheus
    fleet = _fleet(state, replicas=[(("namespace", "llm\u202a"), ("pod\u2067", f"vllm-{c}")) for c in BIDI])
    html = render_page(view_of(state, _fleet_config(config), fleet), PageHistory()).decode()
    assert not set(html) & set(BIDI)
    assert "namespace llm[U+202A]" in html and "pod[U+2067] vllm-[U+202E]" in html


def test_the_page_cap_is_the_documented_one():
    assert page_mod.MAX_PAGE_BYTES == PAGE_CAP


def test_many_long_names_keep_the_page_under_its_byte_cap_with_clipped_names(alpha_drop):
    """The attack: 64 names of 60 kB made a 3.8 MiB page, rendered every poll."""
    config, state, history = alpha_drop
    # Escaping multiplies '"' by six and an emoji is four bytes: the worst bytes per character.
    long = '"<&🙂' * 15_000
    page = render_page(view_of(_renamed(state, 64, lambda i: f"{i}-{long}"), config), history)
    assert len(page) <= PAGE_CAP, len(page)
    html = page.decode()
    clipped = "0-" + html_escape(long[: page_mod.MAX_LABEL_CHARS - 3]) + "…"
    assert clipped in html
    sections = html.count('<section class="route"')
    assert 0 < sections <= MAX_ROUTES
    assert f"and {64 - sections} more routes not shown" in html


def test_route_sections_stop_at_the_byte_cap_and_say_how_many_were_left_out(alpha_drop, monkeypatch):
    """Names are clipped, but many routes of clipped names still add up: sections stop at the cap."""
    config, state, history = alpha_drop
    monkeypatch.setattr(page_mod, "MAX_PAGE_BYTES", 96 * 1024)
    page = render_page(view_of(_renamed(state, 64, lambda i: f"{i}-" + "n" * 500), config), history)
    assert len(page) <= 96 * 1024, len(page)
    html = page.decode()
    sections = html.count('<section class="route"')
    assert 0 < sections < MAX_ROUTES
    assert html.count("<a href=#r") == sections, "the answer table lists the routes that are shown"
    assert f"and {64 - sections} more routes not shown" in html


def test_a_fleet_of_replicas_with_many_long_labels_stays_under_the_byte_cap(alpha_drop):
    config, state, _ = alpha_drop
    long = '"<&🙂' * 500
    replicas = [tuple((f"label{j}-{long}", f"{i}-{j}-{long}") for j in range(40)) for i in range(64)]
    fleet = _fleet(state, replicas)
    page = render_page(view_of(state, _fleet_config(config), fleet), PageHistory())
    assert len(page) <= PAGE_CAP, len(page)
    html = page.decode()
    assert "and 28 more labels" in html
    shown = html.count('<section class="route"')
    assert 0 < shown <= MAX_ROUTES and f"and {64 - shown} more replica-routes not shown" in html


def test_the_page_never_says_too_few_drafts_without_the_count_nor_shows_the_search_cap_as_a_measurement():
    assert page_mod._max_batch_text(float(page_mod.MAX_BATCH_LIMIT)).startswith(f"≥ {page_mod.MAX_BATCH_LIMIT}")
    assert page_mod._max_batch_text(63.0) == "63"
    config, state, history = _run("steady", 3)
    insufficient = [e for r in state.routes for e in r.evaluations if e.verdict == "insufficient_data"]
    for e in insufficient:
        line = page_mod.answer_line(e)
        assert "drafts" in line and "not enough drafts" not in line
    html = render_page(view_of(state, config), history).decode()
    assert "last hour ·" not in html or "up to the last hour" in html


def test_the_page_and_its_history_show_a_routes_rows_side_by_side_and_none_missing_from_the_poll():
    def row(route: str, target: str, current: bool = True) -> RouteRow:
        return RouteRow(route, target, (), "m", "ngram", "v1", "vllm", None, (), current=current)

    rows = [row("a", "t1"), row("b", "t1"), row("a", "t2"), row("c", "t2", current=False), row("b", "t3")]
    assert [(r.route, r.target) for r in page_order(rows)] == [("a", "t1"), ("a", "t2"), ("b", "t1"), ("b", "t3")]
