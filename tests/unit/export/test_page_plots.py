"""The page's plots (export/page.py) over its bucketed history (export/page_history.py), and the
words beside them that must not contradict each other, from the simulator through a real Pipeline."""

from __future__ import annotations

import dataclasses
import math
import random
import re
from html import escape

import pytest

from specwatch import sim
from specwatch.export import page as page_mod
from specwatch.export.assumptions import view_assumptions
from specwatch.export.page import BUCKETS, PER_ROUTE, decision_distance, render_page
from specwatch.export.page_history import COLUMNS, PageHistory, Series, buckets_plain, verdict_code, verdict_of
from specwatch.sidecar.pipeline import Pipeline
from support.builders import scenario_config
from support.views import view_of

POLL = 5.0


def _run(name: str, polls: int):
    scenario = sim.load_scenario(name)
    config = scenario_config(scenario, poll_interval=POLL, min_drafts=50, hold=2)
    pipeline, history = Pipeline(config), PageHistory()
    simulator = sim.Simulator(scenario, seed=1)
    for i in range(1, polls + 1):
        t = POLL * i
        simulator.advance_to(t)
        pipeline.ingest("vllm", t, simulator.render(), duration=0.01)
        pipeline.evaluate(t)
        history.record(view_of(pipeline.state(), config))
    return config, pipeline.state(), history


@pytest.fixture(scope="module")
def alpha_drop():
    return _run("alpha-drop", 80)


@pytest.fixture(scope="module")
def mixed_routes():
    return _run("mixed-routes", 30)


def _series(values, times=None):
    series = Series(100_000)
    for i, v in enumerate(values):
        t = times[i] if times is not None else 5.0 * i
        series.add((t, *([v] * (len(COLUMNS) - 1))), replace_last=False)
    return series


def _history_with(series: Series, key=("vllm", "chat", "5m")) -> PageHistory:
    history = PageHistory()
    history._series[key] = series
    return history


# ---- the bucketed read: fast path against the plain one ------------------------------------------
def test_the_bucketed_read_matches_the_plain_one_point_at_a_time_reference():
    for seed in range(200):
        rng = random.Random(seed)
        t, times, values = rng.uniform(0, 10), [], []
        for _ in range(rng.randint(0, 900)):
            t += rng.choice((0.1, 5.0, 5.0, 7.3, 60.0))  # uneven polls, a gap now and then
            times.append(t)
            values.append(math.nan if rng.random() < 0.1 else rng.gauss(0, 1))
        series = _series(values, times)
        t0 = rng.uniform(0, t)
        t1 = t0 + rng.uniform(1, 4000)
        n = rng.randint(1, 250)
        fast = series.buckets("alpha", series.cut(t0, t1, n))
        assert fast == buckets_plain(series.column("alpha"), t0, t1, n), seed


def test_the_bucketed_read_matches_the_reference_with_infinities_and_sums_that_overflow():
    # The fast read finds absent values by a NaN sum: infinities of both signs also sum to NaN (the
    # bucket is read value by value), huge values of one sign sum to infinity (read by min and max).
    specials = (math.inf, -math.inf, 1e308, -1e308, math.nan, 0.0, -0.0, 5e-324)
    for seed in range(300):
        rng = random.Random(seed)
        values = [
            rng.choice(specials) if rng.random() < 0.4 else rng.uniform(-2, 2) for _ in range(rng.randint(1, 300))
        ]
        series = _series(values)
        t1 = 5.0 * len(values)
        n = rng.randint(1, 120)
        fast = series.buckets("alpha", series.cut(0.0, t1, n))
        plain = buckets_plain(series.column("alpha"), 0.0, t1, n)
        # equal as values, and the same sign of zero where a zero is the answer
        assert fast == plain, seed
        assert [tuple(map(repr, b)) for b in fast] == [tuple(map(repr, b)) for b in plain], seed


def test_the_line_points_match_their_plain_drawing():
    for seed in range(300):
        rng = random.Random(seed)
        buckets = []
        for i in sorted(rng.sample(range(BUCKETS + 5), rng.randint(0, BUCKETS))):
            if rng.random() < 0.1:
                buckets.append((i, None, None, None))  # a gap
                continue
            a, b = sorted(rng.uniform(-0.5, 1.5) for _ in range(2))
            if rng.random() < 0.3:
                b = a  # one value in the bucket
            buckets.append((i, a, b, rng.choice((a, b, (a + b) / 2))))
        ymin, ymax = rng.choice(((0.0, 1.0), (0.0, 2.5), (-1.0, 3.0), (0.0, 0.1)))
        assert page_mod._runs(buckets, ymin, ymax) == page_mod.runs_plain(buckets, ymin, ymax), seed


def test_a_plot_draws_at_most_two_points_per_bucket_however_long_the_history():
    counts = {}
    for polls in (60, 360, 720):
        history = _history_with(_series([0.5 + 0.1 * math.sin(i) for i in range(polls)]))
        svg = page_mod.plots(history, ("vllm", "chat", "5m"), POLL)
        points = re.findall(r'<polyline class="alpha" points="([^"]+)"', svg)
        counts[polls] = sum(len(p.split()) for p in points)
    assert all(n <= 2 * BUCKETS for n in counts.values()), counts
    assert counts[60] == 60 and counts[720] < 720, counts  # every point while they fit, min and max past that


def test_a_one_poll_spike_stays_visible_after_downsampling():
    values = [0.5] * 720
    values[400] = 0.95
    svg = page_mod.plots(_history_with(_series(values)), ("vllm", "chat", "5m"), POLL)
    ys = [float(p.split(",")[1]) for run in re.findall(r'class="alpha" points="([^"]+)"', svg) for p in run.split()]
    assert min(ys) == pytest.approx(page_mod._y(0.95, 0.0, 1.0), abs=0.1)  # SVG y grows downwards


def test_an_absent_value_is_a_gap_in_the_line():
    values = [0.5] * 100 + [math.nan] * 30 + [0.6] * 100
    svg = page_mod.plots(_history_with(_series(values)), ("vllm", "chat", "5m"), POLL)
    assert len(re.findall(r'<polyline class="alpha"', svg)) == 2


def test_a_verdict_round_trips_through_its_column_code():
    for verdict in ("keep", "shorten", "disable", "undecided", "spec_off", "insufficient_data"):
        assert verdict_of(verdict_code(verdict)) == verdict
    assert math.isnan(verdict_code(None)) and verdict_of(math.nan) is None


# ---- the new plots -------------------------------------------------------------------------------
def test_the_speedup_plot_draws_its_interval_band_against_a_line_at_one(alpha_drop):
    config, state, history = alpha_drop
    svg = page_mod.plots(history, ("vllm", state.routes[0].route, "5m"), config.poll_interval)
    (speedup_svg,) = [part for part in svg.split("<svg") if "expected speedup and its interval" in part]
    assert re.search(r'<polygon class="band" points="[^"]+"', speedup_svg)
    assert re.search(r'<polyline class="speedup" points="[^"]+"', speedup_svg)
    ref = re.search(r'<line class="ref" x1="\d+" x2="\d+" y1="([\d.]+)"', speedup_svg)
    ymax = float(re.findall(r'text-anchor="end">([\d.]+)×</text>', speedup_svg)[-1])
    assert ref and float(ref.group(1)) == pytest.approx(page_mod._y(1.0, 0.0, ymax), abs=0.1)
    for legend in (">interval<", ">speedup<", ">1×<"):
        assert legend in speedup_svg
    assert re.search(r"<g><title>speedup: now [\d.]+×, min [\d.]+×, max [\d.]+×</title>", speedup_svg)


def test_the_verdict_timeline_shows_each_change_of_verdict_in_order(alpha_drop):
    config, state, history = alpha_drop
    key = ("vllm", state.routes[0].route, "1m")
    svg = page_mod.plots(history, key, config.poll_interval)
    rects = re.findall(
        r'<rect class="s-(\w+)" x="([\d.]+)" y="18" width="[\d.]+" height="16"><title>(\w+)</title>', svg
    )
    assert all(v == title for v, _, title in rects)
    xs = [float(x) for _, x, _ in rects]
    assert xs == sorted(xs)
    polled = [verdict_of(v) or "none" for _, v in history.series(key).column("verdict")]
    changes = [v for i, v in enumerate(polled) if i == 0 or polled[i - 1] != v]
    assert [v for v, _, _ in rects] == changes  # 80 polls on 202 buckets: every poll its own
    assert "keep" in changes and changes[-1] == "disable"  # alpha-drop's story, in the 1 m window


def test_each_plot_has_a_legend_and_the_itl_plot_is_per_token(alpha_drop):
    config, state, history = alpha_drop
    svg = page_mod.plots(history, ("vllm", state.routes[0].route, "5m"), config.poll_interval)
    assert svg.count("<svg") == 4
    assert "inter-token latency per token" in svg
    for legend in (">α<", ">break-even<", ">P99<", ">P50<"):
        assert legend in svg
    verdicts = set(re.findall(r'<rect class="s-(\w+)" x="[\d.]+" y="44"', svg))
    assert verdicts and verdicts == set(re.findall(r'<rect class="s-(\w+)" x="[\d.]+" y="18"', svg))


def test_each_plot_title_names_the_span_its_axis_starts_at(alpha_drop):
    config, state, history = alpha_drop
    svg = page_mod.plots(history, ("vllm", state.routes[0].route, "5m"), config.poll_interval)
    spans = re.findall(r"last (\d+ (?:s|min))\)</title>", svg)
    axes = re.findall(r">−(\d+ (?:s|min))</text>", svg)
    assert len(spans) == 4 and len(axes) == 4 and set(spans) == set(axes) == {"6 min"}  # 80 polls of 5 s, not an hour


# ---- words that must not contradict each other -------------------------------------------------
def test_the_answer_says_how_close_the_decision_is_against_the_line_at_one(alpha_drop):
    assert decision_distance(0.97, 1.05) == (
        "interval straddles 1: lower bound 0.97, needs > 1 to keep; upper bound 1.05, needs < 1 to disable"
    )
    assert decision_distance(1.12, 1.4) == "lower bound 1.12, 0.12 above 1: speculation pays at this confidence"
    assert decision_distance(0.6, 0.92) == "upper bound 0.92, 0.08 below 1: speculation loses at this confidence"
    assert decision_distance(None, 1.2) == ""
    config, state, history = alpha_drop
    html = render_page(view_of(state, config), history, now=0.0).decode()
    e = page_mod._headline(state.routes[0].evaluations, page_mod._chart_window(config))
    assert f"how close: {escape(decision_distance(e.expected_speedup_lower, e.expected_speedup_upper))}" in html


def test_two_routes_at_the_same_batch_and_k_say_their_curves_are_per_route(mixed_routes, alpha_drop):
    config, state, history = mixed_routes
    assert len({r.route for r in state.routes}) == 2
    assert PER_ROUTE in render_page(view_of(state, config), history, now=0.0).decode()
    config, state, history = alpha_drop
    assert PER_ROUTE not in render_page(view_of(state, config), history, now=0.0).decode()


def test_the_model_lines_say_whose_model_they_are(mixed_routes):
    config, state, history = mixed_routes
    html = render_page(view_of(state, config), history, now=0.0).decode()
    assert "model (cost model, every route)" in html
    for route in state.routes:
        assert f"served model_name {route.model_name}" in html


def test_the_step_time_source_is_stated_once_and_never_learned_beside_until_learned(mixed_routes):
    config, state, history = mixed_routes
    view = view_of(state, config)
    basis = view_assumptions(view)
    html = render_page(view, history, now=0.0).decode()
    text = page_mod._step_time_text(basis)
    assert "learned for" not in text and f'<td class="l">{text}</td>' in html
    assert ">source<" not in html  # the cost model's own source is not a second statement of it
    learned = dataclasses.replace(
        basis,
        learning=True,
        routes=(
            dataclasses.replace(basis.routes[0], facts=dataclasses.replace(basis.routes[0].facts, step_time="learned")),
        )
        + basis.routes[1:],
    )
    assert page_mod._step_time_text(learned) == f"learned for chat; {basis.step_time} until learned for the other 1"
    assert "rests on, before any curve is learned:" in page_mod._summary_line(learned)


def test_the_search_cap_reads_as_a_bound_beyond_the_searched_range():
    cap = float(page_mod.MAX_BATCH_LIMIT)
    text = page_mod._max_batch_text(cap)
    assert text.startswith(f"≥ {page_mod.MAX_BATCH_LIMIT} ") and 'title="beyond the searched range' in text
    assert page_mod._max_batch_text(None) == page_mod.DASH and page_mod._max_batch_text(math.nan) == page_mod.DASH
    assert page_mod._max_batch_text(63.0) == "63"


def test_a_window_with_enough_drafts_is_never_told_it_has_too_few(alpha_drop):
    _, state, _ = alpha_drop
    e = state.routes[0].evaluations[0]
    waiting = dataclasses.replace(e, verdict="insufficient_data")
    drafts = int(e.stats.drafts)
    assert "too few" not in page_mod.answer_line(waiting, drafts)
    assert f"{drafts} drafts are enough, an input is missing" in page_mod.answer_line(waiting, drafts)
    assert f"{drafts} drafts of the {drafts + 1} needed" in page_mod.answer_line(waiting, drafts + 1)
