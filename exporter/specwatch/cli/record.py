"""`specwatch record`: progress while it runs, and an exit status that says whether it recorded anything.

Exit 0 when at least one poll succeeded; 1 when every poll failed (the file then holds only error
lines, which replay cannot evaluate); 2 for bad input; 130 on Ctrl-C, after saying what was kept.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from typing import IO, Any

from specwatch.base.units import format_duration
from specwatch.cli.args import fail
from specwatch.config import Config, parse_duration

PROG = "specwatch record"
EXIT_NOTHING = 1
EXIT_INTERRUPTED = 130


@dataclass
class Tally:
    """What the recording holds so far, reported every --progress-every and at the end."""

    out: str
    duration: float
    err: IO[str]
    every: float
    started: float = field(default_factory=time.monotonic)
    ok: int = 0
    errors: int = 0
    last_error: str | None = None
    _next: float = 0.0

    def __post_init__(self) -> None:
        self._next = self.started + self.every

    def __call__(self, entry: dict[str, Any]) -> None:
        if "error" in entry:
            self.errors += 1
            self.last_error = f"{entry.get('target')}: {entry['error']}"
        else:
            self.ok += 1
        now = time.monotonic()
        if self.every > 0 and now >= self._next:
            self._next = now + self.every
            print(f"{PROG}: {self.summary()}", file=self.err, flush=True)

    def summary(self) -> str:
        elapsed = time.monotonic() - self.started
        text = f"{self.ok + self.errors} polls ({self.ok} ok, {self.errors} failed) in {elapsed:.0f}s of "
        text += format_duration(self.duration)
        if self.last_error:
            text += f"; last error {self.last_error}"
        return text


def record_command(args: argparse.Namespace, config: Config) -> int:
    from specwatch.base.logsetup import configure_logging
    from specwatch.sidecar.record import record

    duration = parse_duration(args.duration, "--duration")
    every = parse_duration(args.progress_every, "--progress-every") if args.progress_every not in ("0", "0s") else 0
    if config.prometheus is not None or not config.targets:
        # Fleet mode reads Prometheus, there is no /metrics to poll: a recording would stay empty.
        fail(PROG, "the config is in fleet mode (prometheus:): there are no targets to record; use specwatch backtest")
    try:
        out = open(args.out, "w", encoding="utf-8")  # noqa: SIM115 - closed below, after the summary
    except OSError as exc:
        fail(PROG, f"--out {args.out}: {exc.strerror or exc}")
    configure_logging(config.log.format, config.log.level)
    names = ", ".join(t.name for t in config.targets)
    print(
        f"{PROG}: polling {names} every {format_duration(config.poll_interval)} for "
        f"{format_duration(duration)} into {args.out} (Ctrl-C stops and keeps what was written)",
        file=sys.stderr,
        flush=True,
    )
    tally = Tally(args.out, duration, sys.stderr, every)
    try:
        with out:
            record(config, out, duration, on_poll=tally)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted: kept {tally.summary()} in {args.out}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if tally.ok == 0:
        print(
            f"{PROG}: nothing recorded: all {tally.errors} polls failed (last error {tally.last_error}); "
            f"{args.out} holds only error lines",
            file=sys.stderr,
        )
        return EXIT_NOTHING
    print(f"{PROG}: wrote {tally.summary()} to {args.out}", file=sys.stderr)
    return 0
