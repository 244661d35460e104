"""The parser every `specwatch` command uses, and the one shape of a bad-input error.

Bad input (a flag, a value out of range, an environment variable, a config key) is always two
lines on stderr and exit status 2, never a traceback or argparse's usage block:

    specwatch demo: error: --speed 0: must be > 0
    specwatch demo: see 'specwatch demo --help'

Commands report a bad value found after parsing by raising ``argparse.ArgumentTypeError`` (the
lesson and the simulator cannot import this module); ``main`` prints it in this shape.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, NoReturn

EXIT_USAGE = 2

_CHOICES = re.compile(r"invalid choice: '(?P<got>[^']*)' \(choose from (?P<choices>.*)\)$")


def fail(prog: str, message: str, *, label: str = "error") -> NoReturn:
    """Print the error line and the hint line, exit 2."""
    print(f"{prog}: {label}: {message}", file=sys.stderr)
    print(f"{prog}: see '{prog} --help'", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def _short_choices(message: str) -> str:
    """argparse lists every choice (21 model presets on one line): name the closest instead."""
    match = _CHOICES.search(message)
    if match is None:
        return message
    choices = [c.strip().strip("'") for c in match.group("choices").split(",")]
    import difflib  # only on a usage error

    near = difflib.get_close_matches(match.group("got"), choices, n=3, cutoff=0.5)
    head = message[: match.start()] + f"invalid choice {match.group('got')!r}"
    if near:
        return head + f" (did you mean {' or '.join(near)}?)"
    if len(choices) <= 6:
        return head + f" (choose from {', '.join(choices)})"
    return head + f" ({len(choices)} choices, listed in --help)"


def terminal_columns() -> int:
    """The terminal's width as shutil.get_terminal_size() gives it: COLUMNS when a positive
    integer, else the width of the terminal on stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        size = os.get_terminal_size(sys.__stdout__.fileno())  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80
    return size.columns or 80


class CliHelpFormatter(argparse.HelpFormatter):
    """argparse's help layout at the terminal's width, found without shutil: argparse imports
    shutil (and bz2, lzma and fnmatch with it) only to ask the width, and builds a formatter for
    every argument a parser is given, so every command, a running sidecar too, would import them."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, terminal_columns() - 2 if width is None else width)


class CliParser(argparse.ArgumentParser):
    """argparse with specwatch's error shape and help formatter (sub-parsers inherit the class)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", CliHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail(self.prog, _short_choices(message))


def subparser_for(parser: argparse.ArgumentParser, command: str | None) -> argparse.ArgumentParser:
    """The sub-parser of `command` (its prog names the command in error lines), else parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            chosen: argparse.ArgumentParser = action.choices[command]
            return chosen
    return parser
