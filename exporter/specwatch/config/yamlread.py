"""Reading a YAML config without importing PyYAML when the text lets us.

`load(text)` returns what `yaml.safe_load(text)` returns. The fast path reads the plain subset real
configs are written in: block mappings and block sequences by indentation (`- key: value` items,
a sequence at its mapping's own indentation), full-line and trailing comments, blank lines, one
leading `---`, plain scalars on one line, single-quoted scalars, double-quoted scalars without a
backslash, and the empty flow collections `[]` and `{}`. Plain scalars are resolved as PyYAML's
SafeLoader does (the YAML 1.1 resolver: its regular expressions are copied here, and a test holds
them equal to the installed PyYAML's), into str, int, float, bool or None of the simple forms.

Whatever lies outside the subset, or that the fast path is not sure of, it declines, and PyYAML
reads the text (imported only then): escapes, flow collections with content, block scalars,
anchors, aliases, tags, `?` keys, scalars over several lines, tabs, several documents, duplicate
keys, and the plain scalars PyYAML turns into anything else or by a less simple form (timestamps,
sexagesimal, octal, hexadecimal or binary numbers, `_` in numbers, .inf/.nan, `<<`, `=`). Invalid
YAML is always declined, so its error is PyYAML's, raised as YamlError with PyYAML's message.

PyYAML costs `specwatch run` some 26 modules (its C extension, Cython's runtime, and datetime,
base64, binascii and struct that its constructor imports) and is read again on every reload.
"""

from __future__ import annotations

import io
import re
from typing import IO

__all__ = ["DECLINED", "YamlError", "fast_load", "load", "read"]

#: What fast_load returns for a text outside its subset.
DECLINED: object = object()


class YamlError(Exception):
    """PyYAML refused the text; the message is PyYAML's."""


def load(text: str, *, name: str | None = None) -> object:
    """What `yaml.safe_load(text)` returns; `name` is the file named in PyYAML's errors."""
    value = fast_load(text)
    if value is not DECLINED:
        return value
    import yaml  # only for a text outside the subset the fast path reads

    stream: str | IO[str] = text
    if name is not None:
        # A stream with a name, as the file itself would be: PyYAML's error names the file.
        named = io.StringIO(text)
        named.name = name
        stream = named
    try:
        return yaml.safe_load(stream)
    except yaml.YAMLError as exc:
        raise YamlError(str(exc)) from exc


def fast_load(text: str) -> object:
    """What `yaml.safe_load(text)` returns, read without PyYAML; DECLINED outside the subset."""
    try:
        return _Reader(text).document()
    except _Decline:
        return DECLINED


def read(handle: IO[str]) -> object:
    """`load` of a text file's content, PyYAML's errors naming it."""
    name = getattr(handle, "name", None)
    return load(handle.read(), name=name if isinstance(name, str) else None)


class _Decline(Exception):
    """The text is outside the fast path's subset, or it is not sure of it."""


#: PyYAML's implicit resolvers (yaml/resolver.py, YAML 1.1), in its order: (tag, first characters
#: a match can start with, pattern). Tests hold them equal to the installed PyYAML's.
IMPLICIT_RESOLVERS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    (
        "bool",
        "yYnNtTfFoO",
        re.compile(
            r"""^(?:yes|Yes|YES|no|No|NO
                    |true|True|TRUE|false|False|FALSE
                    |on|On|ON|off|Off|OFF)$""",
            re.X,
        ),
    ),
    (
        "float",
        "-+0123456789.",
        re.compile(
            r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""",
            re.X,
        ),
    ),
    (
        "int",
        "-+0123456789",
        re.compile(
            r"""^(?:[-+]?0b[0-1_]+
                    |[-+]?0[0-7_]+
                    |[-+]?(?:0|[1-9][0-9_]*)
                    |[-+]?0x[0-9a-fA-F_]+
                    |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$""",
            re.X,
        ),
    ),
    ("merge", "<", re.compile(r"^(?:<<)$")),
    (
        "null",
        "~nN",  # and the empty scalar
        re.compile(
            r"""^(?: ~
                    |null|Null|NULL
                    | )$""",
            re.X,
        ),
    ),
    (
        "timestamp",
        "0123456789",
        re.compile(
            r"""^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]
                    |[0-9][0-9][0-9][0-9] -[0-9][0-9]? -[0-9][0-9]?
                     (?:[Tt]|[ \t]+)[0-9][0-9]?
                     :[0-9][0-9] :[0-9][0-9] (?:\.[0-9]*)?
                     (?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$""",
            re.X,
        ),
    ),
    ("value", "=", re.compile(r"^(?:=)$")),
    ("yaml", "!&*", re.compile(r"^(?:!|&|\*)$")),
)

_BOOLS = {"yes": True, "no": False, "true": True, "false": False, "on": True, "off": False}
#: The int and float forms read here; the others PyYAML resolves (with `_`, `:`, a base, inf or
#: nan) are declined.
_SIMPLE_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_SIMPLE_FLOAT = re.compile(r"[-+]?[0-9]+\.[0-9]*(?:[eE][-+][0-9]+)?|\.[0-9]+(?:[eE][-+][0-9]+)?")
#: Characters outside these (tabs, CR, YAML 1.1's other line breaks, the BOM, what PyYAML's reader
#: refuses as non-printable) are declined wherever they are.
_OUTSIDE = re.compile("[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")
#: Characters a plain scalar cannot start with (`-`, `?` and `:` only when a space follows).
_INDICATORS = frozenset(",[]{}#&*!|>'\"%@`")
#: PyYAML takes a simple key of at most 1024 characters; kept well inside.
_MAX_KEY = 1000
#: Longer ints are left to PyYAML (Python refuses to convert over 4300 digits).
_MAX_DIGITS = 100


def resolve(value: str) -> object:
    """A plain scalar as PyYAML's SafeLoader constructs it; declines the forms not read here."""
    first = value[:1]
    for tag, firsts, pattern in IMPLICIT_RESOLVERS:
        if (first in firsts if first else tag == "null") and pattern.match(value):
            break
    else:
        return value
    if tag == "null":
        return None
    if tag == "bool":
        return _BOOLS[value.lower()]
    if tag == "int" and _SIMPLE_INT.fullmatch(value) and len(value) <= _MAX_DIGITS:
        return int(value)
    if tag == "float" and _SIMPLE_FLOAT.fullmatch(value):
        return float(value)
    raise _Decline


class _Line:
    """A line holding content: its indentation and its text after that (trailing spaces dropped)."""

    __slots__ = ("indent", "text")

    def __init__(self, indent: int, text: str) -> None:
        self.indent = indent
        self.text = text


def _is_item(text: str) -> bool:
    return text == "-" or text.startswith("- ")


class _Reader:
    """One pass over the lines; raises _Decline at the first thing outside the subset."""

    def __init__(self, text: str) -> None:
        if _OUTSIDE.search(text):
            raise _Decline
        self.lines: list[_Line] = []
        started = False
        for raw in text.split("\n"):
            body = raw.lstrip(" ")
            if not body or body.startswith("#"):
                continue
            indent = len(raw) - len(body)
            if indent == 0 and body[:3] in ("---", "...") and body[3:4] in ("", " "):
                rest = body[3:].lstrip(" ")
                if body.startswith("---") and not started and not self.lines and (not rest or rest[0] == "#"):
                    started = True
                    continue
                raise _Decline  # several documents, a document end, content after `---`
            self.lines.append(_Line(indent, body.rstrip(" ")))

    def document(self) -> object:
        if not self.lines:
            return None
        first = self.lines[0]
        if not _is_item(first.text):
            kind, scalar, _rest = self.split(first.text)
            if kind == "scalar":
                if len(self.lines) > 1:
                    raise _Decline
                return scalar
        value, end = self.block(0, first.indent)
        if end != len(self.lines):
            raise _Decline  # a line left over: PyYAML's error, or a structure not read here
        return value

    def block(self, i: int, indent: int) -> tuple[object, int]:
        """The mapping or sequence whose first line is lines[i], at `indent`."""
        if _is_item(self.lines[i].text):
            return self.sequence(i, indent)
        return self.mapping(i, indent)

    def mapping(self, i: int, indent: int) -> tuple[dict[object, object], int]:
        out: dict[object, object] = {}
        lines = self.lines
        while i < len(lines) and lines[i].indent == indent:
            kind, key, rest = self.split(lines[i].text)
            if kind != "key":
                raise _Decline
            if key in out:
                raise _Decline  # a duplicate key (1, 1.0 and true are one key to a dict)
            i += 1
            if rest:
                out[key] = self.value(rest)
                if i < len(lines) and lines[i].indent > indent:
                    raise _Decline  # a scalar going on over lines, or an error
            elif i < len(lines) and lines[i].indent > indent:
                out[key], i = self.block(i, lines[i].indent)
            elif i < len(lines) and lines[i].indent == indent and _is_item(lines[i].text):
                out[key], i = self.sequence(i, indent)
            else:
                out[key] = None
        return out, i

    def sequence(self, i: int, indent: int) -> tuple[list[object], int]:
        out: list[object] = []
        lines = self.lines
        while i < len(lines) and lines[i].indent == indent and _is_item(lines[i].text):
            text = lines[i].text
            body = text[1:].lstrip(" ")
            if not body or body.startswith("#") or _is_item(body):
                raise _Decline  # an empty item, or a sequence in a sequence on one line
            column = indent + len(text) - len(body)
            kind, _key, _rest = self.split(body)
            if kind == "key":
                lines[i] = _Line(column, body)  # the item's mapping starts at its first key
                item, i = self.mapping(i, column)
                out.append(item)
                continue
            out.append(self.value(body))
            i += 1
            if i < len(lines) and lines[i].indent > indent:
                raise _Decline
        return out, i

    def value(self, text: str) -> object:
        kind, value, _rest = self.split(text)
        if kind != "scalar":
            raise _Decline  # `a: b: c`, PyYAML's error
        return value

    def split(self, text: str) -> tuple[str, object, str]:
        """("key", the key, the text after `: `) or ("scalar", its value, "") for a line's text."""
        head = text[0]
        scalar: object
        if head in "'\"":
            scalar, end = _quoted(text)
        elif head in "[{":
            closing = "]" if head == "[" else "}"
            if text[1:2] != closing:
                raise _Decline  # a flow collection with content
            scalar, end = ([] if head == "[" else {}), 2
        elif head in _INDICATORS or (head in "-?:" and text[1:2] in ("", " ")):
            raise _Decline
        else:
            return _plain(text)
        after = text[end:]
        rest = after.lstrip(" ")
        if not rest:
            return "scalar", scalar, ""
        if rest[0] == "#" and rest != after:
            return "scalar", scalar, ""
        if rest[0] == ":" and rest[1:2] in ("", " ") and end <= _MAX_KEY and isinstance(scalar, str):
            return "key", scalar, _after_colon(rest)
        raise _Decline


def _after_colon(rest: str) -> str:
    """The value's text after a key's `:`, comment dropped."""
    value = rest[1:].lstrip(" ")
    return "" if value.startswith("#") else value


def _plain(text: str) -> tuple[str, object, str]:
    """A plain scalar from the start of `text`: ends at `: ` (a key), ` #` (a comment) or the end."""
    n = len(text)
    j = 0
    while j < n:
        ch = text[j]
        if ch == ":" and (j + 1 == n or text[j + 1] == " "):
            if j > _MAX_KEY:
                raise _Decline
            return "key", resolve(text[:j].rstrip(" ")), _after_colon(text[j:])
        if ch == "#" and text[j - 1] == " ":
            break
        j += 1
    return "scalar", resolve(text[:j].rstrip(" ")), ""


def _quoted(text: str) -> tuple[str, int]:
    """A quoted scalar closed on its line, and where it ends; declines a backslash in "..."."""
    quote = text[0]
    parts = []
    j = 1
    while True:
        close = text.find(quote, j)
        if close < 0:
            raise _Decline  # goes on over lines, or an error
        parts.append(text[j:close])
        if quote == "'" and text[close + 1 : close + 2] == "'":
            parts.append("'")
            j = close + 2
            continue
        value = "".join(parts)
        if quote == '"' and "\\" in value:
            raise _Decline
        return value, close + 1
