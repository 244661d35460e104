"""Structure-aware mutations of Prometheus text, shared by the Hypothesis properties and bench/fuzz.py.

Each mutation is (name, a, b) with two free integers, so Hypothesis can shrink them and a fuzzer
can derive them from raw bytes. They aim at what breaks text parsers: cut lines, broken label
syntax, escapes, odd values, duplicated or reordered lines, stray TYPE lines, NUL and non-ASCII.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

TOKENS = (
    "{",
    "}",
    '"',
    "=",
    ",",
    " ",
    "\n",
    "#",
    "# TYPE ",
    "# HELP ",
    "NaN",
    "+Inf",
    "-Inf",
    "-1",
    "1e308",
    "0x1p3",
    "_total",
    "_bucket",
    "_created",
    "_count",
    "_sum",
    'le="',
    'le="+Inf"',
    "\\",
    '\\"',
    "\\n",
    "\x00",
    "\t",
    "\r",
    "é",
    "\u2028",
    "\ud7ff",
    "vllm:",
    'engine="1"',
    'position="99"',
    "counter",
    "gauge",
    "histogram",
    "untyped",
    "summary",
    " 1 2 3",
    " 1 abc",
    "{}",
    '{="x"}',
    "{a=b}",
    "}}",
    '{le="abc"}',
    "9" * 400,
)


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _insert_token(text: str, a: int, b: int) -> str:
    i = a % (len(text) + 1)
    return text[:i] + TOKENS[b % len(TOKENS)] + text[i:]


def _delete_range(text: str, a: int, b: int) -> str:
    if not text:
        return text
    i = a % len(text)
    return text[:i] + text[i + 1 + b % 64 :]


def _replace_char(text: str, a: int, b: int) -> str:
    if not text:
        return text
    i = a % len(text)
    return text[:i] + chr(32 + b % 95 if b % 7 else b % 0x2FFF) + text[i + 1 :]


def _truncate(text: str, a: int, b: int) -> str:
    return text[: a % (len(text) + 1)]


def _duplicate_line(text: str, a: int, b: int) -> str:
    lines = _lines(text)
    i = a % len(lines)
    lines.insert(b % (len(lines) + 1), lines[i])
    return "\n".join(lines)


def _swap_lines(text: str, a: int, b: int) -> str:
    lines = _lines(text)
    i, j = a % len(lines), b % len(lines)
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


def _drop_line(text: str, a: int, b: int) -> str:
    lines = _lines(text)
    del lines[a % len(lines)]
    return "\n".join(lines)


def _change_value(text: str, a: int, b: int) -> str:
    lines = [i for i, line in enumerate(_lines(text)) if line and not line.startswith("#")]
    if not lines:
        return text
    all_lines = _lines(text)
    i = lines[a % len(lines)]
    head, _, _ = all_lines[i].rpartition(" ")
    values = ("NaN", "-1", "+Inf", "-Inf", "1e309", "0", "-0", "3.5", "1_000", "", "0x10", "1e-400", str(b))
    all_lines[i] = f"{head} {values[b % len(values)]}"
    return "\n".join(all_lines)


def _change_type(text: str, a: int, b: int) -> str:
    lines = _lines(text)
    types = [i for i, line in enumerate(lines) if line.startswith("# TYPE ")]
    if not types:
        return text
    i = types[a % len(types)]
    parts = lines[i].split(" ")
    kinds = ("counter", "gauge", "histogram", "summary", "untyped", "info", "", "counter extra")
    lines[i] = " ".join(parts[:3] + [kinds[b % len(kinds)]])
    return "\n".join(lines)


def _byte_flip(text: str, a: int, b: int) -> str:
    data = bytearray(text.encode("utf-8", "surrogatepass"))
    if not data:
        return text
    data[a % len(data)] ^= 1 << (b % 8)
    return data.decode("utf-8", "replace")


MUTATIONS = {
    "insert_token": _insert_token,
    "delete_range": _delete_range,
    "replace_char": _replace_char,
    "truncate": _truncate,
    "duplicate_line": _duplicate_line,
    "swap_lines": _swap_lines,
    "drop_line": _drop_line,
    "change_value": _change_value,
    "change_type": _change_type,
    "byte_flip": _byte_flip,
}


def apply_mutations(text: str, ops) -> str:
    for name, a, b in ops:
        text = MUTATIONS[name](text, a, b)
    return text


def mutated(payloads: Sequence[str]) -> SearchStrategy[str]:
    """A Hypothesis strategy: one of `payloads` with one to six mutations applied. Hypothesis is
    imported here, not above: a fuzzer that reads only the mutations does not need it."""
    from hypothesis import strategies as st

    op = st.tuples(st.sampled_from(sorted(MUTATIONS)), st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1))
    return st.builds(apply_mutations, st.sampled_from(payloads), st.lists(op, min_size=1, max_size=6))
