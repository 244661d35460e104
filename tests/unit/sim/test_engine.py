"""The decode simulation moves counters by vLLM's rules and recovers its configured truth."""

import itertools
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.sim import Simulator, load_scenario, record
from specwatch.sim.scenario import parse_scenario


def small(**over):
    base = {
        "name": "t",
        "model": "llama-3.1-8b",
        "num_speculative_tokens": 4,
        "prompt_tokens": 256,
        "output_tokens": 128,
        "routes": [{"model_name": "m"}],
        "phases": [{"name": "p", "duration": "120s", "concurrency": 16, "acceptance": [0.9, 0.7, 0.5, 0.3]}],
    }
    base.update(over)
    return parse_scenario(base)


def spec(text, engine=None):
    """Per-engine spec counters and a few other series from one payload."""
    out = {}
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            eng = s.labels.get("engine")
            d = out.setdefault(eng, {"per_pos": {}})
            if s.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
                d["per_pos"][int(s.labels["position"])] = s.value
            elif s.name.startswith("vllm:") and (s.name.endswith("_total") or s.name.endswith("_count")):
                d[s.name] = s.value
            elif s.name.endswith("_created") and s.name.startswith("vllm:spec_decode"):
                d.setdefault("created", set()).add(s.value)
            elif s.name == "vllm:num_requests_running":
                d["running"] = s.value
    return out


def check_identities(d, k):
    pp = [d["per_pos"][i] for i in range(len(d["per_pos"]))]
    assert sum(pp) == d["vllm:spec_decode_num_accepted_tokens_total"]
    assert all(a >= b for a, b in itertools.pairwise(pp))
    assert d["vllm:spec_decode_num_draft_tokens_total"] == k * d["vllm:spec_decode_num_drafts_total"]


def test_every_payload_of_a_recording_satisfies_vllms_counter_identities(tmp_path):
    sc = load_scenario("restart")  # 2 DP engines, K=4, two restarts
    out = tmp_path / "rec.jsonl"
    record(sc, out, poll_interval=15.0, duration=360.0)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 25
    prev, resets = {}, 0
    for ln in lines:
        for eng, d in spec(ln["text"]).items():
            if eng is None or "vllm:spec_decode_num_drafts_total" not in d:
                continue
            check_identities(d, 4)
            if eng in prev:
                p = prev[eng]
                restarted = d["created"] != p["created"]
                resets += restarted
                for name in (
                    "vllm:spec_decode_num_drafts_total",
                    "vllm:spec_decode_num_accepted_tokens_total",
                    "vllm:generation_tokens_total",
                    "vllm:inter_token_latency_seconds_count",
                ):
                    if restarted:
                        assert d[name] < p[name]  # counters start again from 0
                    else:
                        assert d[name] >= p[name], name
            prev[eng] = d
    assert resets == 4  # 2 restarts x 2 engines, seen through _created


def test_measured_acceptance_recovers_the_configured_conditional_rates():
    sim = Simulator(small(), seed=3)
    sim.advance_to(90.0)
    e = sim.routes["m"].engines[0]
    drafts = e.counters.drafts
    assert drafts > 20000
    cond = [e.per_pos[0] / drafts] + [e.per_pos[i] / e.per_pos[i - 1] for i in range(1, 4)]
    for got, want in zip(cond, [0.9, 0.7, 0.5, 0.3], strict=True):
        assert abs(got - want) < 0.02
    alpha = e.counters.accepted_tokens / e.counters.draft_tokens
    assert abs(alpha - sim.truth()["routes"]["m"]["alpha"]) < 0.01


def test_acceptance_rate_key_sets_vllms_alpha_not_the_per_position_probability():
    sim = Simulator(small(phases=[{"name": "p", "duration": "60s", "concurrency": 16, "acceptance_rate": 0.55}]))
    sim.advance_to(60.0)
    e = sim.routes["m"].engines[0]
    assert abs(e.counters.accepted_tokens / e.counters.draft_tokens - 0.55) < 0.015


def test_itl_is_observed_once_per_running_request_per_step_and_iteration_tokens_once_per_step():
    sim = Simulator(small())
    sim.advance_to(30.0)
    e = sim.routes["m"].engines[0]
    # With spec on, every decode step of a request is one draft and one ITL observation.
    assert e.histograms.inter_token_latency.count == e.counters.drafts
    assert e.histograms.iteration_tokens.count == e.steps
    assert (
        e.counters.generation_tokens > e.counters.accepted_tokens + e.counters.drafts * 0.9
    )  # accepted + bonus (+ prefill)


def test_num_requests_running_is_the_live_batch_at_the_configured_concurrency():
    sim = Simulator(small())
    for t in (10.0, 20.0, 40.0):
        sim.advance_to(t)
        assert sim.routes["m"].engines[0].num_running == 16
        assert sim.truth()["routes"]["m"]["batch"] == 16


def test_batch_is_capped_at_max_num_seqs_and_the_rest_waits():
    sim = Simulator(small(max_num_seqs=8))
    sim.advance_to(10.0)
    e = sim.routes["m"].engines[0]
    assert e.num_running == 8 and e.num_waiting == 8


def test_poisson_arrivals_follow_littles_law_roughly():
    sim = Simulator(small(phases=[{"name": "p", "duration": "200s", "rate": 4.0, "acceptance_rate": 0.6}]))
    sim.advance_to(200.0)
    e = sim.routes["m"].engines[0]
    done = sum(e.success.values())
    assert 650 < done < 950  # ~4 req/s over ~195 s of completions
    nominal = sim.truth()["routes"]["m"]["nominal_batch"]
    assert 0.5 * nominal < e.num_running + 1 < 2.0 * nominal + 2


def test_bigger_batches_make_longer_steps_through_the_cost_model():
    def mean_itl(conc):
        sim = Simulator(small(phases=[{"name": "p", "duration": "30s", "concurrency": conc, "acceptance_rate": 0.6}]))
        sim.advance_to(30.0)
        h = sim.routes["m"].engines[0].histograms.inter_token_latency
        return h.sum / h.count

    assert mean_itl(128) > 1.3 * mean_itl(8)


def test_same_seed_gives_identical_output_and_another_seed_differs():
    a, b, c = Simulator(small(), seed=1), Simulator(small(), seed=1), Simulator(small(), seed=2)
    for s in (a, b, c):
        s.advance_to(15.0)
    assert a.render() == b.render()
    assert a.render() != c.render()


def test_restart_event_resets_counters_and_changes_created():
    sim = Simulator(small(events=[{"at": "20s", "type": "restart"}]))
    sim.advance_to(19.9)
    before = spec(sim.render())["0"]
    sim.advance_to(21.0)
    after = spec(sim.render())["0"]
    assert after["vllm:spec_decode_num_drafts_total"] < before["vllm:spec_decode_num_drafts_total"] / 5
    assert after["created"].isdisjoint(before["created"])
    assert sim.truth()["restarts"] == 1


def test_spec_off_removes_spec_families_and_spec_on_brings_them_back():
    sim = Simulator(small(events=[{"at": "10s", "type": "spec_off"}, {"at": "20s", "type": "spec_on"}]))
    sim.advance_to(15.0)
    text = sim.render()
    assert "vllm:spec_decode" not in text and "vllm:generation_tokens_total" in text
    assert sim.truth()["routes"]["m"]["verdict"] == "spec_off"
    sim.advance_to(25.0)
    assert "vllm:spec_decode_num_accepted_tokens_per_pos_total" in sim.render()


def test_schema_event_switches_the_wire_schema():
    sim = Simulator(small(events=[{"at": "10s", "type": "schema", "schema": "v0"}]))
    sim.advance_to(5.0)
    assert "vllm:inter_token_latency_seconds_bucket" in sim.render()
    sim.advance_to(16.0)
    text = sim.render()
    assert "vllm:spec_decode_draft_acceptance_rate" in text
    assert "vllm:inter_token_latency_seconds" not in text
    assert sim.render(schema="v1").count("vllm:inter_token_latency_seconds_bucket") > 0


def test_truth_reports_breakeven_and_verdict_from_the_cost_model():
    sim = Simulator("alpha-drop")
    sim.now = 100.0
    r = sim.truth()["routes"]["llama-70b"]
    assert r["verdict"] == "keep" and r["alpha"] > r["breakeven_acceptance_rate"]
    sim.now = 300.0
    r = sim.truth()["routes"]["llama-70b"]
    assert r["verdict"] == "disable" and r["expected_speedup"] < 1.0


@pytest.mark.parametrize(
    "bad,key",
    [
        ({"phases": [{"duration": "1m", "concurrency": 1}]}, "phases[0]"),
        ({"phases": [{"duration": "1m", "concurrency": 1, "alpha": 1.5}]}, "phases[0].alpha"),
        ({"phases": [{"duration": "soon", "concurrency": 1, "alpha": 0.5}]}, "phases[0].duration"),
        ({"schema": "v2"}, "schema"),
        ({"events": [{"at": "1s", "type": "explode"}]}, "events[0].type"),
        ({"faults": [{"at": "1s", "kind": "meteor"}]}, "faults[0].kind"),
        ({"bogus": 1}, "bogus"),
        ({"phases": [{"duration": "1m", "concurrency": 1, "alpha": 0.5, "k": 9}]}, "phases[0].k"),
        ({"phases": [{"duration": "1m", "rate": 1, "acceptance": [0.9, "most"]}]}, "phases[0].acceptance[1]"),
        (
            {"phases": [{"duration": "1m", "rate": 1, "alpha": 0.5, "routes": {"m": {"bogus": 1}}}]},
            "phases[0].routes.m.bogus",
        ),
        ({"phases": [{"duration": "1m", "rate": 1, "alpha": 0.5, "routes": {"other": {}}}]}, "phases[0].routes.other"),
        ({"routes": [{"model_name": "m"}, {"model_name": "m"}]}, "routes[1].model_name"),
        ({"events": [{"at": "1s", "type": "schema"}]}, "events[0].schema"),
        ({"faults": [{"at": "1s", "kind": "slow_drip", "chunk": 0}]}, "faults[0].chunk"),
        ({"step_time": {"fixed_seconds": 0.01}}, "step_time.seconds_per_token"),
        ({"engines": 65}, "engines"),
        ({"phases": None}, "phases"),
    ],
)
def test_invalid_scenarios_are_rejected_naming_the_key(bad, key):
    from specwatch.sim import ScenarioError

    with pytest.raises(ScenarioError, match=key.replace("[", r"\[").replace("]", r"\]")):
        small(**bad)


def test_a_scenario_without_phases_is_rejected_naming_phases():
    from specwatch.sim import ScenarioError

    with pytest.raises(ScenarioError, match=r"^phases: required"):
        parse_scenario({"name": "t"})
