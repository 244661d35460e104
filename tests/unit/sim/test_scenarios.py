"""Shipped scenarios load, and their documented verdict crossings are the true ones."""

import json

import pytest

from specwatch.sim import Simulator, crossings, list_scenarios, load_scenario, record

REQUIRED = {"steady", "alpha-drop", "batch-surge", "mixed-routes", "restart", "faults"}


def test_all_required_named_scenarios_ship():
    assert set(list_scenarios()) >= REQUIRED


@pytest.mark.parametrize("name", list_scenarios())
def test_documented_crossings_equal_the_computed_true_crossings(name):
    sc = load_scenario(name)
    doc = sc.expected.get("crossings")
    assert doc is not None, f"{name}: document expected.crossings"
    got = crossings(sc)
    assert [(c["at"], c["route"], c["from"], c["to"]) for c in got] == [
        (float(c["at"]), c["route"], c["from"], c["to"]) for c in doc
    ]


def test_alpha_drop_and_batch_surge_cross_break_even_so_the_verdict_flips():
    for name in ("alpha-drop", "batch-surge"):
        assert any(c["to"] == "disable" for c in crossings(name)), name


def test_mixed_routes_gives_the_lessons_per_route_alphas_and_verdicts():
    sim = Simulator("mixed-routes")
    tr = sim.truth()["routes"]
    assert round(tr["chat"]["alpha"], 6) == 0.7 and round(tr["code"]["alpha"], 6) == 0.4
    assert {k: v["verdict"] for k, v in tr.items()} == load_scenario("mixed-routes").expected["verdicts"]


def test_recording_is_deterministic_and_uses_the_fixed_epoch(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    record("alpha-drop", a, poll_interval=5.0, duration=20.0)
    record("alpha-drop", b, poll_interval=5.0, duration=20.0)
    assert a.read_bytes() == b.read_bytes()
    rows = [json.loads(x) for x in a.read_text().splitlines()]
    assert [r["t"] - rows[0]["t"] for r in rows] == [0.0, 5.0, 10.0, 15.0, 20.0]
    assert {r["target"] for r in rows} == {"vllm"}
    assert "vllm:spec_decode_num_drafts_total" in rows[-1]["text"]


def test_spec_cost_scale_multiplies_the_simulated_fixed_costs_of_speculation_and_nothing_else():
    from specwatch.sim.scenario import ScenarioError, parse_scenario
    from specwatch.sim.steptime import StepTimer

    raw = {
        "name": "scaled",
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "phases": [{"name": "p", "duration": "1m", "concurrency": 8, "acceptance_rate": 0.5}],
    }
    plain = StepTimer(parse_scenario(raw), 1024)
    scaled = StepTimer(parse_scenario({**raw, "spec_cost_scale": 2.0}), 1024)
    cm = plain.cost_model
    fixed = cm.spec_overhead_time(8, 32) + 3 * cm.draft.fixed_seconds  # v + q·B, and p per drafting pass
    assert scaled.plain_step(8) == plain.plain_step(8)
    assert scaled.spec_step(8, 3) - plain.spec_step(8, 3) == pytest.approx(fixed, rel=1e-9)
    with pytest.raises(ScenarioError, match="spec_cost_scale"):
        parse_scenario({**raw, "spec_cost_scale": -1})
