"""Bounds on everything a scraped payload controls (docs/architecture.md §2, Bounds).

A payload past a bound is either rejected as a whole (`invalid`, the windows kept exactly) or its
excess is dropped and counted in specwatch_payload_dropped_total. Every assertion is on counts
(routes, engines, series kept, bytes allocated), never on time, so none depends on machine speed.
"""

from __future__ import annotations

import itertools
import re
import tracemalloc

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specwatch import sim
from specwatch.config import from_mapping
from specwatch.engines.grouping import (
    MAX_DRAFT_POSITIONS,
    MAX_ENGINES_PER_ROUTE,
    MAX_ROUTES_PER_TARGET,
    PLACEMENT_CACHE_SIZE,
    POSITION_SLACK,
    Grouping,
    position_limit,
)
from specwatch.engines.registry import FAMILIES
from specwatch.export.collector import registry_for
from specwatch.exposition import SERIES_CACHE_SIZE, Selector
from specwatch.exposition.samples import SERIES_CACHE_CHARS
from specwatch.sidecar.pipeline import Pipeline
from support.builders import scenario_raw_config
from support.vllm_payloads import FakeVllm

TARGET = "vllm"
POLL = 5.0
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def plain_pipeline(**overrides) -> Pipeline:
    raw = {"poll_interval": "5s", "windows": ["1m"], "log": {"level": "warning"}, **overrides}
    return Pipeline(from_mapping(raw, environ={}))


def with_position(text: str, position: str) -> str:
    """`text` with one more per-position series (engine 0's labels) at `position`."""
    first = next(line for line in text.splitlines() if line.startswith(PER_POS + "{"))
    extra = re.sub(r'position="[^"]*"', f'position="{position}"', first).rsplit(" ", 1)[0] + " 0.0"
    return text.replace(first + "\n", first + "\n" + extra + "\n", 1)


def busy_vllm(k: int = 4) -> FakeVllm:
    vllm = FakeVllm(k=k)
    for _ in range(50):
        vllm.step(0, batch=4, accepted_per_request=[3, 1, 4, 2], itl_seconds=0.02)
    return vllm


def window_state(pipeline: Pipeline):
    return {
        name: (len(r.window.entries), tuple(sorted(r.window.totals.items())), r.window.latest)
        for name, r in sorted(pipeline._routes.items())
    }


def render_metrics(pipeline: Pipeline) -> str:
    return generate_latest(registry_for(pipeline.view)).decode()


# -- position ---------------------------------------------------------------------------------


@pytest.mark.parametrize("position", ["1000", "1000000", str(10**20)])
def test_a_position_far_past_any_k_rejects_the_payload_without_allocating_per_position(position):
    pipeline = plain_pipeline()
    vllm = busy_vllm()
    for i in range(1, 4):
        assert pipeline.ingest(TARGET, POLL * i, vllm.text()).ok
        vllm.step(0, batch=4, accepted_per_request=[3, 1], itl_seconds=0.02)
    pipeline.evaluate(POLL * 3)
    before = window_state(pipeline)

    tracemalloc.start()
    try:
        result = pipeline.ingest(TARGET, POLL * 4, with_position(vllm.text(), position))
        pipeline.evaluate(POLL * 4)
        render_metrics(pipeline)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert not result.ok and result.reason == "invalid"
    assert "position" in (result.message or "")
    assert peak < 8 << 20  # a poll's own work; one allocation per position would be ≥ 8 bytes × position
    assert window_state(pipeline) == before  # last good state kept
    state = pipeline.state()
    assert state.targets[0].errors["invalid"] == 1
    assert state.targets[0].up is False
    assert [r.configured_k for r in state.routes] == [4]
    # The next good poll is read as ever.
    assert pipeline.ingest(TARGET, POLL * 5, vllm.text()).ok
    assert [r.configured_k for r in pipeline.state().routes] == [4]


def test_the_position_limit_without_a_stated_k_is_vllm_scale():
    assert position_limit(None) == MAX_DRAFT_POSITIONS == 64
    text = busy_vllm().text()
    ok = Grouping().parse(with_position(text, str(MAX_DRAFT_POSITIONS - 1)), t=1.0, target=TARGET)
    assert [s.configured_k for s in ok] == [MAX_DRAFT_POSITIONS]
    for bad in (str(MAX_DRAFT_POSITIONS), "-1"):
        assert not plain_pipeline().ingest(TARGET, 1.0, with_position(text, bad)).ok
    # A position that is not an integer names no draft position: skipped, as before.
    assert [s.configured_k for s in Grouping().parse(with_position(text, "x"), t=1.0, target=TARGET)] == [4]


@pytest.mark.parametrize(
    "draft",
    [
        {"k": 4},
        {"config": {"method": "eagle3", "num_speculative_tokens": 4}},
        {"k": 2, "config": {"num_speculative_tokens": 4}},
    ],
)
def test_a_stated_k_bounds_the_positions_to_k_plus_slack(draft):
    pipeline = plain_pipeline(draft=draft)
    assert pipeline.position_limit() == 4 + POSITION_SLACK
    text = busy_vllm().text()
    assert pipeline.ingest(TARGET, 1.0, with_position(text, str(4 + POSITION_SLACK - 1))).ok
    result = pipeline.ingest(TARGET, 2.0, with_position(text, str(4 + POSITION_SLACK)))
    assert not result.ok and result.reason == "invalid"


def test_a_reloaded_config_moves_the_position_limit():
    pipeline = plain_pipeline(draft={"k": 4})
    text = with_position(busy_vllm().text(), "20")
    assert not pipeline.ingest(TARGET, 1.0, text).ok
    pipeline.config = from_mapping({"poll_interval": "5s", "windows": ["1m"]}, environ={})
    assert pipeline.ingest(TARGET, 2.0, text).ok  # the same series, now within the limit (64)


def test_polls_with_a_huge_position_leave_the_verdicts_of_polls_that_failed():
    """The measured problem: position="1000" read as K = 1001 flipped keep -> shorten. Now such a
    poll is rejected, and the verdicts are exactly those of a run where the same polls failed."""
    scenario = sim.load_scenario("steady")
    raw = scenario_raw_config(scenario, poll_interval=POLL, windows=("1m",))
    hostile, control = Pipeline(from_mapping(raw, environ={})), Pipeline(from_mapping(raw, environ={}))
    simulator = sim.Simulator(scenario, seed=1)
    seen: list[tuple[object, object]] = []
    for i in range(1, 50):
        t = POLL * i
        simulator.advance_to(t)
        text = simulator.render()
        if i >= 30 and i % 3 == 0:
            assert not hostile.ingest(TARGET, t, with_position(text, "1000")).ok
            control.ingest_error(TARGET, t, "invalid")
        else:
            assert hostile.ingest(TARGET, t, text).ok
            assert control.ingest(TARGET, t, text).ok
        hostile.evaluate(t)
        control.evaluate(t)
        a, b = (
            {n: {w: v.current for w, v in r.verdicts.items()} for n, r in p._routes.items()} for p in (hostile, control)
        )
        seen.append((a, b))
    assert all(a == b for a, b in seen)
    assert seen[-1][0] == {scenario.model_names[0]: {"1m": "keep"}}
    assert hostile.state().targets[0].errors == control.state().targets[0].errors


# -- routes -------------------------------------------------------------------------------------


def many_models(names: list[str], value: float = 1.0) -> str:
    lines = ["# TYPE vllm:spec_decode_num_drafts counter"]
    lines += [f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{n}"}} {value}' for n in names]
    return "\n".join(lines) + "\n"


def route_info_count(text: str) -> int:
    return sum(len(f.samples) for f in text_string_to_metric_families(text) if f.name == "specwatch_route_info")


def test_4000_model_names_in_one_payload_keep_64_routes_and_count_the_rest():
    pipeline = plain_pipeline()
    names = [f"model-{i:04d}" for i in range(4000)]
    for i in range(1, 4):
        result = pipeline.ingest(TARGET, POLL * i, many_models(names, float(i)))
        assert result.ok
        assert len(result.routes) == MAX_ROUTES_PER_TARGET
        assert result.dropped == {"routes": 4000 - MAX_ROUTES_PER_TARGET, "engines": 0}
    pipeline.evaluate(POLL * 3)
    assert sorted(pipeline._routes) == names[:MAX_ROUTES_PER_TARGET]  # the first ones, in payload order
    assert pipeline.state().targets[0].dropped == {"routes": 3 * (4000 - MAX_ROUTES_PER_TARGET), "engines": 0}
    metrics = render_metrics(pipeline)
    assert route_info_count(metrics) == MAX_ROUTES_PER_TARGET
    dropped = re.findall(r'specwatch_payload_dropped_total\{limit="routes",target="vllm"\} (\S+)', metrics)
    assert dropped == [f"{3 * (4000 - MAX_ROUTES_PER_TARGET)}.0"]


def test_new_model_names_every_poll_never_hold_more_than_64_routes():
    pipeline = plain_pipeline()
    grouping = pipeline._targets[TARGET].grouping
    for poll in range(1, 16):
        names = [f"p{poll}-m{i}" for i in range(4000)]
        assert pipeline.ingest(TARGET, POLL * poll, many_models(names)).ok
        pipeline.evaluate(POLL * poll)
        assert len(pipeline._routes) == MAX_ROUTES_PER_TARGET
        assert sorted(pipeline._routes) == sorted(names[:MAX_ROUTES_PER_TARGET])  # this poll's routes win
        assert len(grouping._placements) <= PLACEMENT_CACHE_SIZE
        assert len(grouping.selector._series) <= SERIES_CACHE_SIZE
    assert route_info_count(render_metrics(pipeline)) == MAX_ROUTES_PER_TARGET


def test_configured_routes_are_not_capped_by_the_payload_bound():
    routes = [{"name": f"r{i}", "match": {"model_name": f"m{i}"}} for i in range(MAX_ROUTES_PER_TARGET + 6)]
    pipeline = plain_pipeline(routes=routes)
    result = pipeline.ingest(TARGET, 1.0, many_models([f"m{i}" for i in range(MAX_ROUTES_PER_TARGET + 6)]))
    assert result.ok and len(result.routes) == MAX_ROUTES_PER_TARGET + 6 and result.dropped["routes"] == 0


# -- engines ------------------------------------------------------------------------------------


def engines_payload(engines: list[str], value: float) -> str:
    lines = []
    for family in ("drafts", "draft_tokens", "accepted_tokens"):
        lines.append(f"# TYPE vllm:spec_decode_num_{family} counter")
        scale = {"drafts": 1.0, "draft_tokens": 4.0, "accepted_tokens": 2.0}[family]
        lines += [
            f'vllm:spec_decode_num_{family}_total{{engine="{e}",model_name="m"}} {value * scale}' for e in engines
        ]
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter")
    for e in engines:
        lines += [f'{PER_POS}{{engine="{e}",model_name="m",position="{p}"}} {value / (p + 1)}' for p in range(4)]
    return "\n".join(lines) + "\n"


def test_more_engines_than_the_bound_in_one_payload_are_dropped_and_counted():
    pipeline = plain_pipeline()
    engines = [str(i) for i in range(100)]
    result = pipeline.ingest(TARGET, 1.0, engines_payload(engines, 10.0))
    assert result.ok and result.dropped == {"routes": 0, "engines": 100 - MAX_ENGINES_PER_ROUTE}
    (route,) = pipeline._routes.values()
    assert route.window.latest is not None
    kept = {f"{e}/m" for e in engines[:MAX_ENGINES_PER_ROUTE]}  # series ids: engine/model_name
    assert set(route.window.latest.engines) == kept
    assert {key.series for key in route.window.totals} == kept


def test_engine_ids_that_never_repeat_are_forgotten_and_the_exported_mirrors_never_go_down():
    pipeline = plain_pipeline()
    mirrored: list[float] = []
    for poll in range(1, 61):
        engines = [f"e{poll}-{j}" for j in range(4)]  # four new engines every poll, each seen once
        assert pipeline.ingest(TARGET, POLL * poll, engines_payload(engines, float(poll))).ok
        pipeline.evaluate(POLL * poll)
        (route,) = pipeline._routes.values()
        window = route.window
        remembered = {key.series for key in window.totals}
        assert len(remembered) <= MAX_ENGINES_PER_ROUTE
        assert {f"{e}/m" for e in engines} <= remembered  # the current ones are never forgotten
        assert len({k.series for k in window._created}) <= MAX_ENGINES_PER_ROUTE
        assert len(window._le_sets) <= MAX_ENGINES_PER_ROUTE
        assert len(route.series_order) <= MAX_ENGINES_PER_ROUTE
        assert len(window._mirror_keys) <= 16 * MAX_ENGINES_PER_ROUTE  # each remembered series once
        assert len(window.mirror) <= 64  # the route mirror: one per (counter, position or bound)
        (state,) = pipeline.state().routes
        mirrored.append(state.mirrored["drafts"])
    # The oldest engines expired first.
    assert not any(key.series.startswith("e1-") for key in pipeline._routes["m"].window.totals)
    assert all(b >= a for a, b in itertools.pairwise(mirrored))


def test_a_forgotten_engine_that_comes_back_counts_from_its_return():
    pipeline = plain_pipeline()
    assert pipeline.ingest(TARGET, POLL, engines_payload(["back"], 100.0)).ok
    for poll in range(2, 2 + MAX_ENGINES_PER_ROUTE + 2):
        assert pipeline.ingest(TARGET, POLL * poll, engines_payload([f"x{poll}"], 1.0)).ok
    window = pipeline._routes["m"].window
    assert not any(key.series == "back/m" for key in window.totals)
    t = POLL * (MAX_ENGINES_PER_ROUTE + 4)
    assert pipeline.ingest(TARGET, t, engines_payload(["back"], 150.0)).ok
    assert pipeline.ingest(TARGET, t + POLL, engines_payload(["back"], 160.0)).ok
    drafts = [v for k, v in window.totals.items() if k.series == "back/m" and k.counter == "drafts"]
    assert drafts == [10.0]  # first sighting adds 0, then 160 - 150


# -- histogram bounds ---------------------------------------------------------------------------


def with_bucket(text: str, le: str) -> str:
    """`text` with one more ITL bucket (engine 0's labels) at `le`, before its first bucket."""
    first = next(line for line in text.splitlines() if line.startswith("vllm:inter_token_latency_seconds_bucket{"))
    extra = re.sub(r'le="[^"]*"', f'le="{le}"', first).rsplit(" ", 1)[0] + " 0.0"
    return text.replace(first + "\n", extra + "\n" + first + "\n", 1)


def test_a_minus_inf_bucket_is_dropped_and_no_second_plus_inf_is_exported():
    pipeline = plain_pipeline()
    vllm = busy_vllm()
    for i in range(1, 4):
        assert pipeline.ingest(TARGET, POLL * i, with_bucket(vllm.text(), "-Inf")).ok
        vllm.step(0, batch=4, accepted_per_request=[3, 1], itl_seconds=0.02)
    pipeline.evaluate(POLL * 3)
    metrics = render_metrics(pipeline)
    les = [
        s.labels["le"]
        for f in text_string_to_metric_families(metrics)
        for s in f.samples
        if s.name == "specwatch_itl_seconds_bucket"
    ]
    assert les.count("+Inf") == 1
    assert len(les) == len(set(les))
    assert "-Inf" not in les


@pytest.mark.parametrize(("le", "twin"), [("0.01", "0.010"), ("+Inf", "Inf")])
def test_two_buckets_with_the_same_bound_are_invalid(le, twin):
    # The same bucket twice under two spellings (same value): one series each for the parser, one
    # bound for the histogram, so it would be summed twice into the exported bucket.
    text = busy_vllm().text()
    line = next(
        x for x in text.splitlines() if x.startswith("vllm:inter_token_latency_seconds_bucket{") and f'le="{le}"' in x
    )
    result = plain_pipeline().ingest(
        TARGET, 1.0, text.replace(line, line + "\n" + line.replace(f'le="{le}"', f'le="{twin}"'), 1)
    )
    assert not result.ok and result.reason == "invalid"
    assert "two buckets" in (result.message or "")


# -- label sizes --------------------------------------------------------------------------------


def test_ever_new_long_series_texts_do_not_pile_up_in_the_parser():
    selector = Selector(FAMILIES)
    value = "v" * 4000
    for poll in range(6):
        lines = ["# TYPE vllm:spec_decode_num_drafts counter"]
        for i in range(8):
            labels = ",".join(f'l{j}="{value}"' for j in range(60))
            lines.append(f'vllm:spec_decode_num_drafts_total{{engine="{poll}-{i}",{labels}}} 1.0')
        selector.parse("\n".join(lines) + "\n")
        assert sum(map(len, selector._series)) <= SERIES_CACHE_CHARS
        assert sum(len(str(key)) for key in selector._keys) <= 3 * SERIES_CACHE_CHARS
