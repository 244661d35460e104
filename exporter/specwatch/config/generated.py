"""What the files generated from the config schema share (chart.py writes the Helm chart's values
schema, docs.py the README's example config): how a duration or size value is written for people,
and the command line that rewrites the file, or with `--check` exits 1 when it differs from what
the schema gives (the CI drift check)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from specwatch.base.units import format_duration
from specwatch.config.kinds import Duration, DurationList, HoldTime, Kind, Size


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


def regenerate(
    argv: Sequence[str] | None,
    *,
    module: str,
    description: str,
    file_arg: str,
    file_help: str,
    what: str,
    render: Callable[[str], str],
) -> int:
    """Run `python -m <module> FILE [--check]`: `render` maps the file's text to the wanted text;
    `what` names the generated part in the drift message."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument(file_arg, type=Path, help=file_help)
    parser.add_argument("--check", action="store_true", help=f"exit 1 if the file differs from the generated {what}")
    args = parser.parse_args(argv)
    path: Path = getattr(args, file_arg)
    current = path.read_text(encoding="utf-8")
    wanted = render(current)
    if args.check:
        if wanted != current:
            print(f"{path}: the {what} is out of date; run python -m {module} {path}", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        path.write_text(wanted, encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0
