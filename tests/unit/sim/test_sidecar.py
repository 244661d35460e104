"""The sidecar against every named simulator scenario: it recovers the true alpha and batch, and
its verdict timeline changes when, and only when, the scenario crosses the break-even."""

import json
import subprocess
import sys

import pytest

from specwatch import sim
from specwatch.config import from_mapping
from specwatch.sidecar.replay import replay
from specwatch.sim.sidecar_config import sidecar_config_for

POLL = 5.0
WINDOW = 60.0
HOLD = 2
SCENARIOS = [n for n in sim.list_scenarios() if n != "faults"]


def timeline(name, tmp_path):
    scenario = sim.load_scenario(name)
    path = tmp_path / f"{name}.jsonl"
    sim.record(scenario, str(path), poll_interval=POLL, seed=3)
    config = from_mapping(
        sidecar_config_for(
            scenario,
            target_url="http://127.0.0.1:1/metrics",
            listen="127.0.0.1:0",
            poll_interval=POLL,
            windows=("1m", "5m"),
            hold=HOLD,
        )
    )
    with open(path) as handle:
        records = [r for r in replay(config, handle) if r["window"] == "1m"]
    start = json.loads(path.read_text().split("\n", 1)[0])["t"] - POLL  # sim time 0
    for r in records:
        r["sim_t"] = r["t"] - start
    return scenario, records


def truth_at(scenario, t):
    s = sim.Simulator(scenario, seed=3)
    s.advance_to(t)
    return s.truth()


@pytest.mark.parametrize("name", SCENARIOS)
def test_sidecar_recovers_the_scenarios_alpha_and_batch(name, tmp_path):
    scenario, records = timeline(name, tmp_path)
    checked = 0
    for phase_end in [p.end for p in scenario.phases]:
        t = phase_end - 5.0  # late in each phase: the 1m window holds only this phase
        truth = truth_at(scenario, t)
        if not truth.get("spec_enabled", True):
            continue
        for route, values in truth["routes"].items():
            at = [r for r in records if r["route"] == route and abs(r["sim_t"] - t) <= POLL / 2]
            if not at or at[0]["acceptance_rate"] is None or values.get("ramp"):
                continue
            record = at[0]
            assert record["acceptance_rate"] == pytest.approx(values["alpha"], abs=0.03), (route, t)
            assert record["batch_size"] == pytest.approx(values["batch"], rel=0.10), (route, t)
            assert record["draft_length"] == pytest.approx(values["k"], abs=0.01)
            checked += 1
    assert checked >= 1


def changes(records, route):
    out, previous = [], None
    for r in records:
        if r["route"] != route:
            continue
        if r["verdict"] != previous:
            out.append((r["sim_t"], previous, r["verdict"]))
            previous = r["verdict"]
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_verdict_changes_when_and_only_when_the_scenario_crosses_breakeven(name, tmp_path):
    """Every verdict change lies in a crossing's transition (the 1m window sliding over the change,
    plus the hold, plus the hysteresis band on a slow ramp), and each crossing ends at its verdict."""
    scenario, records = timeline(name, tmp_path)
    crossings = sim.crossings(scenario)
    settle = WINDOW + HOLD * POLL  # the first full window, plus the hold
    transition = WINDOW + HOLD * POLL + 45.0  # 45 s: a slow ramp needs time to cross the margin band
    for route in {r["route"] for r in records}:
        expected = [c for c in crossings if c["route"] == route]
        for t, before, verdict in (c for c in changes(records, route) if c[0] > settle):
            assert any(c["at"] - POLL <= t <= c["at"] + transition for c in expected), (
                f"{name}/{route}: verdict {before} -> {verdict} at {t:.0f}s outside every crossing ({expected})"
            )
        ours = [r for r in records if r["route"] == route]
        for i, c in enumerate(expected):
            # Settled by the end of the transition, or just before the next crossing, or at the end.
            by = min([c["at"] + transition] + [n["at"] - POLL for n in expected[i + 1 :]] + [ours[-1]["sim_t"]])
            settled = [r for r in ours if r["sim_t"] <= by][-1]
            assert settled["verdict"] == c["to"], f"{name}/{route}: {settled['verdict']} at {by:.0f}s, expected {c}"


def test_mixed_routes_are_judged_separately(tmp_path):
    scenario, records = timeline("mixed-routes", tmp_path)
    last = {}
    for r in records:
        last[r["route"]] = r
    assert {route: r["verdict"] for route, r in last.items()} == scenario.expected["verdicts"]
    assert last["chat"]["acceptance_rate"] == pytest.approx(0.7, abs=0.02)
    assert last["code"]["acceptance_rate"] == pytest.approx(0.4, abs=0.02)
    assert last["chat"]["recommended_draft_length"] == 2 and last["code"]["recommended_draft_length"] == 1


def test_demo_runs_for_a_fixed_duration_and_prints_the_table():
    proc = subprocess.run(
        [sys.executable, "-m", "specwatch.cli", "demo", "--duration", "20s", "--refresh", "4s"],
        capture_output=True,
        text=True,
        check=False,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "/metrics" in out and "break-even" in out and "verdict" in out
    rows = [line for line in out.splitlines() if line.startswith("llama-70b")]
    assert rows, out[-2000:]
    assert any(v in out for v in ("keep", "disable", "shorten"))
