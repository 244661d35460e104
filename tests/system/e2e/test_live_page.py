"""The page at `/` in a real browser: simulator → `specwatch run` (a real process) → headless Chromium.

What it proves, on the accelerated `alpha-drop` scenario (acceptance 0.80 → 0.15 at sim t=240 s,
the true verdict keep → disable; at batch 160 its 1.05× gain is within the model's error, so the
sidecar says keep while the batch ramps up, then undecided, then disable):
- the rendered DOM (`--dump-dom`) shows the route's verdict, alpha, break-even and recommended
  config, the two plots have data (SVG polyline points), and a target that is down is shown down
  with its last error;
- the page follows the verdict: loaded again while the scenario runs, its verdict text changes
  from keep or undecided to disable without anything but the poll loop re-rendering it;
- the page asks for nothing but itself (no script, no external URL; a CSP that forbids both).
- the plots a user looks for are drawn by the browser: the expected speedup's interval against 1,
  the verdict per poll, the per-token ITL tails, each with a legend.

Screenshots (before and after the change) are kept under a temp dir, printed; set
SPECWATCH_SCREENSHOT_DIR to choose it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from support.loopback import free_port, stop_process, wait_http

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = "alpha-drop"
SPEED = 20  # 240 sim s (the drop) is 12 s of wall time
WINDOWS = ("15s", "1m")  # the 15 s window spans 300 sim s: it sees the drop within seconds
DEADLINE_S = 90


def chromium(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def dump_dom(url: str) -> str:
    proc = chromium(["--virtual-time-budget=300", "--dump-dom", url])
    assert proc.returncode == 0 and "<html" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


def screenshot(url: str, out: Path) -> Path:
    proc = chromium(["--window-size=1400,1300", "--virtual-time-budget=300", f"--screenshot={out}", url])
    assert proc.returncode == 0 and out.exists() and out.stat().st_size > 10_000, proc.stderr[-2000:]
    return out


def answer_verdict(dom: str, route: str) -> str | None:
    """The verdict of `route` in the page's answer table."""
    m = re.search(
        rf'<a href="#r\d+">{re.escape(route)}</a></td><td class="l">[^<]*</td><td class="l"><span class="v v-(\w+)"',
        dom,
    )
    return m.group(1) if m else None


def route_section(dom: str) -> str:
    return dom.split('<section class="route"', 1)[1]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    if not shutil.which("chromium"):
        pytest.skip("Debian package `chromium` is not installed")
    from specwatch.sim import serve
    from specwatch.sim.scenario import load_scenario
    from specwatch.sim.sidecar_config import sidecar_config_for

    tmp = tmp_path_factory.mktemp("live-page")
    sim = serve(SCENARIO, host="127.0.0.1", port=0, speed=SPEED, seed=0)
    proc = None
    try:
        metrics_url = sim.url if sim.url.endswith("/metrics") else sim.url.rstrip("/") + "/metrics"
        port, dead = free_port(), free_port()  # nothing listens on `dead`
        cfg = sidecar_config_for(
            load_scenario(SCENARIO),
            target_url=metrics_url,
            listen=f"127.0.0.1:{port}",
            poll_interval=1.0,
            windows=WINDOWS,
            min_drafts=50,
            hold=1,
        )
        # the --speculative-config vLLM runs with, so the recommendation is a complete one to paste
        cfg["draft"]["config"] = {"method": cfg["draft"]["method"], "model": "drafter", "num_speculative_tokens": 3}
        cfg["targets"][0]["timeout"] = "900ms"
        cfg["targets"].append({"name": "vllm-gone", "url": f"http://127.0.0.1:{dead}/metrics", "timeout": "500ms"})
        config = tmp / "specwatch.yaml"
        config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "exporter"), os.environ.get("PYTHONPATH")]))
        )
        log = tmp / "sidecar.log"
        cmd = [sys.executable, "-c", "import sys; from specwatch.cli.main import main; sys.exit(main())"]
        proc = subprocess.Popen(
            [*cmd, "run", "--config", str(config)], stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=tmp
        )
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/readyz", 30, proc, log)
        keep = os.environ.get("SPECWATCH_SCREENSHOT_DIR")
        shots = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="specwatch-live-page-"))
        shots.mkdir(parents=True, exist_ok=True)
        print(f"\nlive page screenshots: {shots}")
        yield base, shots
    finally:
        if proc is not None:
            stop_process(proc)
        sim.stop()


def _status_verdict(base: str) -> tuple[str | None, str | None]:
    doc = requests.get(base + "/api/v1/status", timeout=5).json()
    routes = doc["routes"]
    if not routes:
        return None, None
    return routes[0]["route"], routes[0]["windows"].get(WINDOWS[0], {}).get("verdict")


def test_the_page_shows_the_answer_and_follows_the_verdict(live):
    base, shots = live
    deadline = time.monotonic() + DEADLINE_S
    route, verdict = None, None
    before_drop = ("keep", "undecided")
    while time.monotonic() < deadline and verdict not in before_drop:
        time.sleep(0.5)
        route, verdict = _status_verdict(base)
    assert verdict in before_drop, f"no keep or undecided verdict before the drop (got {verdict!r})"

    # A plot needs two points of history: on a loaded machine the first keep can come with one.
    while True:
        dom = dump_dom(base + "/")
        lines = re.findall(r'<polyline class="(?:alpha|breakeven|p99)" points="([^"]+)"', route_section(dom))
        if (len(lines) >= 3 and all(len(p.split()) >= 2 for p in lines)) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    shown = answer_verdict(dom, route)
    assert shown in before_drop, shown
    section = route_section(dom)
    table = section.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    first = table.split("</tr>", 1)[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", first)
    assert cells[0] == WINDOWS[0] and any(f"v-{v}" in cells[1] for v in before_drop)
    alpha, breakeven = float(cells[3]), float(cells[4].split()[0])  # numbers, not the dash
    assert alpha > breakeven, (alpha, breakeven)
    assert "Recommended <code>--speculative-config</code>" in section
    assert any(text in section for text in ("--speculative-config '{", "no change", "the data cannot decide"))
    points = re.findall(r'<polyline class="(alpha|breakeven|p50|p99)" points="([^"]+)"', section)
    assert {cls for cls, _ in points} >= {"alpha", "breakeven", "p99"}, points
    assert all(len(p.split()) >= 2 for _, p in points)
    targets = dom.split("<h2>Targets</h2>", 1)[1].split("</table>", 1)[0]
    gone = targets.split("vllm-gone", 1)[1].split("</tr>", 1)[0]
    assert '<span class="down">down</span>' in gone and "<b>connect</b>" in gone
    # Nothing but itself: no script, no external URL, and a CSP forbidding both.
    assert "<script" not in dom and not re.search(r'(src|href)="(https?:)?//', dom)
    assert "default-src 'none'" in dom
    # One-second polls, evaluated (and the page renewed) every five seconds, as the header says.
    assert 'http-equiv="refresh" content="5"' in dom and "polls every 1 s · evaluates every 5 s" in dom
    screenshot(base + "/", shots / "live-page-keep.png")

    # The drop: the same URL, loaded again, shows the new verdict.
    changed = None
    while time.monotonic() < deadline:
        time.sleep(1.0)
        dom = dump_dom(base + "/")
        changed = answer_verdict(dom, route)
        if changed not in (None, *before_drop):
            break
    assert changed == "disable", f"the page's verdict never changed to disable (last {changed!r})"
    section = route_section(dom)
    assert "remove --speculative-config" in section
    screenshot(base + "/", shots / "live-page-disable.png")


def test_the_browser_draws_the_speedup_band_against_one_the_verdict_timeline_and_itl(live):
    """The new plots exist in the DOM Chromium builds from the served page: the expected speedup's
    interval (a polygon) and line against a reference line at 1, the verdict strip (one rectangle per
    run of a verdict, each with a <title>), the per-token ITL tails, and a legend in every plot."""
    base, shots = live
    deadline = time.monotonic() + DEADLINE_S
    section = ""
    while time.monotonic() < deadline:
        section = route_section(dump_dom(base + "/"))
        if re.search(r'<polygon class="band" points="[^"]+ [^"]+"', section) and 'class="s-' in section:
            break
        time.sleep(1.0)
    svgs = re.findall(r"<svg .*?</svg>", section, flags=re.S)
    titles = [re.search(r"<title>([^<]*)</title>", svg).group(1) for svg in svgs]
    assert len(svgs) == 4, titles
    speedup, strip, itl = (
        next(svg for svg, title in zip(svgs, titles, strict=True) if title.startswith(start))
        for start in ("expected speedup and its interval", "verdict per poll", "inter-token latency per token")
    )
    assert re.search(r'<polygon class="band" points="[^"]+"', speedup)
    assert re.search(r'<polyline class="speedup" points="[^"]+ [^"]+"', speedup)
    assert re.search(r'<line class="ref" [^>]*><title>1×</title></line>', speedup)
    rects = re.findall(r'<rect class="s-(\w+)" [^>]*height="16"><title>(\w+)</title></rect>', strip)
    assert rects and all(cls == title for cls, title in rects), rects
    assert re.search(r'<polyline class="p99" points="[^"]+ [^"]+"', itl)
    for svg in svgs:  # a legend: a key per series, and every drawn series has its tooltip
        assert re.search(r'class="[\w-]+ key"|<rect class="s-\w+" x="[\d.]+" y="44"', svg)
    assert re.search(r"<g><title>speedup: now [\d.]+×", speedup)
    screenshot(base + "/", shots / "live-page-plots.png")
