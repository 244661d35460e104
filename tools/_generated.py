"""What the generators of tools/ share: how a duration or size value is written for people, and
the command line that rewrites a generated file, or with `--check` exits 1 when the committed file
differs from what its source gives (the CI drift check)."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from specwatch.base.units import format_duration
from specwatch.config.kinds import Duration, DurationList, HoldTime, Kind, Size

ROOT = Path(__file__).resolve().parent.parent


def unit_text(kind: Kind, value: object) -> str | None:
    """`value` of a duration or size key as a person writes it (30s, [1m, 5m], 4MiB); None for
    any other value (a HoldTime count of polls included)."""
    if (isinstance(kind, Duration) and isinstance(value, (int, float))) or (
        isinstance(kind, HoldTime) and isinstance(value, float)
    ):
        return format_duration(value)
    if isinstance(kind, DurationList) and isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_duration(v) for v in value) + "]"
    if isinstance(kind, Size) and isinstance(value, int) and value % 2**20 == 0:
        return f"{value // 2**20}MiB"
    return None


def between(text: str, begin: str, end: str, body: str) -> str:
    """text with the lines between its `begin` and `end` markers replaced by body."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"markers {begin} ... {end} not found")
    return text[: start + len(begin)] + "\n" + body + "\n" + text[stop:]


def regenerate(
    argv: Sequence[str] | None, *, script: str, default: str, what: str, render: Callable[[str], str]
) -> int:
    """Run `python tools/<script> [FILE] [--check]`: `render` maps the file's text to the wanted
    text; `what` names the generated part in the messages."""
    parser = argparse.ArgumentParser(prog=f"python tools/{script}", description=f"write the {what} into {default}")
    parser.add_argument("file", type=Path, nargs="?", default=ROOT / default, help=f"default: {default}")
    parser.add_argument("--check", action="store_true", help=f"exit 1 if the file differs from the generated {what}")
    args = parser.parse_args(argv)
    path: Path = args.file
    current = path.read_text(encoding="utf-8")
    wanted = render(current)
    if args.check:
        if wanted != current:
            diff = difflib.unified_diff(
                current.splitlines(), wanted.splitlines(), "committed", "generated", lineterm=""
            )
            print("\n".join(list(diff)[:40]), file=sys.stderr)
            print(f"{path}: the {what} is out of date; run python tools/{script}", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        path.write_text(wanted, encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0
