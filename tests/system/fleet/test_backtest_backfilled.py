"""`specwatch backtest` over a Prometheus TSDB backfilled with promtool from simulated recordings
equals `specwatch replay` of the same recordings (within 1 %, verdicts identical).

Two replicas: alpha-drop (verdict changes from keep through undecided to disable) and mixed-routes (two models on
one /metrics). Each is recorded every 5 s straight from the simulator, converted to OpenMetrics
with timestamps (instance and job labels added, as a scrape would), and written into a TSDB with
`promtool tsdb create-blocks-from openmetrics`; a real Prometheus then serves that TSDB.
"""

from __future__ import annotations

import io
import json
import math

import pytest

from specwatch.fleet.backtest import Backtest, backtest_to
from specwatch.sidecar.replay import replay
from support.agreement import PRICED_VALUES, agree
from support.cli import run_cli

from .conftest import POLL, backfilled_config
from .promharness import PROMETHEUS, PROMTOOL

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="prometheus/promtool not installed"),
]

COMPARED = (*PRICED_VALUES, "drafts")


def test_backtest_of_a_backfilled_tsdb_equals_replay_of_the_recording(backfilled) -> None:
    prometheus, recordings = backfilled
    config = backfilled_config(
        {"url": prometheus.url, "selector": '{job="vllm"}', "replica_labels": ["instance"], "scrape_interval": "5s"}
    )
    first = {json.loads(line)["t"] for path in recordings.values() for line in path.read_text().splitlines()}
    start, end = min(first), max(first)
    out = io.StringIO()
    summary = backtest_to(config, start, end, POLL, out)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines[-1] == json.loads(json.dumps(summary)) and summary["summary"] is True
    mine = {
        (line["replica"]["instance"], line["route"], line["window"], round(line["t"], 3)): line
        for line in lines[:-1]
        if line.get("replica")
    }
    replayed = {}
    for instance, path in recordings.items():
        for line in replay(backfilled_config(None), path.read_text().splitlines()):
            replayed[(instance, line["route"], line["window"], round(line["t"], 3))] = line
    assert set(mine) == set(replayed), "the same replicas, routes, windows and times"
    mismatches = [
        (key, name, replayed[key][name], line[name])
        for key, line in mine.items()
        for name in COMPARED
        if not agree(replayed[key][name], line[name])
    ]
    mismatches += [
        (key, "verdict", replayed[key]["verdict"], line["verdict"])
        for key, line in mine.items()
        if replayed[key]["verdict"] != line["verdict"]
    ]
    assert not mismatches, f"{len(mismatches)} disagreements, first: {mismatches[:5]}"
    # The comparison covers the guard and more than one settled verdict (which ones depends on the
    # cost model's calibration).
    seen = {line["verdict"] for line in mine.values()}
    assert "insufficient_data" in seen and len(seen - {"insufficient_data"}) >= 2, seen
    # Keys of a replay line, plus the replica.
    assert set(next(iter(mine.values()))) == set(next(iter(replayed.values()))) | {"replica"}

    fleet_rows = [line for line in lines[:-1] if line.get("replica", "x") is None]
    assert {row["route"] for row in fleet_rows} == {"llama-70b", "chat", "code"}
    one_minute = summary["windows"]["1m"]
    assert math.isclose(sum(one_minute["time_share"].values()), 1.0)
    assert one_minute["verdict_changes"] >= 1  # alpha-drop goes from keep to shorten
    assert one_minute["throughput_gain_if_followed"] > 0  # a shorter draft at the low alpha gains throughput
    assert summary["queries_per_evaluation"] == 3


def test_backtest_splits_a_range_over_the_points_limit_without_changing_the_answer(backfilled) -> None:
    prometheus, recordings = backfilled
    config = backfilled_config({"url": prometheus.url, "selector": '{job="vllm"}'})
    start = min(json.loads(line)["t"] for line in recordings["sim-a:8000"].read_text().splitlines())
    whole = list(Backtest(config).run(start, start + 200, POLL))
    split = Backtest(config, max_points=7)
    assert list(split.run(start, start + 200, POLL)) == whole
    assert split.client.queries == 3 * math.ceil(41 / 7)


def test_the_backtest_command_streams_json_lines_and_exits_2_on_a_badbackfilled_config(backfilled, tmp_path) -> None:
    prometheus, recordings = backfilled
    start = min(json.loads(line)["t"] for line in recordings["sim-a:8000"].read_text().splitlines())
    good = tmp_path / "fleet.yaml"
    good.write_text(
        f"prometheus: {{url: '{prometheus.url}', selector: '{{job=\"vllm\"}}'}}\nwindows: [1m, 5m]\npoll_interval: 5s\n"
    )
    backtest = "specwatch.fleet.backtest"
    done = run_cli(
        "--config", str(good), "--start", str(start + 60), "--end", str(start + 120), module=backtest, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1]["summary"] is True
    assert {line["t"] for line in lines[:-1]} == {start + 60, start + 120}, "default step: the shortest window"
    bad = tmp_path / "bad.yaml"
    bad.write_text("prometheus: {url: 'http://p:9090', timeout: soon}\n")
    done = run_cli("--config", str(bad), "--start", "0", "--end", "60", module=backtest, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "specwatch: config error: prometheus.timeout: expected a duration like 500ms, 5s, 1m or 2h, got 'soon'"
    ]
