"""Command line: run, demo, record, replay, check-config, and the lesson's calculators."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__, demo, lesson, sim
from .config import Config, ConfigError, load
from .logsetup import configure_logging

EXIT_CONFIG = 2

# Modules that contribute subcommands through add_parsers(subparsers).
SUBCOMMAND_MODULES = (lesson, sim, demo)


def _load_config(args: argparse.Namespace, **overrides: Any) -> Config:
    return load(getattr(args, "config", None), overrides=overrides)


def cmd_run(args: argparse.Namespace) -> int:
    from .service import Service

    # vLLM's multiprocess mode variable must never reach this process's prometheus_client.
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    config = _load_config(args, listen=args.listen, targets=[{"url": args.target}] if args.target else None)
    configure_logging(config.log.format, config.log.level)
    return Service(config).run_forever()


def cmd_check_config(args: argparse.Namespace) -> int:
    config = load(args.file)
    print(f"{args.file}: OK ({len(config.targets)} target(s), {len(config.routes)} route(s), "
          f"windows {', '.join(config.window_labels)}, poll every {config.poll_interval:g}s)")
    return 0


def cmd_record(args: argparse.Namespace) -> int:
    from .config import parse_duration
    from .record import record

    config = _load_config(args)
    duration = parse_duration(args.duration, "--duration")
    configure_logging(config.log.format, config.log.level)
    with open(args.out, "w", encoding="utf-8") as out:
        lines = record(config, out, duration)
    print(f"wrote {lines} polls to {args.out}", file=sys.stderr)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from .replay import RecordingError, replay_to

    config = _load_config(args)
    configure_logging(config.log.format, "warning")
    try:
        with open(args.recording, encoding="utf-8") as handle:
            replay_to(config, handle, sys.stdout, learn_targets=args.config is None)
    except FileNotFoundError:
        print(f"specwatch: recording not found: {args.recording}", file=sys.stderr)
        return EXIT_CONFIG
    except RecordingError as exc:
        print(f"specwatch: {args.recording}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specwatch", description=(
        "Observability sidecar for vLLM speculative decoding: rolling acceptance rate, ITL tails, "
        "break-even at the live batch size, and what to change."))
    parser.add_argument("--version", action="version", version=f"specwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser("run", help="run the sidecar: poll vLLM /metrics and serve specwatch metrics")
    run.add_argument("--config", help="YAML config (README: Configuration); every key optional")
    run.add_argument("--listen", help="override listen, e.g. :9474 or 127.0.0.1:9474")
    run.add_argument("--target", help="override the first target's URL, e.g. http://127.0.0.1:8000/metrics")
    run.set_defaults(func=cmd_run)

    check = sub.add_parser("check-config", help="validate a config file and exit (status 2 when invalid)")
    check.add_argument("file")
    check.set_defaults(func=cmd_check_config)

    rec = sub.add_parser("record", help="record polls of the configured targets as JSON lines")
    rec.add_argument("--config")
    rec.add_argument("--out", required=True)
    rec.add_argument("--duration", required=True, help="e.g. 10m")
    rec.set_defaults(func=cmd_record)

    rep = sub.add_parser("replay", help="evaluate a recording exactly as the live sidecar would; one JSON line per evaluation")
    rep.add_argument("--config")
    rep.add_argument("recording")
    rep.set_defaults(func=cmd_replay)

    for module in SUBCOMMAND_MODULES:
        module.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"specwatch: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
