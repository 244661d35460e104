"""config/yamlread.py: the fast path reads the plain subset of YAML exactly as yaml.safe_load does,
and declines everything else (PyYAML then reads it, with PyYAML's errors); a config file the chart
renders is read without importing yaml."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specwatch.config import ConfigError, from_mapping, load, yamlread
from specwatch.config.yamlread import DECLINED, fast_load, kind

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "specwatch"


def same(a: object, b: object) -> bool:
    """Equal, with the same types all the way down and the same key order (True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(same(a[k], b[k]) and same(k, kb) for k, kb in zip(a, b, strict=True))
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


def assert_agrees(text: str) -> bool:
    """The fast path declines `text` or returns what yaml.safe_load does; True when it took it."""
    fast = fast_load(text)
    if fast is DECLINED:
        return False
    try:
        expected = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        pytest.fail(f"the fast path read what PyYAML refuses ({exc}):\n{text}")
    assert same(fast, expected), f"{fast!r} != {expected!r} for:\n{text}"
    return True


# -- the resolver ---------------------------------------------------------------------------------


def pyyaml_kind(value: str) -> str:
    tag = yaml.resolver.Resolver().resolve(yaml.ScalarNode, value, (True, False))
    return tag.rpartition(":")[2]


def assert_kind_is_pyyamls(value: str) -> None:
    """kind() names PyYAML's tag, or "other" for a tag it does not read (never for a str but a
    string that starts as a timestamp does)."""
    ours, theirs = kind(value), pyyaml_kind(value)
    if ours == "other":
        assert theirs in ("timestamp", "merge", "value") or (theirs == "str" and value[4:5] == "-"), value
    else:
        assert ours == theirs, value


RESOLVED = [
    "~", "null", "Null", "NULL", "nULL", "", "yes", "Yes", "YES", "yEs", "no", "No", "NO", "true", "True",
    "TRUE", "tRUE", "false", "off", "Off", "OFF", "on", "On", "ON", "y", "Y", "n", "N", "0", "-0", "+0",
    "7", "-7", "+7", "10", "123456789012345678901234567890", "1.0", "-1.5", "+1.5", "1.", "-1.", ".5",
    "-.5", "+.5", "1.0e+5", "1.0E-5", "1.e+5", "1e5", "1.0e5", "1e+5", ".5e-3", "09", "1a", "5s",
    "1m", "16MiB", "0.5x", ":9474", "a:b", "a#b", "--", "-x", "x-", "1.2.3", "v1", "0.0.0.0",
    "http://a:8000/metrics", "${TENANT}", "a b", "nul", "Nulls", "truely", "o", "e", "E5",
]  # fmt: skip


@pytest.mark.parametrize("scalar", RESOLVED)
def test_plain_scalar_resolves_as_pyyaml_does(scalar):
    text = f"k: {scalar}\n"
    assert assert_agrees(text), f"declined {scalar!r}"


RESOLVER_FORMS = [
    *RESOLVED, "2001-12-14", "2001-12-14t21:59:43.10-05:00", "2001-1-2 3:04:05", "2001-12-1", "2001-ab",
    "1:30", "-1:30", "+1:5", "1:60", "1:5:07", "1::30", "0:30", "1:30.5", "0:30.5", "1:30.", "1:30.5e+1",
    "012", "-012", "08", "0_", "0o12", "0x1F", "0x", "-0xg", "0b11", "0b", "0b2", "+0b_", "1_000", "1__",
    "1_0.5", "1._5", "_1", "1.5_", "1.5e+5_", "1.5e+", "1.5e-05", ".5e+1", ".e+1", "._5", ".inf", "-.inf",
    "+.Inf", ".INF", ".iNf", "-.nan", ".NaN", ".nan", "<<", "<", "=", "==", "..", ".", "-.", "+", "1.2.3",
]  # fmt: skip


@pytest.mark.parametrize("value", RESOLVER_FORMS)
def test_kind_is_pyyamls_resolver(value):
    assert_kind_is_pyyamls(value)


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="0123456789_.:+-eExbaBfFinNAtTZ ~<=yYoO", min_size=1, max_size=12))
def test_kind_is_pyyamls_resolver_on_random_text(value):
    assert_kind_is_pyyamls(value)


NUMBER_PIECES = ["0", "1", "5", "9", "12", "60", "007", "2001", "_", ".", ":", "e", "E", "+", "-", "x", "b", "f"]
NUMBER_PIECES += ["inf", "Inf", "nan", "NaN", " ", "T", "Z", "-12-14", "10:00:00"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(NUMBER_PIECES), min_size=1, max_size=7))
def test_kind_is_pyyamls_resolver_on_number_like_text(pieces):
    assert_kind_is_pyyamls("".join(pieces))


# -- what it declines -----------------------------------------------------------------------------

DECLINED_FORMS = {
    "a backslash escape": 'k: "a\\tb"\n',
    "a flow sequence over lines": "k: [1m,\n  5m]\n",
    "a pair in a flow sequence": "k: [a: b]\n",
    "a trailing comma": "k: [a, b,]\n",
    "an empty flow entry": "k: [a, , b]\n",
    "a flow word with a space": "k: [a b]\n",
    "a flow word with a colon": "k: [http://a:1/m]\n",
    "a flow key without a space": "k: {a:b}\n",
    "a flow key without a value": "k: {a}\n",
    "a flow collection as a key": "k: {[a]: b}\n",
    "a duplicate flow key": "k: {a: 1, a: 2}\n",
    "a flow word with a brace": "k: [${X}]\n",
    "text after a flow collection": "k: [a] b\n",
    "a literal block scalar": "k: |\n  text\n",
    "a folded block scalar": "k: >-\n  text\n",
    "an anchor": "k: &a 1\nj: 2\n",
    "an alias": "k: 1\nj: *a\n",
    "a tag": "k: !!str 1\n",
    "an explicit key": "? k\n: v\n",
    "a plain scalar over two lines": "k: one\n  two\n",
    "a quoted scalar over two lines": "k: 'one\n  two'\n",
    "a tab in indentation": "k:\n\tj: 1\n",
    "a tab after the colon": "k:\tv\n",
    "several documents": "a: 1\n---\nb: 2\n",
    "a document end": "a: 1\n...\n",
    "content after ---": "--- a\n",
    "a directive": "%YAML 1.1\n---\na: 1\n",
    "a duplicate key": "a: 1\na: 2\n",
    "keys equal in Python": "1: a\ntrue: b\n",
    "a timestamp": "k: 2001-12-14\n",
    "a spaced timestamp": "k: 2001-12-14 21:59:43.10 -5\n",
    "a sexagesimal int": "k: 1:30\n",
    "a sexagesimal float": "k: 1:30.5\n",
    "an octal int": "k: 012\n",
    "a hexadecimal int": "k: 0x1F\n",
    "a binary int": "k: 0b101\n",
    "an int with _": "k: 1_000\n",
    "a float with _": "k: 1_0.5\n",
    "infinity": "k: .inf\n",
    "minus infinity": "k: -.Inf\n",
    "not a number": "k: .NaN\n",
    "a merge key": "<<: {a: 1}\n",
    "a plain <<": "k: <<\n",
    "a value =": "k: =\n",
    "a value in a value": "k: a: b\n",
    "an empty sequence item": "- \n- a\n",
    "a sequence in a sequence on one line": "- - a\n",
    "a scalar deeper than its mapping's keys": "a: 1\n  b: 2\n",
    "a key beside a sequence's items": "a:\n  - x\n  b: 1\n",
    "a dedent to no level": "a:\n    b: 1\n  c: 2\n",
    "a CR line break": "a: 1\r\nb: 2\r\n",
    "a non-printable character": "a: \x07\n",
    "a byte order mark": "\ufeffa: 1\n",
    "a next-line character": "a: x\x85y\n",
    "an unclosed quote": "a: 'x\n",
    "text after a closing quote": "a: 'x' y\n",
    "a comment without a space after a quote": "a: 'x'#c\n",
    "a reserved indicator": "a: @x\n",
    "a sequence item where a key is expected": "a: 1\n- b\n",
    "a huge int": "k: " + "9" * 5000 + "\n",
}


@pytest.mark.parametrize("text", DECLINED_FORMS.values(), ids=DECLINED_FORMS.keys())
def test_form_outside_the_subset_is_declined(text):
    assert fast_load(text) is DECLINED


@pytest.mark.parametrize("text", DECLINED_FORMS.values(), ids=DECLINED_FORMS.keys())
def test_declined_text_reads_as_pyyaml_reads_it(text):
    try:
        expected = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        with pytest.raises(yamlread.YamlError) as raised:
            yamlread.load(text)
        assert str(raised.value) == str(exc)
    except ValueError:  # Python's own limit on an int's digits, under PyYAML
        with pytest.raises(ValueError):
            yamlread.load(text)
    else:
        assert same(yamlread.load(text), expected)


ACCEPTED_FORMS = {
    "an empty text": "",
    "comments only": "# a\n  # b\n",
    "a leading ---": "--- # the config\na: 1\n",
    "a top-level scalar": "just text\n",
    "a top-level empty flow sequence": "[]\n",
    "nested mappings": "a:\n  b:\n    c: 1\n  d: 2\ne: 3\n",
    "an indented sequence": "a:\n  - x\n  - y\nb: 1\n",
    "a sequence at the mapping's indentation": "a:\n- x\n- y\nb: 1\n",
    "mappings as items": "t:\n  - name: a\n    url: http://a:1/m  # c\n  -   name: b\n      url: 'x'\n",
    "an empty key": "a:\nb: 1\n",
    "quoted keys and values": "'a b': \"c d\"\n\"e\": 'it''s'\n",
    "empty quoted values": "a: ''\nb: \"\"\n",
    "empty flows": "a: []\nb: {}  # none\nc: [ ]\n",
    "flow sequences": "windows: [1m, 5m]  # c\nl: [ namespace ,pod ]\n",
    "flow mappings": "m: {config_json: /models/x.json, n: 1}\n",
    "nested flows": "points: [[1, 0.01], [64, 0.02]]\nrows: [{a: 'x, y', b: \"z\"}]\n",
    "a flow item": "- [a, -1, .5, ~, yes]\n- {}\n",
    "a top-level sequence": "- 1\n- a: b\n  c: [] \n- 'q'\n",
    "an indented document": "  a: 1\n  b:\n    - x\n",
    "spaces before the colon": "a   : 1\n'b' : 2\n",
    "a comment line deeper than the next key": "a: 1\n      # c\nb: 2\n",
    "flow characters inside a plain scalar": 'k: up{job="x"}, [a]\n',
    "a key with a colon": "a:b: c\n",
    "non-key keys": "1: a\n1.5: b\n~: c\nno: d\n",
    "unicode": "name: café ☕\n",
    "a sequence of a mapping's empty key": "- a:\n  - b\n- c\n",
}


@pytest.mark.parametrize("text", ACCEPTED_FORMS.values(), ids=ACCEPTED_FORMS.keys())
def test_form_inside_the_subset_is_read_as_pyyaml_reads_it(text):
    assert assert_agrees(text), "declined"


# -- every YAML of the repository -----------------------------------------------------------------


def repository_yaml() -> dict[str, str]:
    """The YAML files the repository tracks (not the chart's templates: Go templates) and the ```yaml
    blocks of its Markdown."""
    listed = subprocess.run(
        ["git", "ls-files", "*.yaml", "*.yml", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    texts: dict[str, str] = {}
    for name in listed:
        text = (ROOT / name).read_text(encoding="utf-8")
        if name.endswith(".md"):
            for i, block in enumerate(re.findall(r"^```ya?ml\n(.*?)^```", text, re.S | re.M)):
                texts[f"{name}#{i}"] = block
        elif not name.startswith("helm/specwatch/templates/"):
            texts[name] = text
    return texts


REPOSITORY = repository_yaml()


@pytest.mark.parametrize("name", sorted(REPOSITORY))
def test_repository_yaml_reads_the_same_both_ways(name):
    text = REPOSITORY[name]
    try:
        expected = yaml.safe_load(text)
    except yaml.YAMLError:
        assert fast_load(text) is DECLINED, "invalid YAML (or several documents) is PyYAML's to report"
        return
    fast = fast_load(text)
    assert fast is DECLINED or same(fast, expected)


def chart_configs() -> dict[str, str]:
    """specwatch.yaml as the chart's ConfigMap holds it: the defaults and each ci/*-values.yaml."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk renders the chart")
    subprocess.run([str(CHART / "sync-files")], check=True, timeout=60)
    scenarios = {"defaults": {}} | {
        p.name: yaml.safe_load(p.read_text()) for p in sorted((CHART / "ci").glob("*.yaml"))
    }
    out: dict[str, str] = {}
    with helm.Chart.load(str(CHART)) as chart:
        for name, values in scenarios.items():
            for path, text in chart.render(values, name="demo", namespace="llm").items():
                if path.endswith("configmap.yaml") and "specwatch.yaml" in text:
                    out[name] = yaml.safe_load(text)["data"]["specwatch.yaml"]
    return out


@pytest.fixture(scope="module")
def chart_rendered() -> dict[str, str]:
    configs = chart_configs()
    assert configs, "the chart rendered no specwatch.yaml"
    return configs


def test_every_config_the_chart_renders_is_read_by_the_fast_path(chart_rendered):
    declined = [name for name, text in chart_rendered.items() if not assert_agrees(text)]
    assert not declined


# -- random config-like documents -----------------------------------------------------------------

TRICKY = [
    *RESOLVED, "2001-12-14", "2001-12-14t21:59:43.10-05:00", "1:30", "-1:30", "1:30.5", "012", "-012", "0o12",
    "0x1F", "0b11", "1_000", "1_", "1_0.5", ".inf", "-.inf", ".NaN", "<<", "=", "a: b", "a #b", "#a", "- a",
    "-", "?", "? a", ":", ": a", "|", ">", "&a", "*a", "!a", "%a", "@a", "`a", "[a]", "{a}", "[]", "{}",
    "'", '"', "''", "a'b", 'a"b', "a\\b", "---", "...", "--- a", "a,b", "a[b", "x: ", " lead", "trail ",
    "é", "a\tb",
]  # fmt: skip

COMMON = ["5s", "1m", "vllm", "http://vllm-0:8000/metrics", ":9474", "0.5", "16", "true", "llm/x", "a b"]
#: Mostly the forms real configs hold, so that many documents stay inside the subset.
scalars = st.one_of(
    st.sampled_from(COMMON),
    st.sampled_from(COMMON),
    st.sampled_from(COMMON),
    st.sampled_from(TRICKY),
    st.text(alphabet="ab01:.-+#'\" _e[]{},x", max_size=6),
)
keys = st.one_of(st.sampled_from(["a", "b", "name", "url", "1", "yes", "~", "a b", "k:x", "-k", "1.5"]), scalars)


def flow_text(draw: st.DrawFn, depth: int = 0) -> str:
    """A flow collection on one line: random entries, spacing and separators."""
    opening, closing = draw(st.sampled_from([("[", "]"), ("{", "}")]))

    def space() -> str:
        return draw(st.sampled_from(["", "", " ", "  "]))

    def entry() -> str:
        if depth < 2 and draw(st.integers(0, 3)) == 0:
            return flow_text(draw, depth + 1)
        return quoted(draw(scalars), draw(st.sampled_from(["plain", "plain", "single", "double"])))

    entries = []
    for _ in range(draw(st.integers(0, 3))):
        if opening == "{":
            colon = draw(st.sampled_from([": ", ": ", ":", " : ", ":  "]))
            entries.append(f"{space()}{entry()}{colon}{entry()}{space()}")
        else:
            entries.append(f"{space()}{entry()}{space()}")
    separator = draw(st.sampled_from([",", ",", ", ", " ,"]))
    return opening + separator.join(entries) + draw(st.sampled_from(["", "", ",", " "])) + closing


def quoted(value: str, style: str) -> str:
    if style == "single":
        return "'" + value.replace("'", "''") + "'"
    if style == "double":
        return '"' + value + '"'
    return value


@st.composite
def documents(draw: st.DrawFn) -> str:
    """A config-like document: a random tree written with random indentation, styles and comments."""
    step = draw(st.integers(1, 4))
    indentless = draw(st.booleans())
    lines: list[str] = []
    if draw(st.booleans()):
        lines.append(draw(st.sampled_from(["---", "--- # c", "# head", ""])))

    def comment() -> str:
        return draw(st.sampled_from(["", "", "", " # c", "  #c: d", "#x"]))

    def scalar() -> str:
        return quoted(draw(scalars), draw(st.sampled_from(["plain", "plain", "single", "double"])))

    def extra() -> None:
        if draw(st.integers(0, 5)) == 0:
            lines.append(draw(st.sampled_from(["", "   ", "# c", "      # deep", " "])))

    def node(indent: int, depth: int, prefix: str, kind: str = "") -> None:
        """Writes a mapping or sequence whose first line starts with `prefix` at `indent`."""
        pad = " " * indent
        kind = kind or draw(st.sampled_from(["map", "seq"]))
        for n in range(draw(st.integers(1, 3))):
            head = prefix if n == 0 else pad
            extra()
            if kind == "map":
                key = quoted(draw(keys), draw(st.sampled_from(["plain", "plain", "single", "double"])))
                sep = draw(st.sampled_from([":", ":", " :"]))
                choice = draw(st.sampled_from(["scalar", "scalar", "empty", "flow", "nested"]))
                if choice == "nested" and depth < 2:
                    lines.append(f"{head}{key}{sep}{comment()}")
                    inner = indent if indentless and draw(st.booleans()) else indent + step
                    if inner == indent:
                        seq_node(inner, depth + 1)
                    else:
                        node(inner, depth + 1, " " * inner)
                elif choice == "empty":
                    lines.append(f"{head}{key}{sep}{comment()}")
                elif choice == "flow":
                    lines.append(f"{head}{key}{sep} {flow_text(draw)}{comment()}")
                else:
                    lines.append(f"{head}{key}{sep} {scalar()}{comment()}")
            else:
                gap = " " * draw(st.integers(1, 3))
                if draw(st.booleans()) and depth < 2:
                    node(indent + 1 + len(gap), depth + 1, head + "-" + gap, "map")
                else:
                    item = flow_text(draw) if draw(st.integers(0, 4)) == 0 else scalar()
                    lines.append(f"{head}-{gap}{item}{comment()}")

    def seq_node(indent: int, depth: int) -> None:
        pad = " " * indent
        for _ in range(draw(st.integers(1, 3))):
            if draw(st.booleans()) and depth < 2:
                node(indent + 2, depth + 1, pad + "- ", "map")
            else:
                lines.append(f"{pad}- {scalar()}{comment()}")

    root = draw(st.integers(0, 2))
    node(root, 0, " " * root)
    if lines and lines[-1] == "":
        lines.pop()
    text = "\n".join(lines)
    if draw(st.booleans()):
        text += "\n"
    return text


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_random_config_documents_agree_with_pyyaml_or_are_declined(text):
    assert_agrees(text)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["a: 1", "- b", "  c:", "    - d: e", "  f: 'g'", "- h: i", "  - j", "k:", "# l", "", "---", "  m: [] # n", " o: p q", "r: s: t", "  - u: v", "-   w: 1.5"]), max_size=8))  # fmt: skip
def test_random_line_soups_agree_with_pyyaml_or_are_declined(lines):
    assert_agrees("\n".join(lines))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_flow_collections_agree_with_pyyaml_or_are_declined(data):
    assert_agrees("k: " + flow_text(data.draw) + "\n")


PIECES = [*"ab1 :#-'\"[]{},.~\n", "  ", "- ", ": ", " #", "\n  ", "\n- ", "yes", "1.5", "0x", "---", "...", "''"]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=30))
def test_random_character_soups_agree_with_pyyaml_or_are_declined(pieces):
    assert_agrees("".join(pieces))


def test_random_documents_are_mostly_taken():
    """The generator writes documents inside the subset often enough for the test above to matter."""
    taken = []

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(documents())
    def count(text: str) -> None:
        taken.append(fast_load(text) is not DECLINED)

    count()
    assert sum(taken) > len(taken) / 3


# -- where the config and a profile are read ------------------------------------------------------


def test_config_load_keeps_pyyamls_error_naming_the_file(tmp_path):
    path = tmp_path / "specwatch.yaml"
    path.write_text("targets: [x\nwindows: |\n  1m\n")
    with open(path, encoding="utf-8") as handle, pytest.raises(yaml.YAMLError) as expected:
        yaml.safe_load(handle)
    with pytest.raises(ConfigError) as raised:
        load(str(path), environ={})
    assert str(raised.value) == f"config: {path} is not valid YAML: {expected.value}"
    assert str(path) in str(raised.value)


def test_config_load_reads_a_declined_file_through_pyyaml(tmp_path):
    path = tmp_path / "specwatch.yaml"
    path.write_text("windows: [1m, 5m]\npoll_interval: &p 2s\n")
    assert load(str(path), environ={}).window_labels == ("1m", "5m")


def test_profile_file_is_read_the_same_by_either_path(tmp_path):
    fixture = ROOT / "tests" / "fixtures" / "vllm-0.32-cpu" / "stepprofile-nospec.yaml"
    text = fixture.read_text()
    block = yaml.safe_dump(yaml.safe_load(text), default_flow_style=False, sort_keys=False, width=10**6)
    assert fast_load(text) is DECLINED, "its source is a quoted scalar over three lines"
    assert fast_load(block) is not DECLINED
    (tmp_path / "declined.yaml").write_text(text)
    (tmp_path / "fast.yaml").write_text(block)
    read = [from_mapping({"profile": n}, base_dir=str(tmp_path), environ={}) for n in ("declined.yaml", "fast.yaml")]
    assert read[0].profile == read[1].profile
    assert read[1].profile_path == str(tmp_path / "fast.yaml")


def test_profile_file_keeps_pyyamls_error(tmp_path):
    (tmp_path / "p.yaml").write_text("points: [[1, 0.01]\n")
    with pytest.raises(ConfigError) as raised:
        from_mapping({"profile": "p.yaml"}, base_dir=str(tmp_path), environ={})
    assert str(raised.value).startswith(f"profile: cannot read {tmp_path / 'p.yaml'}: while parsing a flow sequence")


def test_chart_config_is_read_without_importing_yaml(tmp_path, chart_rendered):
    """In a fresh interpreter: specwatch.config.load of the chart's config imports no yaml, and the
    read itself (yamlread.load) imports no module at all."""
    path = tmp_path / "specwatch.yaml"
    path.write_text(chart_rendered["defaults"])
    code = (
        "import json, sys\n"
        "from specwatch.config import load, yamlread\n"
        "before = set(sys.modules)\n"
        f"yamlread.load(open({str(path)!r}).read())\n"
        "by_read = sorted(set(sys.modules) - before)\n"
        f"config = load({str(path)!r}, environ={{}})\n"
        "assert config.targets, config\n"
        "yaml = sorted(m for m in sys.modules if m == 'yaml' or m.startswith(('yaml.', '_yaml')))\n"
        "print(json.dumps([by_read, yaml]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[[], []]", out.stdout


@pytest.mark.parametrize("template", ["{%s: v}", "a: {%s: v}", "a: [{%s: v}]", '{"%s": v}'])
def test_a_flow_key_longer_than_pyyaml_takes_is_declined(template):
    for length in (1001, 1024, 1025, 4000):
        assert fast_load(template % ("k" * length)) is DECLINED
    assert fast_load(template % ("k" * 900)) == yaml.safe_load(template % ("k" * 900))
