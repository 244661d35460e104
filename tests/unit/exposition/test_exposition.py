"""The fast parser against prometheus_client's parser (the oracle) and against its own line-by-line
scan (the reference it must equal on any layout), and its rejections."""

import math
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from specwatch.engines.grouping import SELECTOR
from specwatch.engines.registry import FAMILIES
from specwatch.exposition import ExpositionError, Selector
from support.engine_fixtures import polls
from support.paths import fixture_path
from support.vllm_payloads import FakeVllm
from system.reliability.fuzzcheck import CORPUS, text_from_bytes
from system.reliability.mutate import mutated


def _payloads() -> list[Path]:
    return sorted(fixture_path().rglob("*.prom"))


def _oracle(text: str) -> dict[tuple, float]:
    """Every sample of the selected families, by (sample name, sorted labels), via prometheus_client."""
    wanted = set()
    for family, kind in FAMILIES.items():
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}.get(
            kind, ("",)
        )
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
        selector = SELECTOR
        if path.name.endswith("-excerpt.prom"):
            # Public excerpts keep a few verbatim lines, not whole histograms: compare the rest.
            selector = Selector({f: k for f, k in FAMILIES.items() if k != "histogram"})
        # A load-sequence fixture holds several polls (support/engine_fixtures.py): each one.
        for _, text in polls(path) or [(0.0, path.read_text())]:
            oracle = {
                key: v for key, v in _oracle(text).items() if any(key[0].startswith(f) for f in selector.families)
            }
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


@pytest.mark.parametrize(
    "bad, reason",
    [
        (GOOD.replace("} 10.0", "} -1.0", 1), "invalid"),  # negative counter (V1)
        (GOOD.replace("} 10.0", "} NaN", 1), "invalid"),  # NaN counter
        (
            GOOD.replace('le="0.01",model_name="m"} 1.0', 'le="0.01",model_name="m"} 5.0'),
            "invalid",
        ),  # buckets go down (V1)
        (GOOD.replace('le="+Inf"', 'le="100"'), "invalid"),  # missing +Inf (V1)
        (GOOD.replace('le="0.01"', 'le="abc"'), "invalid"),  # non-numeric le (V1)
        (
            GOOD + 'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 11.0\n',
            "invalid",
        ),  # duplicate series (V1)
        (GOOD.replace("} 10.0", "} 1 2 3", 1), "parse"),  # 'x 1 2 3' (V1)
        (GOOD.replace("} 10.0", "} ten", 1), "parse"),
        (GOOD.replace('model_name="m"} 10.0', 'model_name="m} 10.0'), "parse"),  # unterminated label value
        (
            GOOD.replace(
                "# TYPE vllm:spec_decode_num_drafts_total counter", "# TYPE vllm:spec_decode_num_drafts_total gauge"
            ),
            "invalid",
        ),  # type changed
        (
            GOOD.replace(
                'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 3.0',
                'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 4.0',
            ),
            "invalid",
        ),
        (
            GOOD.replace(
                '{engine="0",model_name="m"} 10.0', "{" + ",".join(f'l{i}="v"' for i in range(32000)) + "} 10.0"
            ),
            "invalid",
        ),  # 32k labels (V4)
        (
            GOOD.replace('{engine="0",model_name="m"} 10.0', '{="foo"} 10.0'),
            "parse",
        ),  # empty label name (Go parser crash #3793)
        (GOOD + 'vllm:num_requests_running{engine="0",model_name="m"} +Inf\n', "invalid"),  # a batch of infinity
        (GOOD + 'vllm:num_requests_running{engine="0",model_name="m"} -3\n', "invalid"),
    ],
)
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
    for blob in (b"\x00\xff\xfe a_total{ 1", b'a_total{x="\\', b"a_total 1e999999", b'a_total{x="1"}'):
        with pytest.raises(ExpositionError):
            selector.parse(blob.decode("latin-1"))


# -- the line finder reads any layout exactly as the line-by-line scan does ---------------------
def _outcome(parse, text):
    """What a parse returns, or the error it raises (reason and message): comparable across paths."""
    try:
        return {name: (f.type, f.samples, f.created) for name, f in parse(text).items()}
    except ExpositionError as exc:
        return (exc.reason, str(exc))


def _assert_same_as_line_scan_and_oracle(text, oracle=True):
    fresh = Selector(FAMILIES)  # cold caches ...
    assert _outcome(fresh.parse, text) == _outcome(fresh.parse_by_lines, text)
    assert _outcome(SELECTOR.parse, text) == _outcome(fresh.parse, text)  # ... and warm ones agree
    if oracle:
        assert _ours(text) == _oracle(text)


def _real_dir():
    """The real vLLM payloads (tests/fixtures/vllm-cpu-real)."""
    return fixture_path("vllm-cpu-real")


def _real(name="035.prom"):
    return (_real_dir() / name).read_text()


def test_every_fixture_reads_the_same_through_the_line_finder_and_the_line_scan():
    for path in _payloads():
        text = path.read_text()
        fresh = Selector(FAMILIES)
        assert _outcome(fresh.parse, text) == _outcome(fresh.parse_by_lines, text), path.name


def test_interleaved_families_read_as_the_line_scan_and_prometheus_client():
    lines = _real().rstrip("\n").split("\n")
    random.Random(7).shuffle(lines)  # every family's samples scattered among the others' and headers
    text = "\n".join(lines) + "\n"
    _assert_same_as_line_scan_and_oracle(text)
    assert SELECTOR.parse(text)["vllm:inter_token_latency_seconds"].samples


def test_families_without_help_or_type_lines_read_as_the_line_scan_and_prometheus_client():
    text = "".join(line + "\n" for line in _real().split("\n") if line and not line.startswith("#"))
    _assert_same_as_line_scan_and_oracle(text)
    assert SELECTOR.parse(text)["vllm:spec_decode_num_drafts"].samples[0].value == 15033.0


def test_a_selected_sample_after_another_familys_header_is_still_read():
    lines = _real().rstrip("\n").split("\n")
    moved = next(line for line in lines if line.startswith("vllm:spec_decode_num_drafts_total"))
    lines.remove(moved)
    text = "\n".join(lines + ["# HELP zzz_other Another family.", "# TYPE zzz_other gauge", "zzz_other 1.0", moved])
    assert (*moved.split(" "), "") in SELECTOR._selected_lines(text)  # found, and cut as name{labels}, value
    _assert_same_as_line_scan_and_oracle(text)
    assert SELECTOR.parse(text)["vllm:spec_decode_num_drafts"].samples[0].value == 15033.0
    # ... and a second copy of it there is the duplicate series it is, wherever it sits
    with pytest.raises(ExpositionError, match="duplicate series"):
        SELECTOR.parse(_real() + moved + "\n")


def test_comments_and_blank_lines_inside_a_block_are_skipped():
    text = _real().replace(
        'vllm:inter_token_latency_seconds_bucket{engine="0",le="0.1"',
        '# a comment\n\n#\n   \nvllm:inter_token_latency_seconds_bucket{engine="0",le="0.1"',
    )
    assert text != _real()
    _assert_same_as_line_scan_and_oracle(text)


def test_the_first_line_is_read_even_without_a_newline_before_it():
    text = 'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n' + GOOD
    assert SELECTOR.parse(text)["vllm:num_requests_running"].samples[0].value == 3.0
    assert (
        _outcome(SELECTOR.parse, "# TYPE x")
        == _outcome(SELECTOR.parse_by_lines, "# TYPE x")
        == ("parse", "line 1: malformed TYPE line")
    )


@pytest.mark.parametrize(
    "type_line, reason",
    [
        ("# TYPE other_family", "parse"),  # too few fields: the line scan rejects it
        ("# TYPE other_family gauge extra", "parse"),  # too many
        ("# TYPE other_family\u2028gauge", None),  # split() cuts at any whitespace: four fields
        ("# TYPE other_family\u2028", "parse"),  # three
        ("# TYPE\tother_family", None),  # not a TYPE line to the scan: a comment
        ("# TYPE   vllm:spec_decode_num_drafts_total   gauge  ", "invalid"),  # odd spacing still names the family
        ("# TYPE vllm:spec_decode_num_drafts_total\tcounter", None),
        ("# TYPE vllm:spec_decode_num_drafts_totalx gauge", None),  # another family
    ],
)
def test_type_lines_of_any_family_are_checked_as_the_line_scan_checks_them(type_line, reason):
    text = GOOD + type_line + "\n"
    outcome = _outcome(SELECTOR.parse, text)
    assert outcome == _outcome(Selector(FAMILIES).parse_by_lines, text)
    assert (outcome[0] if isinstance(outcome, tuple) else None) == reason


def test_a_rejection_reports_the_line_number_of_the_line_scan():
    lines = _real().split("\n")
    bad = next(i for i, line in enumerate(lines) if line.startswith("vllm:num_requests_running"))
    lines[bad] = lines[bad].rpartition(" ")[0] + " ten"
    with pytest.raises(ExpositionError) as info:
        SELECTOR.parse("\n".join(lines))
    assert info.value.line == bad + 1 and info.value.reason == "parse"


def test_a_new_label_set_each_poll_keeps_the_series_cache_bounded():
    selector = Selector({"a": "counter"})
    for i in range(3 * 4096):
        selector.parse(f'a_total{{id="{i}"}} 1\n')
    assert len(selector._series) <= 4096 + 1 and len(selector._keys) <= 4096 + 1


CORPUS_FILES = sorted(p for p in CORPUS.iterdir() if p.is_file() and p.suffix != ".md")


@pytest.mark.parametrize("path", CORPUS_FILES, ids=[p.name for p in CORPUS_FILES])
def test_fuzz_corpus_inputs_read_as_the_line_scan_and_as_prometheus_client_when_accepted(path):
    seeds = [p.read_text() for p in sorted(_real_dir().glob("*.prom"))[::3]]
    text, _ = text_from_bytes(path.read_bytes(), seeds)
    assert _outcome(SELECTOR.parse, text) == _outcome(Selector(FAMILIES).parse_by_lines, text)
    try:
        ours = _ours(text)
    except ExpositionError:
        return  # rejected as a whole (prometheus_client would yield families up to the bad line)
    assert ours == _oracle(text)


def _seeds():
    return [p.read_text() for p in sorted(fixture_path("vllm-cpu-real").glob("*.prom"))[::6]]


SEEDS = _seeds()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated(SEEDS))
def test_mutated_real_payloads_read_the_same_through_the_line_finder_and_the_line_scan(text):
    assert _outcome(SELECTOR.parse, text) == _outcome(SELECTOR.parse_by_lines, text)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEEDS), st.randoms(use_true_random=False), st.booleans())
def test_any_line_order_with_or_without_headers_reads_as_the_line_scan_and_prometheus_client(text, rnd, headers):
    lines = [line for line in text.rstrip("\n").split("\n") if headers or not line.startswith("#")]
    rnd.shuffle(lines)
    _assert_same_as_line_scan_and_oracle("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "line",
    [
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0',
        'vllm:num_requests_running{engine="0",model_name="a}b"} 3.0',  # a brace inside a label value
        'vllm:num_requests_running{engine="0",model_name="a b"} 3.0',  # a space inside a label value
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0 1700000000000',  # a timestamp
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0}',
        'vllm:num_requests_running{engine="0",model_name="m"} {3.0',
        'vllm:num_requests_running{engine="0",model_name="m"}\t3.0',
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\r',
        'vllm:num_requests_running{engine="0",model_name="m"}  3.0',
        'vllm:num_requests_running{engine="0",model_name="m"}3.0',
        "vllm:num_requests_running{} 3.0",
        "vllm:num_requests_running 3.0",
        "vllm:num_requests_running} 3.0",
        "vllm:num_requests_running 3.0 {",
        'vllm:num_requests_running_extra{engine="0"} 3.0',  # shares the prefix only
        'vllm:num_requests_running{engine="0",engine="1"} 3.0',
        'vllm:num_requests_running{engine="0" ,model_name="m" } 3.0',
        'vllm:num_requests_running{engine="0",model_name="m\\"} 3.0',
        'vllm:num_requests_running{engine="0",model_name="m"} 1_0',
    ],
)
def test_plain_and_unusual_sample_lines_read_as_the_line_scan_reads_them(line):
    for text in (GOOD + line + "\n", GOOD + line, line + "\n" + GOOD):
        assert _outcome(Selector(FAMILIES).parse, text) == _outcome(Selector(FAMILIES).parse_by_lines, text)


# -- a poll with the last good poll's lines and new values: only the values are read again ------
def test_a_sequence_of_real_polls_reads_as_the_line_scan_while_reusing_the_last_polls_shape():
    selector = Selector(FAMILIES)
    reused = 0
    for path in sorted(_real_dir().glob("*.prom")):
        text = path.read_text()
        before = selector._last
        assert _outcome(selector.parse, text) == _outcome(selector.parse_by_lines, text), path.name
        reused += before is not None and selector._last is before
    assert reused >= 20  # vLLM prints the same series in the same order every poll


VALUES = (
    "NaN",
    "-1",
    "+Inf",
    "-Inf",
    "1e309",
    "0",
    "-0",
    "3.5",
    "1_000",
    "0x10",
    "1e-400",
    "1e308",
    "-1e-300",
    "nan",
    "inf",
    "1.7e308",
    "7",
    "1e9",
)


@st.composite
def _same_lines_new_values(draw):
    text = draw(st.sampled_from(SEEDS))
    lines = text.split("\n")
    selected = [i for i, line in enumerate(lines) if line.startswith(tuple(FAMILIES))]
    if not selected:
        return text, text
    for _ in range(draw(st.integers(1, 8))):
        i = draw(st.sampled_from(selected))
        head, _, _ = lines[i].rpartition(" ")
        value = float(text.split("\n")[i].rpartition(" ")[2])  # the real value, as vLLM printed it
        choice = draw(
            st.one_of(
                st.sampled_from(VALUES),
                st.sampled_from([repr(value * 2), repr(value / 2)]),
                st.floats(allow_nan=True, allow_infinity=True).map(repr),
            )
        )
        lines[i] = f"{head} {choice}"
    return text, "\n".join(lines)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_same_lines_new_values())
def test_new_values_on_the_last_polls_lines_are_checked_as_the_line_scan_checks_them(texts):
    good, changed = texts
    selector = Selector(FAMILIES)
    selector.parse(good)  # remembers the shape of this poll
    assert selector._last is not None or not PAYLOADS_PRESENT
    assert _outcome(selector.parse, changed) == _outcome(selector.parse_by_lines, changed)
    assert _outcome(selector.parse, good) == _outcome(selector.parse_by_lines, good)


PAYLOADS_PRESENT = SEEDS != [GOOD]


@pytest.mark.parametrize(
    "change",
    [
        (
            'vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 1.0',
            'vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="m"} 4.0',
        ),  # buckets go down
        (
            'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 3.0',
            'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 2.0',
        ),  # _count != +Inf bucket
        (
            'vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 0.5',
            'vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} NaN',
        ),
        ('model_name="m"} 10.0', 'model_name="m"} -0.5'),
        ('model_name="m"} 10.0', 'model_name="m"} +Inf'),
        (
            'model_name="m"} 10.0',
            'model_name="m"} 1e308\nvllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 1e308',
        ),
    ],
)
def test_an_invalid_value_on_the_last_polls_lines_is_still_rejected(change):
    selector = Selector(FAMILIES)
    selector.parse(GOOD)
    assert selector._last is not None
    bad = GOOD.replace(*change)
    assert bad != GOOD
    assert _outcome(selector.parse, bad) == _outcome(selector.parse_by_lines, bad)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(alphabet="ab_:.*+?()[]{}|\\^$", min_size=1, max_size=6), min_size=1, max_size=12),
    st.lists(st.text(alphabet="ab_:.*+?()[]{}|\\^$", max_size=7), max_size=20),
)
def test_the_line_finders_alternation_matches_exactly_its_words(words, others):
    """The names' alternation is written as a trie (syntax.alternation): it matches a word of the
    set, whole, and nothing else: no prefix of one, no extension, no other string."""
    import re

    from specwatch.exposition.syntax import alternation

    pattern = re.compile(alternation(tuple(words)))
    candidates = set(others) | set(words) | {w[:-1] for w in words} | {w + "a" for w in words}
    for candidate in candidates:
        assert (pattern.fullmatch(candidate) is not None) == (candidate in words), candidate


@pytest.mark.parametrize(
    "type_line",
    [
        "# TYPE zzz_other gauge",  # the usual shape: not looked at
        "# TYPE zzz_other\tgauge",  # well formed for str.split(), not the usual shape: looked at, passed over
        "# TYPE zzz_other  gauge",
        "# TYPE zzz_other gauge ",
        "# TYPE  zzz_other gauge",
        "# TYPE zzz_\u00e9t\u00e9 gauge",
        "# TYPE zzz_other\u00a0gauge",
        "# TYPE zzz_other",  # malformed: three fields
        "# TYPE zzz_other gauge extra",  # malformed: five fields
        "# TYPE vllm:num_requests_running\tgauge",  # a selected family's, tab-separated
    ],
)
def test_another_familys_type_line_in_any_shape_reads_as_the_line_scan(type_line):
    lines = _real().rstrip("\n").split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("vllm:spec_decode_num_drafts_total"))
    text = "\n".join([*lines[:at], type_line, "zzz_other 1.0", *lines[at:]]) + "\n"
    fresh = Selector(FAMILIES)
    assert _outcome(fresh.parse, text) == _outcome(fresh.parse_by_lines, text)
    fresh.parse(_real())  # a remembered last poll: the next read compares its lines with it
    assert _outcome(fresh.parse, text) == _outcome(fresh.parse_by_lines, text)
