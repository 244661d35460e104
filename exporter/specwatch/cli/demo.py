"""`specwatch demo`: the simulated vLLM plus the real sidecar on loopback, and a live table.

No vLLM needed. The simulator (default scenario alpha-drop, accelerated) serves vLLM's exact
/metrics; the unmodified sidecar polls it over HTTP, configured with the scenario's hardware and
model so its break-even is computed from the same cost model the simulator's step times use.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from specwatch.base.logsetup import configure_logging
from specwatch.config import Config, ConfigError, from_mapping, parse_duration
from specwatch.engines.advice import VLLM_ENGINES, advise
from specwatch.lesson.options import port as port_type
from specwatch.lesson.options import positive

if TYPE_CHECKING:
    from specwatch.sim.scenario import Scenario
    from specwatch.verdict.evaluation import RouteEvaluation
    from specwatch.view.targets import State, TargetState

#: ANSI: cursor home, clear screen (a TTY redraws the table in place).
CLEAR = "\x1b[H\x1b[2J"
#: A terminal's alternate screen: the redrawn frames stay off the scrollback; the last frame is
#: printed once on the normal screen when the demo ends.
ALT_SCREEN_ON, ALT_SCREEN_OFF = "\x1b[?1049h", "\x1b[?1049l"
#: The exit status of a run stopped with Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130
#: Demo config keys and the flags that set them (an error names the flag).
FLAG_KEYS = {"windows": "--windows", "poll_interval": "--poll-interval", "listen": "--port"}


def _fmt(value: Any, spec: str = ".3f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def _fmt_breakeven(value: float | None) -> str:
    # Above 1 only says that no acceptance rate pays (values like 60.6 occur): say that instead.
    return "cannot pay" if value is not None and value >= 1.0 else _fmt(value)


def _recommendation(evaluation: RouteEvaluation) -> str:
    """What to do with --speculative-config (another engine: its flags or config), by action, as
    the alert descriptions render it."""
    advice = evaluation.advice if evaluation.guard_passed else None
    if advice is None or advice.action is None:
        return "-"
    if evaluation.stats.engine not in VLLM_ENGINES:
        rendered = advise(advice, evaluation.stats.engine)
        if rendered is None:
            return "-"
        return "remove" if rendered.action == "disable" else (rendered.label or "no change")
    if advice.action == "remove_speculative_config":
        return "remove"
    if advice.action == "measure":
        m = advice.measurement
        if m is None or m.kind == "near_breakeven":
            return "near 1: none"
        return "measure"
    keys = advice.recommended_config if advice.action == "apply" else advice.config_changes
    if not keys:
        return "no change"
    text = json.dumps(keys, separators=(",", ":"), sort_keys=True)
    return text if advice.action == "apply" else f"merge {text}"


def _action(recommendation: str) -> str:
    """The table's short action column: the full --speculative-config to apply or merge, or the
    measurement, is printed once below the table."""
    if recommendation.startswith("merge "):
        return "merge"
    if recommendation.startswith("{"):
        return "apply"
    return recommendation


@dataclass
class Pending:
    """When each route-window's pending candidate verdict was first seen (wall time)."""

    hold_seconds: float = 0.0
    since: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def describe(self, route: str, window: str, candidate: str | None, verdict: str | None, now: float) -> str:
        if candidate is None or candidate == verdict:
            for key in [k for k in self.since if k[:2] == (route, window)]:
                del self.since[key]
            return "-"
        key = (route, window, candidate)
        first = self.since.setdefault(key, now)
        for other in [k for k in self.since if k[:2] == (route, window) and k != key]:
            del self.since[other]
        return f"{candidate} {min(now - first, self.hold_seconds):.0f}/{self.hold_seconds:.0f}s"


@dataclass
class TargetWatch:
    """The last error reason of each target: the reason whose count rose since the last frame."""

    counts: dict[str, Mapping[str, int]] = field(default_factory=dict)
    last: dict[str, str] = field(default_factory=dict)

    def update(self, targets: tuple[TargetState, ...]) -> None:
        for target in targets:
            before = self.counts.get(target.name, {})
            rose = [reason for reason, n in target.errors.items() if n > before.get(reason, 0)]
            if rose:
                self.last[target.name] = rose[0]
            self.counts[target.name] = dict(target.errors)


def _target_lines(state: State, watch: TargetWatch | None) -> list[str]:
    lines = []
    for target in state.targets:
        if target.up is False:
            failed = sum(target.errors.values())
            last = (watch.last.get(target.name) if watch else None) or (
                max(target.errors, key=lambda r: target.errors[r]) if target.errors else "unknown"
            )
            lines.append(
                f"target {target.name} DOWN: last error {last} ({failed} failed of {target.polls} polls); "
                "no evaluation while it is down, and no verdict moves"
            )
    return lines


#: The table fits a terminal this wide (the default 80 columns); longer route names are shortened.
TABLE_WIDTH = 80
ROUTE_WIDTH = 12


def _short(name: str, width: int = ROUTE_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "~"


def render_table(
    state: State,
    sim_truth: dict[str, Any] | None = None,
    sim_time: float | None = None,
    *,
    pending: Pending | None = None,
    watch: TargetWatch | None = None,
    now: float | None = None,
) -> str:
    """One frame, within TABLE_WIDTH columns: the simulated time and the truth, target faults, one
    row per route and window (alpha, break-even, batch, expected speedup with its 90 % interval,
    P(loss), verdict, action), then per route the ITL tails, a candidate waiting out its hold, and
    the full --speculative-config or the measurement that would decide, each once."""
    header = ("route", "win", "alpha", "b-even", "batch", "speedup [90 %]", "P(loss)", "verdict", "action")
    now = time.monotonic() if now is None else now
    pending = pending or Pending()
    rows = []
    notes: list[str] = []
    configs: dict[str, str] = {}
    measures: dict[str, str] = {}
    for route in state.routes:
        for evaluation in route.evaluations:
            stats = evaluation.stats
            recommendation = _recommendation(evaluation)
            if recommendation.startswith(("merge ", "{")):
                configs[route.route] = f"{recommendation} (verdict {evaluation.verdict}, window {stats.window})"
            if recommendation.startswith("measure") and evaluation.measurement is not None:
                measures[route.route] = f"{evaluation.measurement.how} (window {stats.window})"
            notes += _notes(route.route, evaluation, pending, now)
            rows.append(
                (
                    _short(route.route),
                    stats.window,
                    _fmt(evaluation.value("acceptance_rate")),
                    _fmt_breakeven(evaluation.value("breakeven_acceptance_rate")),
                    _fmt(stats.batch_size, ".0f"),
                    _speedup_cell(evaluation),
                    _fmt(evaluation.loss_probability, ".2f"),
                    evaluation.verdict or "-",
                    _action(recommendation),
                )
            )
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = []
    if sim_time is not None:
        lines.append(f"simulated time {sim_time:7.1f}s" + (f"  phase {sim_truth['phase']}" if sim_truth else ""))
    if sim_truth:
        lines.append(_wrap(f"truth: {_truth_line(sim_truth)}"))
    faults = _target_lines(state, watch)
    lines += faults
    lines.append(" ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    for row in rows:
        lines.append(" ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if not rows and not faults:
        lines.append("(waiting for two polls...)")
    return "\n".join(lines + notes + [_wrap(line) for line in _footer(configs, measures)])


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=TABLE_WIDTH, subsequent_indent="  ", break_on_hyphens=False)


def _notes(route: str, evaluation: RouteEvaluation, pending: Pending, now: float) -> list[str]:
    """Below the table, per route and window: a candidate waiting out its hold, the ITL tails."""
    stats = evaluation.stats
    out = []
    candidate = evaluation.assessment.candidate if evaluation.assessment is not None else None
    held = pending.describe(route, stats.window, candidate, evaluation.verdict, now)
    if held != "-":
        out.append(f"{route} {stats.window}: {held} held before it takes effect")
    if stats.itl_p50_seconds and stats.itl_p99_seconds:
        out.append(
            f"{route} {stats.window}: ITL per engine step p50 {stats.itl_p50_seconds * 1000:.1f} ms, "
            f"p99 {stats.itl_p99_seconds * 1000:.1f} ms"
        )
    return out


def _footer(configs: Mapping[str, str], measures: Mapping[str, str]) -> list[str]:
    """Each route's full --speculative-config, or the measurement that decides it, once."""
    return [f"--speculative-config for {name}: {text}" for name, text in configs.items()] + [
        f"to decide {name}: {text}" for name, text in measures.items()
    ]


def _speedup_cell(evaluation: RouteEvaluation) -> str:
    """The expected speedup with the interval the verdict rests on: 0.59 (0.47-0.74)."""
    speedup, lower, upper = (
        evaluation.value("expected_speedup"),
        evaluation.expected_speedup_lower,
        evaluation.expected_speedup_upper,
    )
    if speedup is None:
        return "-"
    if lower is None or upper is None:
        return f"{speedup:.2f}"
    return f"{speedup:.2f} [{lower:.2f}-{upper:.2f}]"


def _truth_line(truth: dict[str, Any]) -> str:
    """The simulator's true parameters and the verdict they call for (engine.truth())."""
    parts = []
    for route, values in (truth.get("routes") or {}).items():
        if isinstance(values, dict):
            alpha = values.get("acceptance_rate", values.get("alpha"))
            batch = values.get("batch", values.get("batch_size"))
            text = f"{route}: alpha {_fmt(alpha)} batch {_fmt(batch, '.0f')}"
            if "breakeven_acceptance_rate" in values:
                text += f" break-even {_fmt_breakeven(values['breakeven_acceptance_rate'])}"
            if values.get("verdict"):
                text += f" -> true verdict {values['verdict']}"
            parts.append(text)
    return "; ".join(parts)


def breakeven_line(truth: dict[str, Any]) -> str:
    """The break-even the cost model gives at the scenario's start, per route: printed under the
    scenario's description in place of any hand-typed number."""
    parts = []
    for route, values in (truth.get("routes") or {}).items():
        be = values.get("breakeven_acceptance_rate")
        if be is not None:
            parts.append(
                f"{route} {_fmt_breakeven(be)} at batch {values.get('nominal_batch', values.get('batch')):.0f}, "
                f"K={values.get('k')}"
            )
    return "break-even from the cost model at the start: " + ("; ".join(parts) or "speculation off")


def demo_config(
    scenario: Scenario, *, target_url: str, port: int, poll_interval: float, windows: tuple[str, ...], speed: float
) -> Config:
    """The sidecar config of the demo. The alert rules read the longest demo window, so the
    "alerting.window is not among windows" warning (true for a 5m default) does not apply. The
    scenario runs `speed` times faster than real time, so every poll is evaluated (sidecar_config_for)."""
    from specwatch.sim.sidecar_config import sidecar_config_for

    raw = sidecar_config_for(
        scenario,
        target_url=target_url,
        listen=f"127.0.0.1:{port}",
        poll_interval=poll_interval,
        windows=windows,
        speed=speed,
    )
    try:
        longest = max(windows, key=lambda w: parse_duration(w, "--windows"))
        raw["alerting"] = {"window": longest}
        return from_mapping(raw)
    except ConfigError as exc:
        flag = FLAG_KEYS.get(exc.key.split("[")[0])
        raise argparse.ArgumentTypeError(f"{flag or exc.key}: {exc.reason}") from None


def run_demo(
    *,
    scenario_name: str,
    speed: float,
    duration: float | None,
    poll_interval: float,
    windows: tuple[str, ...],
    port: int,
    refresh: float,
    out: TextIO,
    seed: int = 0,
    tty: bool | None = None,
) -> int:
    from specwatch import sim
    from specwatch.serve.service import Service
    from specwatch.sim.scenario import ScenarioError

    tty = out.isatty() if tty is None else tty
    if not windows:
        raise argparse.ArgumentTypeError("--windows: give at least one window, e.g. 5s,15s")
    try:
        scenario = sim.load_scenario(scenario_name)
    except ScenarioError as exc:
        raise argparse.ArgumentTypeError(f"--scenario {scenario_name}: {exc}") from None
    configure_logging("json", "warning")
    handle = sim.serve(scenario, host="127.0.0.1", port=0, speed=speed, seed=seed)
    service = None
    try:
        config = demo_config(
            scenario, target_url=handle.url, port=port, poll_interval=poll_interval, windows=windows, speed=speed
        )
        service = Service(config)
        try:
            service.start()
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"--port {port}: {exc.strerror or exc} (0 picks a free port)") from None
        return _show(
            service, handle, scenario, config, speed=speed, duration=duration, refresh=refresh, out=out, tty=tty
        )
    finally:
        if service is not None:
            service.stop()
        handle.stop()


def _show(
    service: Any,
    handle: Any,
    scenario: Scenario,
    config: Config,
    *,
    speed: float,
    duration: float | None,
    refresh: float,
    out: TextIO,
    tty: bool,
) -> int:
    from specwatch.sim.describe import describe

    base = f"http://127.0.0.1:{service.port}"
    intro = [
        _wrap(
            f"specwatch demo: scenario {scenario.name!r} at {speed:g}x, windows {', '.join(config.window_labels)} "
            f"(wall time), poll every {config.poll_interval:g}s, verdict hold "
            f"{config.decision.hold_seconds(config.evaluation_period):g}s"
        ),
        _wrap("  " + describe(scenario)),
        _wrap("  " + breakeven_line(handle.truth())),
        f"simulated vLLM: {handle.url}",
        f"sidecar: {base}/metrics  {base}/api/v1/status",
        _wrap("ITL is vLLM's histogram: one sample per engine step (a step carries 1 + accepted tokens)."),
        "Ctrl-C to stop.",
        "",
    ]
    out.write((ALT_SCREEN_ON if tty else "") + "\n".join(intro) + "\n")
    out.flush()
    pending = Pending(hold_seconds=config.decision.hold_seconds(config.evaluation_period))
    watch = TargetWatch()
    stop = threading.Event()
    end = time.monotonic() + duration if duration else None
    reason = "the scenario ended"
    frame = ""
    try:
        while not stop.is_set():
            wait = refresh if end is None else min(refresh, max(0.0, end - time.monotonic()))
            if stop.wait(wait):
                break
            state = service.published.view.targets
            watch.update(state.targets)
            sim_time = handle.sim_time()
            _text, truth, faults = handle.snapshot()
            frame = render_table(state, truth, sim_time, pending=pending, watch=watch)
            if faults:  # what the simulator is doing to its /metrics right now (scenario faults)
                kinds = ", ".join(sorted({f.kind for f in faults}))
                frame = frame.replace("\n", f"\nsimulator injecting: {kinds}\n", 1)
            out.write((CLEAR + "\n".join(intro) + "\n" + frame + "\n") if tty else frame + "\n\n")
            out.flush()
            if end is not None and time.monotonic() >= end:
                reason = "--duration reached"
                break
            if end is None and sim_time >= scenario.duration:
                break
    except KeyboardInterrupt:
        reason = "interrupted"
    if tty:
        out.write(ALT_SCREEN_OFF + "\n".join(intro) + "\n" + frame + "\n")
    out.write(f"demo finished ({reason}).\n")
    return INTERRUPTED if reason == "interrupted" else 0


def cmd_demo(args: argparse.Namespace) -> int:
    duration = parse_duration(args.duration, "--duration") if args.duration else None
    poll = parse_duration(args.poll_interval, "--poll-interval")
    windows = tuple(w.strip() for w in args.windows.split(",") if w.strip())
    return run_demo(
        scenario_name=args.scenario,
        speed=args.speed,
        duration=duration,
        poll_interval=poll,
        windows=windows,
        port=args.port,
        refresh=parse_duration(args.refresh, "--refresh"),
        out=sys.stdout,
        seed=args.seed,
    )


def add_parsers(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser("demo", help="run the built-in simulated vLLM and the sidecar, and print a live table")
    demo.add_argument("--scenario", default="alpha-drop", help="simulator scenario (default alpha-drop)")
    demo.add_argument(
        "--speed", type=positive, default=10.0, help="simulation speed-up (default 10x: the story in about a minute)"
    )
    demo.add_argument(
        "--duration", default=None, help="stop after this wall time, e.g. 20s (default: the scenario's end)"
    )
    demo.add_argument("--poll-interval", default="1s", help="sidecar poll interval (default 1s)")
    demo.add_argument(
        "--windows", default="5s,15s", help="sidecar windows in wall time (default 5s,15s: 50 s and 150 s simulated)"
    )
    demo.add_argument("--refresh", default="5s", help="table refresh interval (default 5s)")
    demo.add_argument("--port", type=port_type, default=0, help="sidecar port on 127.0.0.1 (default: a free port)")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=cmd_demo)
