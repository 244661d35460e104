"""Every lesson command that prints a table also writes it as CSV: the same rows as its JSON,
one header line, nested values as dotted columns."""

from __future__ import annotations

import csv
import io
import json

import pytest

from specwatch.cli.main import main


def _run(capsys, *argv: str) -> str:
    assert main(list(argv)) in (0, 1)
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "rows_of"),
    [
        (("breakeven", "--k", "2,3", "--batch", "1,64", "--alpha", "0.7"), lambda doc: doc["rows"]),
        (
            ("simulate", "--alphas", "0.5,0.8", "--k", "2", "--batch", "1,16", "--requests", "8"),
            lambda doc: doc["grid"],
        ),
        (("memory",), lambda doc: [{"component": n, **f} for n, f in doc["components"].items()]),
    ],
)
def test_csv_has_the_json_rows(capsys, argv, rows_of):
    rows = rows_of(json.loads(_run(capsys, *argv, "--format", "json")))
    table = list(csv.DictReader(io.StringIO(_run(capsys, *argv, "--format", "csv"))))
    assert len(table) == len(rows) > 0
    for got, want in zip(table, rows, strict=True):
        for key, value in want.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert float(got[key]) == pytest.approx(float(value))
