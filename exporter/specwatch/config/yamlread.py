"""Reading a YAML config without importing PyYAML when the text lets us.

`load(text)` returns what `yaml.safe_load(text)` returns. The fast path reads the plain subset real
configs are written in: block mappings and block sequences by indentation (`- key: value` items,
a sequence at its mapping's own indentation), full-line and trailing comments, blank lines, one
leading `---`, plain scalars on one line, single-quoted scalars, double-quoted scalars without a
backslash, and flow collections on one line (`[1m, 5m]`, `{k: v}`, nested) of simple words and
quoted scalars. Plain scalars are resolved as PyYAML's
SafeLoader does (the YAML 1.1 resolver, followed by hand: a test holds it to the installed PyYAML's),
into str, int, float, bool or None of the simple forms.

Whatever lies outside the subset, or that the fast path is not sure of, it declines, and PyYAML
reads the text (imported only then): escapes, flow collections over lines or holding anything
else (`,` inside a plain word, `[a: b]`, a trailing comma, ...), block scalars,
anchors, aliases, tags, `?` keys, scalars over several lines, tabs, several documents, duplicate
keys, and the plain scalars PyYAML turns into anything else or by a less simple form (timestamps,
sexagesimal, octal, hexadecimal or binary numbers, `_` in numbers, .inf/.nan, `<<`, `=`). Invalid
YAML is always declined, so its error is PyYAML's, raised as YamlError with PyYAML's message.

Why: PyYAML (its C extension, Cython's runtime, and the datetime, base64, binascii and struct its
constructor imports) is otherwise the only YAML a running sidecar needs, for a file it reads at
start and on every reload (bench/config_read.py measures both ways).
"""

from __future__ import annotations

import io
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


# PyYAML's SafeLoader resolves a plain scalar by the patterns of yaml/resolver.py (YAML 1.1). They
# are followed here by hand, not with `re`: a running sidecar imports no `re` (about 35 modules).
# Tests hold `kind` to PyYAML's resolver on every form and on random text.

_DIGITS = frozenset("0123456789")
_BOOLS = {
    word: value
    for words, value in (("yes true on", True), ("no false off", False))
    for lower in words.split()
    for word in (lower, lower.capitalize(), lower.upper())
}
_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_SPECIAL = frozenset(("inf", "Inf", "INF"))
_NAN = frozenset(("nan", "NaN", "NAN"))
#: Characters a plain scalar cannot start with (`-`, `?` and `:` only when a space follows).
_INDICATORS = frozenset(",[]{}#&*!|>'\"%@`")
#: PyYAML takes a simple key of at most 1024 characters; kept well inside.
_MAX_KEY = 1000
#: Longer ints are left to PyYAML (Python refuses to convert over 4300 digits).
_MAX_DIGITS = 100


def _only(text: str, allowed: str | frozenset[str]) -> bool:
    return all(c in allowed for c in text)


def _sexagesimal(text: str) -> bool:
    """`(?::[0-5]?[0-9])+` exactly: `text` is one or more `:` and one or two digits (first 0-5)."""
    groups = text.split(":")
    return (
        len(groups) > 1
        and groups[0] == ""
        and all(
            (len(g) == 1 and g in _DIGITS) or (len(g) == 2 and g[0] in "012345" and g[1] in _DIGITS) for g in groups[1:]
        )
    )


def _is_int(value: str) -> bool:
    """PyYAML's int pattern: binary, octal, decimal, hexadecimal, sexagesimal, `_` anywhere after."""
    body = value[1:] if value[:1] in ("-", "+") else value
    if body[:2] == "0b":
        return len(body) > 2 and _only(body[2:], "01_")
    if body[:2] == "0x":
        return len(body) > 2 and _only(body[2:], "0123456789abcdefABCDEF_")
    if body[:1] == "0":
        return body == "0" or _only(body[1:], "01234567_")
    if body[:1] not in _DIGITS:
        return False
    head, colon, tail = body.partition(":")
    return _only(head, "0123456789_") and (not colon or _sexagesimal(colon + tail))


def _is_float(value: str) -> bool:
    """PyYAML's float pattern: `1.5`, `1.`, `1.5e+3` (the exponent signed), `.5` (unsigned),
    sexagesimal `1:30.5`, `_` after the first digit, `.inf` (signed or not), `.nan`."""
    if value[:1] == ".":
        return value[1:] in _SPECIAL or value[1:] in _NAN or _fraction(value[1:], first_digit=True)
    body = value[1:] if value[:1] in ("-", "+") else value
    if body[:1] == ".":
        return body[1:] in _SPECIAL
    if body[:1] not in _DIGITS:
        return False
    whole, dot, fraction = body.partition(".")
    if not dot:
        return False
    head, colon, tail = whole.partition(":")
    if not _only(head, "0123456789_"):
        return False
    if colon:
        return _sexagesimal(colon + tail) and _only(fraction, "0123456789_")
    return _fraction(fraction, first_digit=False)


def _fraction(text: str, *, first_digit: bool) -> bool:
    """`[0-9_]*(?:[eE][-+][0-9]+)?` (with first_digit: `[0-9][0-9_]*...`)."""
    if first_digit and text[:1] not in _DIGITS:
        return False
    end = 0
    while end < len(text) and (text[end] in _DIGITS or text[end] == "_"):
        end += 1
    exponent = text[end:]
    return not exponent or (
        exponent[0] in "eE" and exponent[1:2] in ("-", "+") and len(exponent) > 2 and _only(exponent[2:], _DIGITS)
    )


def _may_be_timestamp(value: str) -> bool:
    """Every match of PyYAML's timestamp pattern starts so (`2001-12-14`, `2001-1-2 3:04:05`);
    some strings that do are not timestamps, and are declined all the same."""
    return len(value) >= 8 and _only(value[:4], _DIGITS) and value[4] == "-"


def kind(value: str) -> str:
    """What PyYAML's resolver makes of a plain scalar: "null", "bool", "int", "float", "str", or
    "other" (a timestamp or something that may be one, `<<`, `=`)."""
    if value in _NULLS:
        return "null"
    if value in _BOOLS:
        return "bool"
    if value in ("<<", "="):
        return "other"
    first = value[0]
    if first not in "-+.0123456789":
        return "str"
    if _is_float(value):
        return "float"
    if _is_int(value):
        return "int"
    if _may_be_timestamp(value):
        return "other"
    return "str"


def resolve(value: str) -> object:
    """A plain scalar as PyYAML's SafeLoader constructs it; declines the forms not read here."""
    found = kind(value)
    if found == "str":
        return value
    if found == "null":
        return None
    if found == "bool":
        return _BOOLS[value]
    body = value[1:] if value[:1] in ("-", "+") else value
    if found == "int" and (body == "0" or body[0] != "0") and _only(body, _DIGITS) and len(body) <= _MAX_DIGITS:
        return int(value)  # [-+]?(0|[1-9][0-9]*)
    if found == "float" and _only(value, "0123456789.eE+-"):
        return float(value)  # no `_`, `:`, inf or nan
    raise _Decline


def _printable(text: str) -> bool:
    """No tab, CR, BOM, YAML 1.1 line break other than LF, nor what PyYAML's reader refuses."""
    if text.isascii():
        return all(" " <= c <= "~" or c == "\n" for c in set(text))
    return all(
        " " <= c <= "~"
        or c == "\n"
        or ("\xa0" <= c <= "\ud7ff" and c not in ("\u2028", "\u2029"))
        or ("\ue000" <= c <= "\ufffd" and c != "\ufeff")
        or c >= "\U00010000"
        for c in set(text)
    )


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
        if not _printable(text):
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
            form, scalar, _rest = self.split(first.text)
            if form == "scalar":
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
            form, key, rest = self.split(lines[i].text)
            if form != "key":
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
            form, _key, _rest = self.split(body)
            if form == "key":
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
        form, value, _rest = self.split(text)
        if form != "scalar":
            raise _Decline  # `a: b: c`, PyYAML's error
        return value

    def split(self, text: str) -> tuple[str, object, str]:
        """("key", the key, the text after `: `) or ("scalar", its value, "") for a line's text."""
        head = text[0]
        scalar: object
        if head in "'\"":
            scalar, end = _quoted(text)
        elif head in "[{":
            scalar, end = _flow(text, 0)
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


#: What a plain scalar inside a flow collection may hold here (PyYAML's rules there differ: `,`,
#: `[]{}`, `?` and `:` end or change it); anything else in a flow collection is declined.
_FLOW_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/+-~")
_ALNUM_DOT = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.")


def _skip(text: str, at: int) -> int:
    while text[at : at + 1] == " ":
        at += 1
    return at


def _flow(text: str, at: int) -> tuple[object, int]:
    """The flow collection opening at text[at] (`[a, b]`, `{k: v}`, nested), closed on its line,
    each entry a scalar or a flow collection; and where it ends."""
    closing = "]" if text[at] == "[" else "}"
    items: list[object] = []
    mapping: dict[object, object] = {}
    at = _skip(text, at + 1)
    if text[at : at + 1] == closing:
        return (items if closing == "]" else mapping), at + 1
    while True:
        start = at
        node, at = _flow_node(text, at)
        at = _skip(text, at)
        if closing == "]":
            items.append(node)
        else:
            if text[at : at + 2] != ": " or isinstance(node, list | dict) or node in mapping or at - start > _MAX_KEY:
                raise _Decline  # a key without `: `, a collection as a key, a duplicate key, a long key
            mapping[node], at = _flow_node(text, _skip(text, at + 2))
            at = _skip(text, at)
        if text[at : at + 1] == closing:
            return (items if closing == "]" else mapping), at + 1
        if text[at : at + 1] != ",":
            raise _Decline  # `[a: b]`, `[a b]`, an unclosed collection, ...
        at = _skip(text, at + 1)
        if text[at : at + 1] in (",", closing):
            raise _Decline  # an empty entry, a trailing comma


def _flow_node(text: str, at: int) -> tuple[object, int]:
    head = text[at : at + 1]
    if head in ("[", "{"):
        return _flow(text, at)
    if head in ("'", '"'):
        value, length = _quoted(text[at:])
        return value, at + length
    end = at
    while end < len(text) and text[end] in _FLOW_PLAIN:
        end += 1
    word = text[at:end]
    if not word or (word[0] == "-" and word[1:2] not in _ALNUM_DOT):
        raise _Decline
    return resolve(word), end
