"""The CLI's parser lays its help out exactly as argparse does, at the width shutil would find,
without importing shutil (argparse imports it, with bz2, lzma and fnmatch, for every argument)."""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys

import pytest

from specwatch.cli.args import CliHelpFormatter, terminal_columns
from specwatch.cli.main import build_parser


@pytest.mark.parametrize("columns", [None, "", "0", "-4", "wide", "1", "57", "80", "240"])
def test_terminal_columns_is_the_width_shutil_finds(monkeypatch, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert terminal_columns() == shutil.get_terminal_size().columns


def test_terminal_columns_without_a_stdout_falls_back_as_shutil_does(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "__stdout__", None)
    assert terminal_columns() == shutil.get_terminal_size().columns == 80
    monkeypatch.setattr(sys, "__stdout__", io.StringIO())  # no file descriptor
    assert terminal_columns() == shutil.get_terminal_size().columns == 80


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [parser] + [p for sub in subs for p in sub.choices.values()]


@pytest.mark.parametrize("columns", ["30", "80", "133"])
def test_every_commands_help_is_argparses_own_layout(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    parsers = _parsers(build_parser())
    assert len(parsers) > 4
    for parser in parsers:
        assert parser.formatter_class is CliHelpFormatter
        ours = parser.format_help()
        parser.formatter_class = argparse.HelpFormatter
        assert ours == parser.format_help(), parser.prog


def test_parsing_a_run_command_line_imports_no_shutil():
    code = (
        "import sys\nfrom specwatch.cli.main import build_parser, modules_for\n"
        "modules, listed = modules_for('run')\n"
        "build_parser(modules, listed=listed).parse_args(['run', '--target', 'http://127.0.0.1:9/metrics'])\n"
        "print('shutil' in sys.modules, 'lzma' in sys.modules, 'bz2' in sys.modules)"
    )
    env = {**os.environ, "COLUMNS": "100"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60, env=env)
    assert out.stdout.split() == ["False", "False", "False"]
