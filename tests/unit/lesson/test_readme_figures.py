"""The break-evens the README quotes are the model's: each sits between markers naming the
`specwatch breakeven` arguments it comes from, and is checked against that command's output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.unit.lesson.test_lesson import run

README = Path(__file__).parents[3] / "README.md"
MARKED = re.compile(r"<!-- breakeven ([^>]*?) -->([^<]*)<!-- /breakeven -->")


def quoted() -> list[tuple[dict[str, str], str]]:
    return [
        (dict(arg.split("=", 1) for arg in m.group(1).split()), m.group(2)) for m in MARKED.finditer(README.read_text())
    ]


def test_the_readme_quotes_break_evens_between_markers():
    assert len(quoted()) >= 2


@pytest.mark.parametrize(("args", "figure"), quoted())
def test_a_break_even_in_the_readme_is_what_breakeven_prints(args, figure):
    argv = ["breakeven", "--k", args["k"], "--batch", args["batch"], "--format", "json"]
    if "engine" in args:
        argv += ["--engine", args["engine"]]
    rc, out = run(argv)
    assert rc == 0
    (row,) = json.loads(out)["rows"]
    assert figure == f"{row['breakeven_acceptance_rate']:.2f}", (args, figure, row)
