"""Command line: run, demo, record, replay, backtest, check-config, and the lesson's calculators."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import signal
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from specwatch import __version__
from specwatch.cli.args import CliParser, fail, subparser_for

if TYPE_CHECKING:
    from specwatch.config import Config, ConfigError

EXIT_CONFIG = 2
#: Ran, but produced nothing useful (a recording of errors only, a replay without evaluations).
EXIT_NOTHING = 1
EXIT_INTERRUPTED = 130

#: Config keys that a flag sets: an error in one names the flag the user typed, not the key.
FLAG_KEYS = {
    "listen": "--listen",
    "targets": "--target",
    "targets[0]": "--target",
    "targets[0].url": "--target",
    "alerting": "--alert-window",
    "alerting.window": "--alert-window",
}

# Modules that contribute subcommands through add_parsers(subparsers). Imported only when the
# command is not one of this module's own, so `specwatch replay` does not load the simulator,
# the lesson tools or the HTTP server (start-up is part of every replay's cost). cli.breakeven
# follows the lesson: it gives the lesson's `breakeven` the sidecar's verdict for each row.
SUBCOMMAND_MODULES = (
    "specwatch.lesson",
    "specwatch.cli.breakeven",
    "specwatch.sim",
    "specwatch.cli.demo",
    "specwatch.fleet.backtest",
)
CORE_COMMANDS = ("run", "check-config", "record", "replay")

# The subcommands SUBCOMMAND_MODULES add, in their order, with the modules each needs and its help:
# `specwatch --help` (and a mistyped command) lists them from here without importing the simulator,
# the lesson or backtest; a command imports only its own modules. Checked against what the modules
# register by tests/unit/cli/test_lazy_commands.py.
PLUGIN_COMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    "breakeven": (("specwatch.lesson", "specwatch.cli.breakeven"), "break-even acceptance rate vs batch size"),
    "simulate": (("specwatch.lesson",), "the lesson's toy speculative decode simulator"),
    "plan": (("specwatch.lesson",), "staged rollout plan (markdown)"),
    "memory": (("specwatch.lesson",), "memory of an EAGLE-3 head vs a classic draft model"),
    "sim": (
        ("specwatch.sim",),
        "run the simulated vLLM (serve /metrics on loopback, or --record a JSONL recording)",
    ),
    "demo": (("specwatch.cli.demo",), "run the built-in simulated vLLM and the sidecar, and print a live table"),
    "backtest": (
        ("specwatch.fleet.backtest",),
        "evaluate history from Prometheus (fleet mode) at start + n*step; JSON lines",
    ),
}


def modules_for(command: str | None) -> tuple[tuple[str, ...], bool]:
    """The subcommand modules to import for `command`, and whether the others are listed from
    PLUGIN_COMMANDS instead (no command, or one that is not known: help and the error list them)."""
    if command in CORE_COMMANDS:
        return (), False
    if command in PLUGIN_COMMANDS:
        return PLUGIN_COMMANDS[command][0], False
    return (), True


# SIGHUPs that arrived before `specwatch run`'s service installed its own handler. The default
# action of SIGHUP is to terminate, so `run` installs this one first thing in main(), before any
# slow import or config load (this module imports the config package lazily for that reason); the
# service replays a queued one as a reload once it runs.
EARLY_SIGHUPS: list[int] = []


def _queue_sighup(signum: int, _frame: object) -> None:
    EARLY_SIGHUPS.append(signum)


def _install_early_sighup() -> None:
    with contextlib.suppress(ValueError, AttributeError, OSError):  # not the main thread, or no SIGHUP
        signal.signal(signal.SIGHUP, _queue_sighup)


def _load_config(args: argparse.Namespace, **overrides: object) -> Config:
    from specwatch.config import load

    return load(getattr(args, "config", None), overrides=overrides)


def _sidecar_mode(args: argparse.Namespace) -> bool:
    """Sidecar mode (the chart sets SPECWATCH_MODE=sidecar on the container it adds to vLLM's pod):
    a config problem must never stop the process, or the pod loses Ready and leaves its Service."""
    return bool(args.sidecar) or os.environ.get("SPECWATCH_MODE", "").strip().lower() == "sidecar"


def _alert_window_override(args: argparse.Namespace) -> dict[str, object] | None:
    """--alert-window sets alerting.window (flags beat SPECWATCH_ALERTING__WINDOW, which beats the file)."""
    from specwatch.config import parse_duration

    if args.alert_window is None:
        return None
    return {"window": parse_duration(args.alert_window, "--alert-window")}


def cmd_run(args: argparse.Namespace) -> int:
    from specwatch.base.logsetup import configure_logging
    from specwatch.config import ConfigError, from_mapping, load
    from specwatch.serve.reload import ConfigSource
    from specwatch.serve.service import Service

    # vLLM's multiprocess mode variable must never reach this process's prometheus_client.
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    overrides = {
        "listen": args.listen,
        "targets": [{"url": args.target}] if args.target else None,
        "alerting": _alert_window_override(args),
    }
    source = ConfigSource(args.config, lambda path: load(path, overrides=overrides))
    try:
        config, error = source.load(), None
    except ConfigError as exc:
        if not _sidecar_mode(args):
            raise
        # Stay up on the listen address from the command line (the chart passes it), report the
        # error on /metrics and wait for a good config.
        config = from_mapping({}, environ={}, overrides={"listen": args.listen} if args.listen else None)
        error = str(exc)
    configure_logging(config.log.format, config.log.level)
    # Service warns (at start and on reload) when alerting.window is not among the windows.
    try:
        return Service(
            config,
            source=source,
            config_error=error,
            on_log_config=lambda c: configure_logging(c.log.format, c.log.level),
        ).run_forever(reload_pending=lambda: bool(EARLY_SIGHUPS), sidecar=_sidecar_mode(args))
    except OSError as exc:  # the listen address is taken or not ours to bind: a bad value, like a bad key
        where = f"--listen {args.listen}" if args.listen else f"listen {config.listen}"
        fail("specwatch run", f"{where}: {exc.strerror or exc}")


def cmd_check_config(args: argparse.Namespace) -> int:
    from specwatch.config import load
    from specwatch.serve.reload import alert_window_warning

    config = load(args.file, overrides={"alerting": _alert_window_override(args)})
    if warning := alert_window_warning(config):
        print(f"specwatch: warning: {args.file}: {warning}", file=sys.stderr)
    if config.prometheus is not None:
        from specwatch.base.urls import redact_url

        source = f"fleet mode: every replica from {redact_url(config.prometheus.url)}"
    else:
        source = f"{len(config.targets)} target(s)"
    from specwatch.export.assumptions import assumptions

    basis = assumptions(config)
    if args.json:
        print(json.dumps({"file": args.file, "ok": True, "assumptions": basis.as_dict()}))
        return 0
    print(
        f"{args.file}: OK ({source}, {len(config.routes)} route(s), "
        f"windows {', '.join(config.window_labels)}, poll every {config.poll_interval:g}s"
        + (
            f", evaluate every {config.evaluation_period:g}s"
            if config.evaluation_period != config.poll_interval
            else ""
        )
        + ")"
    )
    print("verdicts will rest on:")
    for line in basis.config_lines():
        print(f"  {line}")
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from specwatch.cli.record import record_command

    return record_command(args, _load_config(args))


def cmd_replay(args: argparse.Namespace) -> int:
    from specwatch.export.assumptions import view_assumptions
    from specwatch.sidecar.pipeline import Pipeline
    from specwatch.sidecar.replay import RecordingError, replay_to

    config = _load_config(args)
    pipeline = Pipeline(config)
    # No logging set-up: nothing on the replay path logs.
    try:
        with open(args.recording, encoding="utf-8") as handle:
            count = replay_to(config, handle, sys.stdout, learn_targets=args.config is None, pipeline=pipeline)
    except FileNotFoundError:
        fail("specwatch replay", f"recording not found: {args.recording}")
    except IsADirectoryError:
        fail("specwatch replay", f"{args.recording}: is a directory, not a recording")
    except (OSError, UnicodeDecodeError) as exc:
        fail("specwatch replay", f"{args.recording}: cannot read: {getattr(exc, 'strerror', None) or exc}")
    except RecordingError as exc:
        fail("specwatch replay", f"{args.recording}: {exc}")
    if count == 0:
        print(
            f"specwatch replay: no evaluations: {args.recording} holds no successful poll "
            "(only errors, or empty); an evaluation needs two polls of a target",
            file=sys.stderr,
        )
        return EXIT_NOTHING
    if not args.quiet:
        # stdout stays the JSON lines; what the verdicts rested on goes beside them.
        basis = view_assumptions(pipeline.view())
        for line in [basis.summary(), *basis.route_lines()]:
            print(f"specwatch replay: rested on: {line}", file=sys.stderr)
    return 0


def build_parser(
    subcommand_modules: Sequence[str] = SUBCOMMAND_MODULES, *, listed: bool = False
) -> argparse.ArgumentParser:
    """listed: add PLUGIN_COMMANDS as named entries with their help only (for `--help`)."""
    parser = CliParser(
        prog="specwatch",
        description=(
            "Observability sidecar for vLLM speculative decoding: rolling acceptance rate, ITL tails, "
            "break-even at the live batch size, and what to change."
        ),
    )
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser(
        "run",
        help="run the sidecar: poll vLLM /metrics (or, with prometheus: set, read every "
        "replica from Prometheus: fleet mode) and serve specwatch metrics",
    )
    run.add_argument(
        "--config",
        help="YAML config (README: Configuration); every key optional. Reloaded on SIGHUP and when the file changes",
    )
    run.add_argument("--listen", help="override listen, e.g. :9474 or 127.0.0.1:9474")
    run.add_argument("--target", help="override the first target's URL, e.g. http://127.0.0.1:8000/metrics")
    run.add_argument(
        "--alert-window",
        help="override alerting.window, the window the alert rules read (default 5m); "
        "a warning is logged at start when it is not among the config's windows",
    )
    run.add_argument(
        "--sidecar",
        action="store_true",
        help="sidecar mode (also SPECWATCH_MODE=sidecar): never exit on a bad or missing config; "
        "serve /healthz and /metrics and report the error until the config is fixed",
    )
    run.set_defaults(func=cmd_run)

    check = sub.add_parser("check-config", help="validate a config file and exit (status 2 when invalid)")
    check.add_argument("file")
    check.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object instead: the file, ok, and what the verdicts will rest on",
    )
    check.add_argument(
        "--alert-window",
        help="override alerting.window, the window the alert rules read "
        "(default 5m): warn when it is not among the config's windows",
    )
    check.set_defaults(func=cmd_check_config)

    rec = sub.add_parser("record", help="record polls of the configured targets as JSON lines")
    rec.add_argument("--config")
    rec.add_argument("--out", required=True, help="recording to write (JSON lines); its directory must exist")
    rec.add_argument("--duration", required=True, help="e.g. 10m")
    rec.add_argument(
        "--progress-every",
        default="10s",
        help="print a progress line on stderr this often (default 10s; 0 for none)",
    )
    rec.set_defaults(func=cmd_record)

    rep = sub.add_parser(
        "replay", help="evaluate a recording exactly as the live sidecar would; one JSON line per evaluation"
    )
    rep.add_argument("--config")
    rep.add_argument("recording")
    rep.add_argument("--quiet", action="store_true", help="no closing summary on stderr of what the verdicts rested on")
    rep.set_defaults(func=cmd_replay)

    for name in subcommand_modules:
        importlib.import_module(name).add_parsers(sub)
    if listed:
        for command, (_, text) in PLUGIN_COMMANDS.items():
            if command not in sub.choices:
                sub.add_parser(command, help=text)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first argument that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _flag_given(args: argparse.Namespace, flag: str) -> str | None:
    value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
    return None if value is None else str(value)


def config_error(prog: str, args: argparse.Namespace, exc: ConfigError) -> None:
    """A ConfigError in the words the user typed: a flag as the flag (``--listen x: ...``), an
    environment variable by its name (config/env.py puts it in the key), else the config key."""
    if exc.key.startswith("--"):  # raised for a flag already (parse_duration(text, "--duration"))
        fail(prog, f"{exc.key}: {exc.reason}")
    flag = FLAG_KEYS.get(exc.key)
    given = _flag_given(args, flag) if flag else None
    if flag and given is not None:
        fail(prog, f"{flag} {given}: {exc.reason}")
    fail(prog, str(exc), label="config error")


_NEGATIVE = re.compile(r"^-\.?\d")


def negative_values_attached(words: Sequence[str]) -> list[str]:
    """``--duration -5s`` as ``--duration=-5s``: argparse takes a word starting with '-' for an
    option and answers "expected one argument"; attached, the value reaches its own check, which
    says what is wrong with it."""
    out: list[str] = []
    for word in words:
        if out and _NEGATIVE.match(word) and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={word}"
        else:
            out.append(word)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if _command(words) == "run":
        _install_early_sighup()  # before anything slow: a SIGHUP must never kill a starting sidecar
    from specwatch.config import ConfigError

    modules, listed = modules_for(_command(words))
    parser = build_parser(modules, listed=listed)
    args = parser.parse_args(negative_values_attached(words))
    command = subparser_for(parser, args.command)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        config_error(command.prog, args, exc)
    except argparse.ArgumentTypeError as exc:  # a bad value found after parsing (lesson, sim, demo)
        command.error(str(exc))
    except KeyboardInterrupt:  # a command with work to keep says what it kept; the rest stop quietly
        print(f"{command.prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0  # not reached: config_error and error exit


if __name__ == "__main__":
    sys.exit(main())
