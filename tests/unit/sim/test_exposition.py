"""The simulator's /metrics text is vLLM's wire format (families, labels, HELP, order, schemas)."""

import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.sim import Simulator, load_scenario
from specwatch.sim.scenario import parse_scenario
from support.paths import fixture_path


def real_fixture() -> str:
    return fixture_path("vllm-cpu-real", "035.prom").read_text()


def families(text):
    """{(family, type): set of label-name sets}; materialised so a parse error raises here."""
    out = {}
    for f in list(text_string_to_metric_families(text)):
        out[(f.name, f.type)] = {frozenset(s.labels) for s in f.samples}
    return out


def samples(text):
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def small(**over):
    base = {
        "name": "t",
        "model": "llama-3.1-8b",
        "num_speculative_tokens": 4,
        "prompt_tokens": 256,
        "output_tokens": 128,
        "routes": [{"model_name": "m"}],
        "phases": [{"name": "p", "duration": "60s", "concurrency": 8, "acceptance_rate": 0.6}],
    }
    base.update(over)
    return parse_scenario(base)


@pytest.fixture(scope="module")
def steady_text():
    sim = Simulator("steady")
    sim.advance_to(20.0)
    return sim.render()


def test_default_output_has_exactly_the_real_vllm_family_and_label_sets(steady_text):
    real = real_fixture()
    assert families(steady_text) == families(real)


def test_default_output_matches_real_vllm_help_lines_and_family_order(steady_text):
    real = real_fixture()
    helps = lambda t: re.findall(r"^# HELP (\S+) (.*)$", t, re.M)
    types = lambda t: re.findall(r"^# TYPE (\S+) (\S+)$", t, re.M)
    assert helps(steady_text) == helps(real)
    assert types(steady_text) == types(real)


def test_every_sample_line_has_labels_in_prometheus_client_sorted_order(steady_text):
    for line in steady_text.splitlines():
        if line.startswith("#") or "{" not in line:
            continue
        names = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', line.split("{", 1)[1].rsplit("}", 1)[0])
        assert names == sorted(names), line


def test_created_series_are_epoch_seconds_not_counts(steady_text):
    s = samples(steady_text)
    created = [v for (n, _), v in s.items() if n.startswith("vllm:") and n.endswith("_created")]
    assert created and all(1.7e9 < v < 1.9e9 for v in created)


def test_histogram_buckets_are_vllms_itl_buckets(steady_text):
    les = re.findall(r'^vllm:inter_token_latency_seconds_bucket\{[^}]*le="([^"]+)"', steady_text, re.M)
    assert les == [
        "0.01",
        "0.025",
        "0.05",
        "0.075",
        "0.1",
        "0.15",
        "0.2",
        "0.3",
        "0.4",
        "0.5",
        "0.75",
        "1.0",
        "2.5",
        "5.0",
        "7.5",
        "10.0",
        "20.0",
        "40.0",
        "80.0",
        "+Inf",
    ]


@pytest.mark.parametrize("schema", ["v1", "v1-legacy-itl", "v0"])
def test_every_schema_parses_with_prometheus_client(schema):
    sim = Simulator(small(schema=schema, engines=2))
    sim.advance_to(12.0)
    fams = families(sim.render())
    assert ("vllm:num_requests_running", "gauge") in fams


def test_legacy_schema_exports_time_per_output_token_and_not_inter_token_latency():
    sim = Simulator(small(schema="v1-legacy-itl"))
    sim.advance_to(10.0)
    names = {n for n, _ in families(sim.render())}
    assert "vllm:time_per_output_token_seconds" in names
    assert "vllm:inter_token_latency_seconds" not in names
    assert "vllm:request_time_per_output_token_seconds" not in names  # 0.11+
    assert "vllm:gpu_cache_usage_perc" in names


def test_legacy_schema_records_all_dp_engines_spec_counters_under_engine_0():
    sim = Simulator(small(schema="v1-legacy-itl", engines=2))
    sim.advance_to(10.0)
    s = samples(sim.render())
    drafts = {dict(lab)["engine"]: v for (n, lab), v in s.items() if n == "vllm:spec_decode_num_drafts_total"}
    assert list(drafts) == ["0"]
    assert drafts["0"] == sum(e.counters.drafts for e in sim.routes["m"].engines)
    running = {dict(lab)["engine"] for (n, lab), _ in s.items() if n == "vllm:num_requests_running"}
    assert running == {"0", "1"}


def test_v0_schema_has_acceptance_gauges_model_name_only_and_no_created():
    sim = Simulator(small(schema="v0"))
    sim.advance_to(30.0)
    text = sim.render()
    fams = families(text)
    assert ("vllm:spec_decode_draft_acceptance_rate", "gauge") in fams
    assert ("vllm:spec_decode_efficiency", "gauge") in fams
    assert ("vllm:spec_decode_num_emitted_tokens", "counter") in fams
    assert ("vllm:spec_decode_num_drafts", "counter") not in fams
    assert "_created" not in text
    for (name, _), labelsets in fams.items():
        if name.startswith("vllm:") and name != "vllm:cache_config_info":
            assert all("engine" not in ls for ls in labelsets), name


def test_v0_counters_are_sums_of_cumulative_snapshots():
    # V0 logs counter.inc(lifetime total) every 5 s, so after n logs the counter is ~n/2 x the total.
    sim = Simulator(small(schema="v0"))
    sim.advance_to(31.0)
    e = sim.routes["m"].engines[0]
    s = samples(sim.render())
    drafted = s[("vllm:spec_decode_num_draft_tokens_total", (("model_name", "m"),))]
    assert drafted > 2.5 * e.v0.draft_tokens
    rate = s[("vllm:spec_decode_draft_acceptance_rate", (("model_name", "m"),))]
    assert 0.0 < rate < 1.0


def test_multiprocess_mode_drops_created_and_process_families():
    sim = Simulator(small(multiprocess=True))
    sim.advance_to(5.0)
    text = sim.render()
    assert "_created" not in text and "process_" not in text and "python_gc" not in text
    assert "vllm:spec_decode_num_drafts_total" in text


def test_dp_engines_have_their_own_batch_and_counters():
    sim = Simulator(
        small(engines=2, phases=[{"name": "p", "duration": "60s", "concurrency": 16, "acceptance_rate": 0.6}])
    )
    sim.advance_to(15.0)
    s = samples(sim.render())
    run = {dict(lab)["engine"]: v for (n, lab), v in s.items() if n == "vllm:num_requests_running"}
    drafts = {dict(lab)["engine"]: v for (n, lab), v in s.items() if n == "vllm:spec_decode_num_drafts_total"}
    assert set(run) == {"0", "1"} and sum(run.values()) == 16 and min(run.values()) >= 6
    assert drafts["0"] > 0 and drafts["1"] > 0 and drafts["0"] != drafts["1"]


def test_two_model_names_render_as_two_routes():
    sim = Simulator(load_scenario("mixed-routes"))
    sim.advance_to(3.0)
    s = samples(sim.render())
    models = {dict(lab)["model_name"] for (n, lab), _ in s.items() if n == "vllm:spec_decode_num_drafts_total"}
    assert models == {"chat", "code"}
