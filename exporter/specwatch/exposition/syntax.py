"""The text format's syntax, line by line: label sets, values, and the pattern that finds the lines
a selector acts on. Every error is an ExpositionError with reason 'parse' or 'invalid' (a limit)."""

from __future__ import annotations

import re

from specwatch.exposition.samples import MAX_LABEL_VALUE_LENGTH, MAX_LABELS_PER_SERIES, ExpositionError, Labels

TYPE_PREFIX = "# TYPE "
_WS = r"[^\S\n]"  # whitespace inside one line, as str.split() sees it (\n ends the line)


# One line for Selector._read: (`name{labels}`, value text, "") when already cut, else ("", "", line).
Line = tuple[str, str, str]


def suffixes(kind: str) -> tuple[str, ...]:
    if kind == "counter":
        return ("_total", "_created")
    if kind == "histogram":
        return ("_bucket", "_sum", "_count", "_created")
    return ("",)


def parse_labels(text: str, start: int, lineno: int) -> tuple[Labels, int]:
    """Parse `{a="b",c="d"}` beginning at text[start] == '{'; return labels and the index after '}'."""
    labels: list[tuple[str, str]] = []
    i = start + 1
    n = len(text)
    while True:
        while i < n and text[i] == " ":
            i += 1
        if i < n and text[i] == "}":
            return tuple(labels), i + 1
        eq = text.find("=", i)
        if eq < 0:
            raise ExpositionError("parse", "label without '='", lineno)
        name = text[i:eq].strip()
        if not name or not (name[0].isalpha() or name[0] == "_") or not name.replace("_", "a").isalnum():
            raise ExpositionError("parse", f"bad label name {name[:40]!r}", lineno)
        i = eq + 1
        if i >= n or text[i] != '"':
            raise ExpositionError("parse", "label value must be quoted", lineno)
        i += 1
        close = text.find('"', i)
        if close < 0:
            raise ExpositionError("parse", "unterminated label value", lineno)
        if "\\" in text[i:close] or text[close - 1] == "\\":
            value, i = _parse_escaped(text, i, lineno)
        else:
            value, i = text[i:close], close + 1
        if len(value) > MAX_LABEL_VALUE_LENGTH:
            raise ExpositionError("invalid", f"label {name} value longer than {MAX_LABEL_VALUE_LENGTH}", lineno)
        labels.append((name, value))
        if len(labels) > MAX_LABELS_PER_SERIES:
            raise ExpositionError("invalid", f"more than {MAX_LABELS_PER_SERIES} labels on one series", lineno)
        while i < n and text[i] == " ":
            i += 1
        if i < n and text[i] == ",":
            i += 1
            continue
        if i < n and text[i] == "}":
            return tuple(labels), i + 1
        raise ExpositionError("parse", "expected ',' or '}' after a label", lineno)


def _parse_escaped(text: str, i: int, lineno: int) -> tuple[str, int]:
    out = []
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            if i + 1 >= n:
                break
            nxt = text[i + 1]
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
            i += 2
        elif ch == '"':
            return "".join(out), i + 1
        else:
            out.append(ch)
            i += 1
    raise ExpositionError("parse", "unterminated label value", lineno)


def parse_value(text: str, lineno: int) -> float:
    """The text after the series when float() alone refused it: `value [timestamp]`, or an error."""
    parts = text.split()
    if not parts or len(parts) > 2:
        raise ExpositionError("parse", "expected 'value [timestamp]' after the series", lineno)
    if len(parts) == 2:
        try:
            int(parts[1])
        except ValueError:
            raise ExpositionError("parse", f"bad timestamp {parts[1][:40]!r}", lineno) from None
    raw = parts[0]
    try:
        return float(raw)
    except ValueError:
        raise ExpositionError("parse", f"bad sample value {raw[:40]!r}", lineno) from None


def every_line(text: str) -> list[Line]:
    return [("", "", line) for line in text.split("\n")]


def _common_start(words: tuple[str, ...]) -> str:
    """The longest string every word starts with (that of the first and last in sorted order)."""
    first, last = min(words), max(words)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n]


def line_finder(prefixes: tuple[str, ...], type_names: tuple[str, ...]) -> re.Pattern[str]:
    """A pattern whose findall() returns, in order, as `Line`s, every line (after the first) that
    starts with one of `prefixes`, every TYPE line naming one of `type_names`, and every other TYPE
    line but `# TYPE name type` in printable ASCII with single spaces: among them, every TYPE line
    that str.split() would not cut into exactly four fields.

    A plain sample line, `name{labels} value` or `name value` with no brace in the name or value,
    no `}` inside the labels and no timestamp, comes already cut: (`name{labels}`, `value`, "").
    That is the cut the line scan makes (the first brace opens the labels, the last `}` closes
    them, the value follows). Any other selected line comes whole: ("", "", line)."""
    return _finder(prefixes, type_names, cut=True)


def whole_line_finder(prefixes: tuple[str, ...], type_names: tuple[str, ...]) -> re.Pattern[str]:
    """`line_finder` without the cut: findall() returns the same lines, each whole, as strings.
    Cheaper to run (one string per line, no attempt at the plain sample's shape): for a reader that
    already knows what the lines should look like (lastpoll.LastPoll.reread_lines)."""
    return _finder(prefixes, type_names, cut=False)


def alternation(words: tuple[str, ...]) -> str:
    """A pattern matching exactly the strings of `words` (none empty), written as their trie: each
    point where the words part is one alternation on the next character, so a line is tested
    against the few branches that can still match it rather than against every word in turn (the
    re engine tries an alternation's branches one after another)."""
    ordered = sorted(set(words))
    if len(ordered) == 1:
        return re.escape(ordered[0])
    shared = _common_start(tuple(ordered))
    rests = [word[len(shared) :] for word in ordered]
    ends_here = "" in rests
    by_first: dict[str, list[str]] = {}
    for rest in rests:
        if rest:
            by_first.setdefault(rest[0], []).append(rest)
    branches = [alternation(tuple(group)) for group in by_first.values()]
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    if ends_here:  # a word that is a prefix of others: the rest is optional
        body = "(?:" + body + ")?"
    return re.escape(shared) + body


def _finder(prefixes: tuple[str, ...], type_names: tuple[str, ...], *, cut: bool) -> re.Pattern[str]:
    branches = []
    if prefixes:
        names = f"(?:{alternation(prefixes)})"
        plain = rf"({names}[^ {{}}\n]*(?:\{{[^}}\n]*\}})?) ([^ {{}}\n]+)(?=\n|\Z)"
        branches.append(rf"{names}[^\n]*")
    else:
        plain = "()()(?!)"
    type_branches = []
    if type_names:
        type_branches.append(rf"{_WS}*(?:{alternation(type_names)}){_WS}[^\n]*")
    # Every other TYPE line but those of the one shape exporters print, `# TYPE name type` in
    # printable ASCII with single spaces: it is cheaper to tell than str.split()'s four fields, and
    # each TYPE line it lets through that str.split() would cut in four is one `_read` looks at and
    # passes over (another family's, well formed), as the line scan does.
    type_branches.append(r"(?![!-~]+ [!-~]+(?:\n|\Z))[^\n]*")
    branches.append(re.escape(TYPE_PREFIX) + "(?:" + "|".join(type_branches) + ")")
    # A guard the branches imply, cheaper than trying them: most lines start with neither a
    # prefix's first characters nor a TYPE line, so the guard skips them at the cost of one test.
    guard = [re.escape(TYPE_PREFIX)]
    if prefixes:
        common = _common_start(prefixes)
        following = sorted({p[len(common)] for p in prefixes if len(p) > len(common)})
        if following and all(len(p) > len(common) for p in prefixes):
            guard.append(re.escape(common) + "[" + "".join(re.escape(c) for c in following) + "]")
        else:
            guard.append(re.escape(common))
    whole = "(" + "|".join(branches) + ")"
    return re.compile(r"\n(?=" + "|".join(guard) + ")(?:" + (plain + "|" + whole if cut else whole) + ")")
