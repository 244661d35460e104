"""`specwatch --help` lists every command without importing the simulator, the lesson or backtest;
each command imports only its own modules. The table the help is built from is checked
against what the modules register."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

from specwatch.cli.main import CORE_COMMANDS, PLUGIN_COMMANDS, SUBCOMMAND_MODULES, build_parser


def _registered() -> dict[str, str]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parsers(sub)
    return {action.dest: action.help for action in sub._choices_actions}


def test_the_listed_commands_are_what_the_modules_register_in_order_with_their_help():
    assert _registered() == {command: text for command, (_, text) in PLUGIN_COMMANDS.items()}
    assert {m for modules, _ in PLUGIN_COMMANDS.values() for m in modules} == set(SUBCOMMAND_MODULES)


def test_the_help_lists_the_same_commands_as_the_full_parser():
    def commands(parser: argparse.ArgumentParser) -> list[tuple[str, str | None]]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return [(a.dest, a.help) for a in sub._choices_actions]

    assert commands(build_parser((), listed=True)) == commands(build_parser())


def _modules_after(*argv: str) -> set[str]:
    code = (
        "import sys\nfrom specwatch.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print('\\n'.join(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True, timeout=60)
    return set(out.stdout.split())


def test_help_and_run_help_import_neither_the_simulator_nor_the_lesson():
    for argv in (["--help"], ["run", "--help"], ["check-config", "--help"]):
        loaded = _modules_after(*argv)
        heavy = {m for m in loaded if m.startswith(("specwatch.sim", "specwatch.lesson", "specwatch.fleet.backtest"))}
        assert heavy == set(), argv
    assert "specwatch.sim.cli" in _modules_after("sim", "--help")
    assert CORE_COMMANDS == ("run", "check-config", "record", "replay")
