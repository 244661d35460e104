"""The remembered poll read from whole lines (Selector.parse_values: whole_line_finder +
LastPoll.reread_lines) gives what the cut lines give (Selector.parse_values_plain: line_finder +
LastPoll.reread_values), on the real recording and on random sequences of changed polls: new
values of every kind (timestamps, spaces, braces, tabs, empty), lines moved, dropped, added or
re-labelled, TYPE lines changed, and a restart's counters."""

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specwatch.engines.registry import FAMILIES
from specwatch.exposition import ExpositionError, Selector
from specwatch.exposition.syntax import line_finder, whole_line_finder
from support.paths import fixture_path
from system.reliability.mutate import mutated

REAL = [p.read_text() for p in sorted(fixture_path("vllm-cpu-real").glob("*.prom"))]
SEEDS = REAL[::6]


def _outcome(parse_values, text):
    """What a parse_values returns, or the error it raises: families, or (None, values)."""
    try:
        families, values = parse_values(text)
    except ExpositionError as exc:
        return ("error", exc.reason, str(exc))
    if families is None:
        return ("remembered", values)
    return ("read", {name: (f.type, f.samples, f.created) for name, f in families.items()})


def _assert_same_sequence(texts):
    """Two selectors, each fed the whole sequence: the shortcut and the plain path agree at every
    poll, in the answer and in whether it came from the remembered poll."""
    shortcut, plain = Selector(FAMILIES), Selector(FAMILIES)
    remembered = 0
    for text in texts:
        got = _outcome(shortcut.parse_values, text)
        assert got == _outcome(plain.parse_values_plain, text)
        assert (shortcut.shape is None) == (plain.shape is None)
        if shortcut.shape is not None:
            assert shortcut.parse(text) == plain.parse(text)
        remembered += got[0] == "remembered"
    return remembered


def test_the_whole_line_finder_finds_the_lines_the_line_finder_finds_each_whole():
    selector = Selector(FAMILIES)
    cut = line_finder(selector._prefixes, tuple(selector._type_names))
    whole = whole_line_finder(selector._prefixes, tuple(selector._type_names))
    for text in REAL:
        found = cut.findall(text)
        assert [f"{head} {value}" if value else line for head, value, line in found] == whole.findall(text)
        assert any(value for _, value, _ in found)  # the real lines come cut by the line finder


def test_the_real_recording_reads_the_same_and_from_the_remembered_poll():
    assert _assert_same_sequence(REAL) >= 20


VALUES = (
    "NaN",
    "-1",
    "+Inf",
    "1e309",
    "0",
    "3.5",
    "1_000",
    "0x10",
    "",
    " ",
    "3.5 1700000000000",
    "3.5\t1700000000000",
    " 3.5",
    "3.5 ",
    "\t3.5",
    "3.5\r",
    "{3.5",
    "3.5}",
    "}",
    "{}",
    "3.5 {",
    "1e9",
)


@st.composite
def _changed_poll(draw, text):
    """`text` with some selected lines' values, heads or separators changed."""
    lines = text.split("\n")
    selected = [i for i, line in enumerate(lines) if line.startswith(tuple(FAMILIES))]
    if not selected:
        return text
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.sampled_from(selected))
        head, _, value = lines[i].rpartition(" ")
        how = draw(st.sampled_from(("value", "value", "value", "separator", "head", "swap")))
        if how == "value":
            lines[i] = f"{head} {draw(st.one_of(st.sampled_from(VALUES), st.floats().map(repr)))}"
        elif how == "separator":
            separator = draw(st.sampled_from(("", "  ", "\t", " } ", "} ")))
            lines[i] = f"{head}{separator}{value}"
        elif how == "head":
            end = draw(st.sampled_from(("", "x", " ", "}", '"}')))
            lines[i] = f"{head[:-1]}{end} {value}"
        else:
            j = draw(st.sampled_from(selected))
            lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEEDS).flatmap(lambda text: st.tuples(st.just(text), _changed_poll(text))))
def test_a_poll_after_a_remembered_one_reads_the_same_whatever_changed_on_its_lines(texts):
    good, changed = texts
    _assert_same_sequence([good, changed, good, changed])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated(SEEDS), min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_random_sequences_of_real_and_mutated_polls_read_the_same(mutations, rnd):
    texts = [*rnd.sample(REAL, 3), *mutations]
    rnd.shuffle(texts)
    _assert_same_sequence([REAL[0], *texts])


def test_a_restart_and_re_laid_out_payloads_read_the_same():
    rnd = random.Random(7)
    texts = list(REAL)
    # A restart: every selected value back near zero; then the lines of one family in reverse.
    restarted = [
        "\n".join(
            f"{line.rpartition(' ')[0]} {rnd.choice(('0.0', '1.0', '2.0'))}"
            if line.startswith(tuple(FAMILIES)) and "_bucket" not in line and "_created" not in line
            else line
            for line in text.split("\n")
        )
        for text in REAL[:5]
    ]
    lines = REAL[-1].split("\n")
    block = [i for i, line in enumerate(lines) if line.startswith("vllm:inter_token_latency_seconds_bucket")]
    relaid = list(lines)
    for i, j in zip(block, reversed(block), strict=True):
        relaid[i] = lines[j]
    _assert_same_sequence([*texts, *restarted, "\n".join(relaid), *texts[:3]])


def test_a_value_the_cut_does_not_take_on_any_line_reads_the_same_including_lines_of_other_series():
    # Every line the line finder cuts, those of series no family selects among them (a longer
    # name sharing a prefix: only their cut is compared, their value is never read).
    text = REAL[10]
    lines = text.split("\n")
    cut = [i for i, line in enumerate(lines) if line.startswith(tuple(FAMILIES)) and "{" in line]
    assert len(cut) > 50
    for i in cut:
        head, _, _ = lines[i].rpartition(" ")
        for value in ("", "3.5}", "{3.5", "3.5 1", " 3.5", "}"):
            changed = list(lines)
            changed[i] = f"{head} {value}"
            _assert_same_sequence([text, "\n".join(changed)])


def test_a_payload_whose_first_line_is_selected_reads_the_same():
    # The patterns anchor on the newline before a line: the first line is taken whole by both paths.
    lines = REAL[10].rstrip("\n").split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("# TYPE vllm:spec_decode_num_drafts"))
    from_type = lines[start:] + lines[:start]
    from_sample = lines[start + 1 :] + lines[: start + 1]
    for rotated in (from_type, from_sample):
        first = rotated[0]
        texts = ["\n".join(rotated)]
        if not first.startswith("#"):
            head = first.rpartition(" ")[0]
            texts += ["\n".join([f"{head} 7.0", *rotated[1:]]), "\n".join([f"{head} 7.0 1", *rotated[1:]])]
        else:
            texts += [
                "\n".join([first + " x", *rotated[1:]]),
                "\n".join([first.replace("counter", "gauge"), *rotated[1:]]),
            ]
        remembered = _assert_same_sequence([*texts, *texts])
        assert remembered >= 1 or not first.startswith("#")  # a sample first is never remembered
