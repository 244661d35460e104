"""`specwatch demo` in a real 80×24 terminal (tmux): it fits, redraws in place, and ends on its answer.

The README's first command runs the demo in whatever terminal the newcomer has; the narrowest
common one is 80×24. Run in a detached tmux session of that size, at 60× so the alpha-drop story
(keep → disable at sim t=240 s) ends in about a minute:
- no line is wider than the terminal: the pane's lines joined where tmux wrapped them are the
  lines it shows (a wrapped line would be one joined line and two shown ones);
- the table redraws in place: the whole scrollback is about a screen, not a table per refresh;
- it ends on the answer: the last table shows the truth line, a `disable` verdict with its action,
  and the demo exits 0.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

ROOT = Path(__file__).resolve().parents[3]
WIDTH, HEIGHT = 80, 24
EXIT_MARK = "DEMO-EXIT="


def tmux(socket: str, *args: str) -> str:
    done = subprocess.run(
        ["tmux", "-L", socket, "-f", os.devnull, *args], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout


def test_the_demo_fits_80_by_24_redraws_in_place_and_ends_on_a_disable_with_its_action() -> None:
    socket = f"specwatch-demo-{uuid.uuid4().hex[:8]}"
    env = f"PYTHONPATH={shlex.quote(str(ROOT / 'exporter'))}"
    demo = f"{env} {shlex.quote(sys.executable)} -m specwatch.cli demo --speed 60"
    tmux(
        socket,
        "new-session",
        "-d",
        "-s",
        "demo",
        "-x",
        str(WIDTH),
        "-y",
        str(HEIGHT),
        f"{demo}; echo {EXIT_MARK}$?; sleep 600",
    )
    try:
        assert (
            tmux(socket, "display", "-p", "-t", "demo", "#{window_width}x#{window_height}").strip()
            == f"{WIDTH}x{HEIGHT}"
        )
        deadline = time.monotonic() + 300
        shown = ""
        while time.monotonic() < deadline:
            shown = tmux(socket, "capture-pane", "-p", "-t", "demo", "-S", "-")
            if EXIT_MARK in shown:
                break
            time.sleep(2)
        joined = tmux(socket, "capture-pane", "-p", "-J", "-t", "demo", "-S", "-")
    finally:
        tmux(socket, "kill-server")
    lines = shown.rstrip("\n").split("\n")
    assert f"{EXIT_MARK}0" in shown, shown
    assert joined.rstrip("\n").split("\n") == lines, f"a line was wrapped at {WIDTH} columns:\n" + joined
    assert max(len(line) for line in lines) <= WIDTH
    assert len(lines) <= 2 * HEIGHT, f"the table did not redraw in place: {len(lines)} lines of scrollback"
    last_table = shown[shown.rindex("simulated time") :]
    assert "true verdict disable" in last_table
    assert any(
        line.startswith("llama-70b") and " disable " in line and line.rstrip().endswith("remove")
        for line in last_table.split("\n")
    ), last_table
