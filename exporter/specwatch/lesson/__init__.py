"""The lesson's calculators: ``breakeven``, ``simulate``, ``plan``, ``memory``.

Every number comes from specwatch.costmodel, built with the same ``build_cost_model`` as the live
sidecar, so ``specwatch breakeven`` and the sidecar agree for the same inputs. Each command module
has a report function with explicit parameters and a ``cmd_*`` that reads the flags.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specwatch.lesson import breakeven, memory, plan, simulate
from specwatch.lesson.breakeven import breakeven_rows, breakeven_table, cmd_breakeven
from specwatch.lesson.memory import cmd_memory, memory_report, memory_text
from specwatch.lesson.options import cost_model_from_flags, target_options
from specwatch.lesson.plan import Rollout, cmd_plan, plan_markdown
from specwatch.lesson.simulate import (
    SimulationGrid,
    alpha_for_speedup,
    cmd_simulate,
    simulate_cell,
    simulate_report,
    simulate_text,
)


def add_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for command in (breakeven, simulate, plan, memory):
        command.add_parser(subparsers)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specwatch-lesson")
    add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except argparse.ArgumentTypeError as exc:  # a bad value found after parsing (options.UsageError)
        prog = f"specwatch-lesson {args.command}"
        print(f"{prog}: error: {exc}\n{prog}: see '{prog} --help'", file=sys.stderr)
        return 2
    return code


__all__ = [
    "Rollout",
    "SimulationGrid",
    "add_parsers",
    "alpha_for_speedup",
    "breakeven_rows",
    "breakeven_table",
    "cmd_breakeven",
    "cmd_memory",
    "cmd_plan",
    "cmd_simulate",
    "cost_model_from_flags",
    "main",
    "memory_report",
    "memory_text",
    "plan_markdown",
    "simulate_cell",
    "simulate_report",
    "simulate_text",
    "target_options",
]
