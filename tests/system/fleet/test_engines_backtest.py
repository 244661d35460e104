"""Fleet mode reads every counter engine through the same engine layer as the sidecar: each
engine's fixture polls, stored in a real Prometheus (promtool backfill, as a scrape would store
them), give in `specwatch backtest` what `specwatch replay` gives of the same polls."""

from __future__ import annotations

import io
import json
import math

import pytest

from specwatch import config as config_mod
from specwatch.fleet.backtest import backtest_to
from specwatch.sidecar.replay import replay
from support.engine_fixtures import fixture, polls
from support.paths import FIXTURES

from .promharness import PROMETHEUS, PROMTOOL, serve_backfilled

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="prometheus/promtool not installed"),
]

T0, T1 = 1_796_058_000.0, 1_796_058_030.0
PREFIXES = {"llamacpp": "llamacpp:", "lmdeploy": "lmdeploy:", "ray-vllm": "ray_vllm_"}
COMPARED = ("acceptance_rate", "mean_acceptance_length", "draft_length", "batch_size", "itl_p50_seconds", "drafts")


def _config(prometheus: dict[str, object] | None) -> config_mod.Config:
    return config_mod.from_mapping(
        {"windows": ["1m"], "poll_interval": "30s", "decision": {"min_drafts": 10}, "prometheus": prometheus},
        environ={},
    )


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory):
    """A Prometheus holding each engine's two fixture polls, one instance per engine."""
    work = tmp_path_factory.mktemp("engines")
    recordings = {}
    for engine in PREFIXES:
        path = work / f"{engine}.jsonl"
        path.write_text(
            "".join(
                json.dumps(
                    {"t": t, "target": "vllm", "text": (FIXTURES / "engines" / engine / f"{name}.prom").read_text()}
                )
                + "\n"
                for t, name in ((T0, "before"), (T1, "after"))
            )
        )
        recordings[engine] = path
    prometheus = serve_backfilled(
        work, [(recordings[engine], {"instance": engine, "job": "llm"}, prefix) for engine, prefix in PREFIXES.items()]
    )
    try:
        yield prometheus, recordings
    finally:
        prometheus.stop()


@pytest.mark.parametrize("engine", sorted(PREFIXES))
def test_backtest_of_each_engine_equals_its_replay(stored, engine) -> None:
    prometheus, recordings = stored
    config = _config(
        {"url": prometheus.url, "selector": '{job="llm"}', "replica_labels": ["instance"], "scrape_interval": "30s"}
    )
    out = io.StringIO()
    backtest_to(config, T1, T1, 30.0, out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    mine = next(r for r in rows if (r.get("replica") or {}).get("instance") == engine)
    replayed = list(replay(_config(None), recordings[engine].read_text().splitlines()))[-1]
    for name in COMPARED:
        a, b = replayed[name], mine[name]
        assert (a is None and b is None) or math.isclose(a, b, rel_tol=1e-9), (name, a, b)
    assert mine["acceptance_rate"] == pytest.approx(0.65)


# -- load sequences: SGLang (acceptance from gauges) and TensorRT-LLM (per-position counters) ------
LOADS = {"sglang": "sglang:", "trtllm": "trtllm_"}
FIXTURE_T0 = 1000.0  # the fixtures' first poll
SHIFT = T0 - FIXTURE_T0  # stored near now: Prometheus keeps recent blocks only
GAUGE_ONLY_ABSENT = ("itl_p50_seconds", "itl_p99_seconds")


def _load_config(prometheus: dict[str, object] | None) -> config_mod.Config:
    return config_mod.from_mapping(
        {
            "windows": ["30s"],
            "poll_interval": "5s",
            "decision": {"min_drafts": 100, "hold": 1},
            "prometheus": prometheus,
        },
        environ={},
    )


@pytest.fixture(scope="module")
def stored_loads(tmp_path_factory: pytest.TempPathFactory):
    """A Prometheus holding each load sequence's polls at 5 s scrapes, one instance per engine."""
    work = tmp_path_factory.mktemp("loads")
    recordings = {}
    for engine in LOADS:
        path = work / f"{engine}.jsonl"
        path.write_text(
            "".join(
                json.dumps({"t": t + SHIFT, "target": "vllm", "text": body}) + "\n"
                for t, body in polls(fixture(engine, "eagle3-load.prom"))
            )
        )
        recordings[engine] = path
    prometheus = serve_backfilled(
        work, [(recordings[engine], {"instance": engine, "job": "llm"}, prefix) for engine, prefix in LOADS.items()]
    )
    try:
        yield prometheus, recordings
    finally:
        prometheus.stop()


def _backtest(stored_loads, engine: str) -> tuple[dict[float, dict], list[dict]]:
    """The replay records of an engine's recording by time, and the backtest's rows from its third poll on."""
    prometheus, recordings = stored_loads
    config = _load_config(
        {"url": prometheus.url, "selector": '{job="llm"}', "replica_labels": ["instance"], "scrape_interval": "5s"}
    )
    replayed = {r["t"]: r for r in replay(_load_config(None), recordings[engine].read_text().splitlines())}
    out = io.StringIO()
    backtest_to(config, FIXTURE_T0 + SHIFT + 10.0, max(replayed), 5.0, out)  # partial windows too
    return replayed, [json.loads(line) for line in out.getvalue().splitlines()]


def _both(stored_loads, engine: str) -> list[tuple[dict, dict]]:
    """(replay record, backtest record) at every poll from the third on."""
    replayed, rows = _backtest(stored_loads, engine)
    mine = {r["t"]: r for r in rows if (r.get("replica") or {}).get("instance") == engine}
    assert mine, "the backtest found no route of this engine"
    return [(replayed[t], mine[t]) for t in sorted(mine)]


@pytest.mark.parametrize("engine", sorted(LOADS))
def test_backtest_of_a_load_sequence_equals_its_replay_at_every_step(stored_loads, engine) -> None:
    pairs = _both(stored_loads, engine)
    assert len(pairs) >= 3
    for replayed, mine in pairs:
        for name in (*COMPARED, "acceptance_basis", "verdict"):
            a, b = replayed.get(name), mine.get(name)
            if isinstance(a, float) and isinstance(b, float):
                assert math.isclose(a, b, rel_tol=1e-9), (replayed["t"], name, a, b)
            else:
                assert a == b, (replayed["t"], name, a, b)
    assert any(mine["acceptance_rate"] is not None for _, mine in pairs)  # acceptance is read, not absent


def test_sglang_backtest_reads_its_gauge_means_and_invents_nothing(stored_loads) -> None:
    pairs = _both(stored_loads, "sglang")
    read = [mine for _, mine in pairs if mine["acceptance_rate"] is not None]
    assert read and all(mine["acceptance_basis"] == "engine_gauge_mean" for mine in read)
    for _, mine in pairs:
        for name in GAUGE_ONLY_ABSENT:
            assert mine[name] is None, name
    idle = pairs[-1][1]  # every scrape of the last window after the load stopped: gauges held
    assert idle["acceptance_rate"] is None and idle["batch_size"] is None
    assert idle["verdict"] == "insufficient_data"


def test_the_fleet_row_of_a_gauge_only_engine_has_no_token_weighted_acceptance(stored_loads) -> None:
    _, rows = _backtest(stored_loads, "sglang")
    fleet = [r for r in rows if r.get("replica") is None and r.get("route") == "qwen3-8b"]
    assert fleet and all(r["acceptance_rate"] is None for r in fleet)  # no token counts to weigh
    # its replicas' verdicts are still counted (keep, or undecided where the interval reaches 1)
    assert any(r["verdicts"]["keep"] or r["verdicts"].get("undecided") for r in fleet)
