"""The break-evens the README quotes are the model's: each sits between markers naming the
`specwatch breakeven` arguments it comes from (k, batch, and optionally model, dtype, tp, engine),
and is checked against that command's output. SPECWATCH_UPDATE_GOLDEN=1 rewrites the figures."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.unit.lesson.test_lesson import run

README = Path(__file__).parents[3] / "README.md"
MARKED = re.compile(r"<!-- breakeven ([^>]*?) -->([^<]*)<!-- /breakeven -->")
#: Marker argument -> breakeven flag.
FLAGS = {"k": "--k", "batch": "--batch", "model": "--model", "dtype": "--dtype", "tp": "--tp", "engine": "--engine"}
UPDATE = os.environ.get("SPECWATCH_UPDATE_GOLDEN") == "1"


def quoted() -> list[tuple[dict[str, str], str]]:
    return [
        (dict(arg.split("=", 1) for arg in m.group(1).split()), m.group(2)) for m in MARKED.finditer(README.read_text())
    ]


def printed(args: dict[str, str]) -> str:
    """The figure `specwatch breakeven` prints for a marker's arguments, as the README quotes it."""
    argv = ["breakeven", "--format", "json"]
    for name, value in args.items():
        argv += [FLAGS[name], value]
    rc, out = run(argv)
    assert rc == 0
    (row,) = json.loads(out)["rows"]
    return f"{row['breakeven_acceptance_rate']:.2f}"


def regenerate(text: str) -> str:
    """The README with every marked figure recomputed."""

    def figure(m: re.Match[str]) -> str:
        args = dict(arg.split("=", 1) for arg in m.group(1).split())
        return f"<!-- breakeven {m.group(1)} -->{printed(args)}<!-- /breakeven -->"

    return MARKED.sub(figure, text)


def test_the_readme_quotes_break_evens_between_markers():
    if UPDATE:
        README.write_text(regenerate(README.read_text()))
    assert len(quoted()) >= 2


@pytest.mark.parametrize(("args", "figure"), quoted())
def test_a_break_even_in_the_readme_is_what_breakeven_prints(args, figure):
    assert set(args) <= set(FLAGS), args
    assert figure == printed(args), (args, figure)
