"""The command line shared by the files generated from the config schema (chart.py writes the Helm
chart's values schema, docs.py the README's example config): rewrite the file, or with `--check`
exit 1 when it differs from what the schema gives (the CI drift check)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


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
