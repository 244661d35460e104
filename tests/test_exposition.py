"""The fast parser against prometheus_client's parser (the oracle), and its rejections."""

import math
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.paths import REPO, fixture_path
from specwatch.exposition import ExpositionError, Selector
from specwatch.vllm import FAMILIES, SELECTOR
from support.vllm_payloads import FakeVllm


def _payloads() -> list[Path]:
    return sorted(fixture_path().rglob("*.prom"))


def _oracle(text: str) -> dict[tuple, float]:
    """Every sample of the selected families, by (sample name, sorted labels), via prometheus_client."""
    wanted = set()
    for family, kind in FAMILIES.items():
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}.get(kind, ("",))
        wanted.update(family + s for s in suffixes)
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in wanted:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _ours(text: str, selector: Selector = SELECTOR) -> dict[tuple, float]:
    out = {}
    for fam in selector.parse(text).values():
        for s in fam.samples + fam.created:
            out[(s.name, tuple(sorted(s.labels)))] = s.value
    return out


def test_every_real_fixture_parses_to_the_same_values_as_prometheus_client():
    files = _payloads()
    assert len(files) >= 40
    for path in files:
        text = path.read_text()
        selector = SELECTOR
        if path.name.endswith("-excerpt.prom"):
            # Public excerpts keep a few verbatim lines, not whole histograms: compare the rest.
            selector = Selector({f: k for f, k in FAMILIES.items() if k != "histogram"})
        oracle = {key: v for key, v in _oracle(text).items()
                  if any(key[0].startswith(f) for f in selector.families)}
        ours = _ours(text, selector)
        assert ours.keys() == oracle.keys(), path.name
        for key, value in oracle.items():
            assert ours[key] == value or (math.isnan(value) and math.isnan(ours[key])), (path.name, key)


def test_payloads_built_by_prometheus_client_parse_identically_including_dp_engines_and_legacy_itl():
    for schema in ("v1", "v1-legacy-itl", "nospec"):
        fake = FakeVllm(engines=3, schema=schema)
        for e in range(3):
            fake.step(e, batch=5 + e, accepted_per_request=[4, 2, 0], itl_seconds=0.02 * (e + 1))
        text = fake.text()
        assert _ours(text) == _oracle(text)


def test_created_timestamps_and_per_position_counters_are_never_confused_with_their_neighbours():
    text = fixture_path("vllm-cpu-real", "035.prom").read_text()
    families = SELECTOR.parse(text)
    accepted = families["vllm:spec_decode_num_accepted_tokens"]
    assert [s.name for s in accepted.samples] == ["vllm:spec_decode_num_accepted_tokens_total"]
    assert accepted.samples[0].value == 43577.0
    assert all(s.value > 1.7e9 for s in accepted.created)
    per_pos = families["vllm:spec_decode_num_accepted_tokens_per_pos"]
    assert sorted(s.label("position") for s in per_pos.samples) == ["0", "1", "2", "3"]
    assert sum(s.value for s in per_pos.samples) == 43577.0  # vLLM's identity: sum of per_pos = accepted


GOOD = """# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 1.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 3.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 3.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 0.5
"""


def test_the_minimal_good_payload_is_accepted():
    assert set(SELECTOR.parse(GOOD)) == {"vllm:spec_decode_num_drafts", "vllm:inter_token_latency_seconds"}


@pytest.mark.parametrize("bad, reason", [
    (GOOD.replace("} 10.0", "} -1.0", 1), "invalid"),                                  # negative counter (V1)
    (GOOD.replace("} 10.0", "} NaN", 1), "invalid"),                                   # NaN counter
    (GOOD.replace('le="0.01",model_name="m"} 1.0', 'le="0.01",model_name="m"} 5.0'), "invalid"),  # buckets go down (V1)
    (GOOD.replace('le="+Inf"', 'le="100"'), "invalid"),                                # missing +Inf (V1)
    (GOOD.replace('le="0.01"', 'le="abc"'), "invalid"),                                # non-numeric le (V1)
    (GOOD + 'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 11.0\n', "invalid"),  # duplicate series (V1)
    (GOOD.replace("} 10.0", "} 1 2 3", 1), "parse"),                                   # 'x 1 2 3' (V1)
    (GOOD.replace("} 10.0", "} ten", 1), "parse"),
    (GOOD.replace('model_name="m"} 10.0', 'model_name="m} 10.0'), "parse"),           # unterminated label value
    (GOOD.replace("# TYPE vllm:spec_decode_num_drafts_total counter", "# TYPE vllm:spec_decode_num_drafts_total gauge"), "invalid"),  # type changed
    (GOOD.replace("vllm:inter_token_latency_seconds_count{engine=\"0\",model_name=\"m\"} 3.0", "vllm:inter_token_latency_seconds_count{engine=\"0\",model_name=\"m\"} 4.0"), "invalid"),
    (GOOD.replace('{engine="0",model_name="m"} 10.0', "{" + ",".join(f'l{i}="v"' for i in range(32000)) + "} 10.0"), "invalid"),  # 32k labels (V4)
    (GOOD.replace('{engine="0",model_name="m"} 10.0', '{="foo"} 10.0'), "parse"),     # empty label name (Go parser crash #3793)
    (GOOD + 'vllm:num_requests_running{engine="0",model_name="m"} +Inf\n', "invalid"),  # a batch of infinity
    (GOOD + 'vllm:num_requests_running{engine="0",model_name="m"} -3\n', "invalid"),
])
def test_malformed_or_invalid_payloads_are_rejected_as_a_whole(bad, reason):
    with pytest.raises(ExpositionError) as info:
        SELECTOR.parse(bad)
    assert info.value.reason == reason


def test_truncated_payload_is_rejected_not_half_read():
    text = fixture_path("vllm-cpu-real", "035.prom").read_text()
    cut = text[: text.index('vllm:inter_token_latency_seconds_bucket{engine="0",le="0.1"')]
    with pytest.raises(ExpositionError):
        SELECTOR.parse(cut)


def test_unselected_families_cost_nothing_even_when_hostile():
    # A family specwatch does not read may carry anything; it must not cause a rejection.
    hostile = "huge_family{" + ",".join(f'l{i}="v"' for i in range(32000)) + "} 1\n" + "x{{{ garbage\n" + GOOD
    assert "vllm:spec_decode_num_drafts" in SELECTOR.parse(hostile)


def test_binary_garbage_raises_only_the_parsers_own_error():
    selector = Selector({"a": "counter"})
    for blob in (b"\x00\xff\xfe a_total{ 1", b"a_total{x=\"\\", b"a_total 1e999999", b"a_total{x=\"1\"}"):
        with pytest.raises(ExpositionError):
            selector.parse(blob.decode("latin-1"))
