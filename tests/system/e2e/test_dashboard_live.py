"""The dashboard against live servers: simulator → `specwatch run` → real Prometheus, all on loopback.

What it proves:
- every variable query of dashboards/specwatch.json resolves to values in Prometheus;
- every panel query, with the variables substituted the way Grafana does, runs without error and
  returns data (no empty panel), and every label a legend names is on the returned series;
- the alert annotation (`ALERTS`) returns the firing alerts of `rules/` (loaded with `for:` shortened);
- every sidecar metric the dashboard names is in the sidecar's real /metrics output;
- key queries render in Prometheus's own /graph page (headless Chromium) as non-trivial PNGs, written
  under a temp dir (set SPECWATCH_SCREENSHOT_DIR to keep them).

The sidecar polls two targets: the simulator, and a closed loopback port (so the Health row's
target-down and poll-error panels have something to show, as they would in an incident).

Fleet-shaped too: Prometheus also scrapes the simulator as job `vllm`, and a second specwatch in fleet
mode (namespace monitoring, as the README's `-n monitoring` install) reads it back from that
Prometheus and is scraped with honor_labels. So the "Fleet mode" row (query source health,
specwatch_fleet_*) must return data, with the variables as Grafana sets them: namespace, pod and
cluster on "All".
"""

from __future__ import annotations

import colorsys
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from deploy.test_dashboard import (  # shared helpers of the static dashboard tests
    EXPORTED,
    load_dashboard,
    panels,
    selectors,
    substitute,
)
from support.cli import start_specwatch
from support.loopback import free_port, stop_process
from support.prometheus import PROMETHEUS, start_prometheus, static_job
from support.rule_files import rule_files

pytestmark = pytest.mark.e2e

# batch-surge: alpha stays at 0.45 while concurrency climbs 32 -> 192 and the break-even rises past it,
# the story the Acceptance and Load rows must tell.
SCENARIO = os.environ.get("SPECWATCH_E2E_SCENARIO", "batch-surge")
SPEED = 20
STORY_WINDOW = "15s"  # a window short against the accelerated scenario (15s wall = 300s simulated)
NAMESPACE, POD = "llm", "vllm-0"
RATE_INTERVAL = "30s"  # what Grafana's $__rate_interval gives for a 1s scrape at this zoom
DATA_DEADLINE_S = 150
SCREENSHOT_HISTORY_S = 60  # seconds of scraped history before the screenshots (graph range 1m)


# ---- process helpers ----------------------------------------------------------------------------


def model_names(metrics_url: str) -> list[str]:
    text = requests.get(metrics_url, timeout=5).text
    return sorted(set(re.findall(r'^vllm:[a-z_]+\{[^}]*model_name="([^"]+)"', text, re.MULTILINE)))


def shortened_rules(dest: Path) -> list[Path]:
    """Test copies of rules/*.yaml with every alert's `for:` cut to 1s (the rules are otherwise unchanged)."""
    out = []
    for f in rule_files():
        doc = yaml.safe_load(f.read_text(encoding="utf-8"))
        for group in doc.get("groups", []):
            for rule in group.get("rules", []):
                if "alert" in rule:
                    rule["for"] = "1s"
                    rule.pop("keep_firing_for", None)
        path = dest / f.name
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        out.append(path)
    return out


@dataclass
class Stack:
    prom: str
    sidecar: str
    fleet: str  # the fleet-mode specwatch reading the same deployment back from Prometheus
    routes: list[str]
    tmp: Path
    started: float  # time.monotonic() when the stack was up
    started_wall: float  # the same moment, unix time


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if PROMETHEUS is None:
        pytest.skip("Debian package `prometheus` is not installed")
    from specwatch.sim import serve
    from specwatch.sim.scenario import load_scenario
    from specwatch.sim.sidecar_config import sidecar_config_for

    tmp = tmp_path_factory.mktemp("dashboard-live")
    procs: list[tuple[subprocess.Popen, Path]] = []
    sim = serve(SCENARIO, host="127.0.0.1", port=0, speed=SPEED, seed=0)
    try:
        metrics_url = sim.url
        models = model_names(metrics_url)
        assert models, f"simulator at {metrics_url} exports no vllm model_name"

        sidecar_port, dead_port = free_port(), free_port()  # nothing listens on dead_port
        # The config a user would write for the scenario's deployment (hardware, model, TP, method),
        # so the break-even comes from the same cost model as the simulator's step times.
        cfg = sidecar_config_for(
            load_scenario(SCENARIO),
            target_url=metrics_url,
            listen=f"127.0.0.1:{sidecar_port}",
            poll_interval=1.0,
            windows=(STORY_WINDOW, "1m", "5m"),
            min_drafts=50,
            hold=1,
            speed=SPEED,
        )
        # the --speculative-config vLLM runs with: the configured-K line and a complete recommendation
        cfg["draft"]["config"] = {
            "method": cfg["draft"]["method"],
            "model": "drafter",
            "num_speculative_tokens": cfg["draft"]["k"],
        }
        cfg["targets"][0]["timeout"] = "900ms"
        cfg["targets"].append({"name": "vllm-gone", "url": f"http://127.0.0.1:{dead_port}/metrics", "timeout": "500ms"})
        # baseline_itl_p99_seconds makes the Latency row's spec-off baseline line appear
        cfg["routes"] = [
            {"name": m, "target": "vllm", "match": {"model_name": m}, "baseline_itl_p99_seconds": 0.05} for m in models
        ]
        sidecar = start_specwatch(cfg, tmp, procs, ready="/metrics")

        fleet_port = free_port()
        rules_dir = tmp / "rules"
        rules_dir.mkdir()
        replica = {"namespace": NAMESPACE, "pod": POD}
        fleet_replica = {"namespace": "monitoring", "pod": "specwatch-fleet-0"}
        api = start_prometheus(
            tmp,
            [
                static_job("vllm", urllib.parse.urlsplit(metrics_url).netloc, replica),
                {**static_job("specwatch-fleet", f"127.0.0.1:{fleet_port}", fleet_replica), "honor_labels": True},
                static_job("specwatch", f"127.0.0.1:{sidecar_port}", replica),
            ],
            procs,
            rule_files=shortened_rules(rules_dir),
        )
        prom = api.removesuffix("/api/v1")
        # fleet mode: the same deployment read back from Prometheus (docs/fleet.md)
        fleet_cfg = {k: v for k, v in cfg.items() if k not in ("targets", "listen", "evaluation_interval")}
        fleet_cfg["listen"] = f"127.0.0.1:{fleet_port}"
        fleet_cfg["routes"] = [
            {"name": m, "match": {"model_name": m}, "baseline_itl_p99_seconds": 0.05} for m in models
        ]
        fleet_cfg["poll_interval"] = 2.0
        fleet_cfg["prometheus"] = {
            "url": prom,
            "selector": '{job="vllm"}',
            "replica_labels": ["namespace", "pod"],
            "timeout": "1500ms",
            "scrape_interval": "1s",
        }
        fleet = start_specwatch(fleet_cfg, tmp, procs, name="specwatch-fleet", ready="/metrics")
        yield Stack(
            prom=prom,
            sidecar=sidecar,
            fleet=fleet,
            routes=models,
            tmp=tmp,
            started=time.monotonic(),
            started_wall=time.time(),
        )
    finally:
        for proc, _ in reversed(procs):
            stop_process(proc)
        sim.stop()


# ---- Prometheus queries ---------------------------------------------------------------------------


def prom_get(stack: Stack, path: str, **params) -> dict:
    return requests.get(stack.prom + path, params=params, timeout=10).json()


def run_query(stack: Stack, expr: str, *, instant: bool) -> dict:
    now = time.time()
    if instant:
        return prom_get(stack, "/api/v1/query", query=expr, time=now)
    return prom_get(stack, "/api/v1/query_range", query=expr, start=now - 90, end=now, step=2)


def grafana_regex_escape(value: str) -> str:
    """What Grafana's Prometheus datasource does to one value of a multi-value variable."""
    return re.sub(r"([$^*{}\[\]'+?.()|])", r"\\\\\1", value.replace("\\", "\\\\\\\\"))


def resolve_variables(stack: Stack) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Run each `label_values(selector, label)` variable query like Grafana does (series API)."""
    dash = load_dashboard()
    values: dict[str, str] = {}
    found: dict[str, list[str]] = {}
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        selector, label = re.fullmatch(r"label_values\((.*), (\w+)\)", var["query"]).groups()
        body = prom_get(
            stack,
            "/api/v1/series",
            **{"match[]": substitute(selector, values), "start": time.time() - 300, "end": time.time()},
        )
        assert body["status"] == "success", body
        found[var["name"]] = sorted({s[label] for s in body["data"] if label in s})
        if var["name"] == "window":
            values["window"] = var["current"]["value"]  # the dashboard's default, 5m
        elif var.get("includeAll") and var["name"] in ("pod", "cluster", "namespace"):
            values[var["name"]] = var["allValue"]  # "All" (no cluster label here: one cluster)
        elif var.get("multi"):
            values[var["name"]] = "(" + "|".join(grafana_regex_escape(v) for v in found[var["name"]]) + ")"
        else:
            values[var["name"]] = found[var["name"]][0] if found[var["name"]] else ""
    return values, found


def panel_targets() -> list[tuple[str, dict]]:
    return [(p["title"], t) for p in panels(load_dashboard()) for t in p["targets"]]


def check_target(stack: Stack, values: dict[str, str], title: str, t: dict) -> str | None:
    """None when the query answers with data whose series carry every label its legend names."""
    expr = substitute(t["expr"], values, rate_interval=RATE_INTERVAL)
    body = run_query(stack, expr, instant=t["instant"])
    if body.get("status") != "success":
        return f"{title}/{t['refId']}: error {body.get('error')}"
    result = body["data"]["result"]
    if not result:
        return f"{title}/{t['refId']}: no data for {expr}"
    wanted = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", t["legendFormat"]))
    for series in result:
        missing = wanted - set(series["metric"])
        # recommended_config_info's config is empty by design (so absent in Prometheus) for the actions
        # that carry no config: remove --speculative-config and no change
        if series["metric"].get("action") in ("remove_speculative_config", "no_change"):
            missing -= {"config"}
        if missing:
            return f"{title}/{t['refId']}: legend labels {sorted(missing)} missing on {series['metric']}"
    return None


@pytest.fixture(scope="module")
def live(stack):
    """Wait until every panel query answers (the simulator runs 20x, the windows fill in seconds)."""
    deadline = time.monotonic() + DATA_DEADLINE_S
    problems: list[str] = ["not checked yet"]
    values: dict[str, str] = {}
    while time.monotonic() < deadline:
        values, found = resolve_variables(stack)
        if all(v for k, v in found.items() if k != "cluster"):  # cluster is optional
            problems = [p for title, t in panel_targets() if (p := check_target(stack, values, title, t))]
            if not problems:
                break
        else:
            problems = [f"variable {k} has no values yet" for k, v in found.items() if not v and k != "cluster"]
        time.sleep(3)
    return values, problems


# ---- tests ----------------------------------------------------------------------------------------


def test_every_variable_query_resolves_to_values(stack, live):
    _, found = resolve_variables(stack)
    assert found["namespace"] == [NAMESPACE]
    assert found["pod"] == [POD]
    assert found["cluster"] == []  # optional: a single-cluster Prometheus has no cluster label
    assert found["route"] == stack.routes
    assert found["window"] == sorted([STORY_WINDOW, "1m", "5m"])


def test_every_panel_query_returns_data_with_its_legend_labels(stack, live):
    values, problems = live
    assert problems == [], "\n".join(problems)
    print(f"\n{len(panel_targets())} panel queries answered with data; variables {values}")


def test_fleet_mode_row_answers_with_every_variable_on_all(stack, live):
    """The Fleet mode row in a fleet-shaped stack, namespace/pod/cluster on All (.*), and on one namespace."""
    dash = load_dashboard()
    row, fleet = None, []
    for p in dash["panels"]:
        if p["type"] == "row":
            row = p["title"]
        elif row.startswith("Fleet mode"):
            fleet += [(p["title"], t) for t in p["targets"]]
    assert len(fleet) == 7, fleet
    values, _ = live
    assert values["namespace"] == values["pod"] == values["cluster"] == ".*", values
    problems = [p for title, t in fleet if (p := check_target(stack, values, title, t))]
    picked = dict(values, namespace=grafana_regex_escape(NAMESPACE))  # one namespace picked: the row ignores it
    problems += [p for title, t in fleet if (p := check_target(stack, picked, title, t))]
    assert problems == [], "\n".join(problems)


def test_alert_annotation_returns_firing_alerts_of_rules(stack, live):
    values, _ = live
    ann = next(a for a in load_dashboard()["annotations"]["list"] if a.get("expr") and "ALERTS" in a["expr"])
    expr = substitute(ann["expr"], values)
    deadline = time.monotonic() + 60
    while True:
        body = run_query(stack, expr, instant=False)
        assert body["status"] == "success", body
        fired = {s["metric"]["alertname"] for s in body["data"]["result"]}
        if fired or time.monotonic() > deadline:
            break
        time.sleep(2)
    # the dead second target alone makes SpecDecodeTargetDown fire
    assert "SpecDecodeTargetDown" in fired, fired
    for series in body["data"]["result"]:
        assert series["metric"]["alertstate"] == "firing"
        assert series["metric"].get("namespace") == NAMESPACE
    print(f"\nALERTS in the annotation: {sorted(fired)}")


ACCEPTANCE_PANEL = "Acceptance rate α vs break-even α* ($window window)"
LOAD_PANEL = "Live batch size vs largest batch where speculation pays"


def panel_values(stack: Stack, values: dict[str, str], title: str, ref: str) -> dict[float, float]:
    """The one series a panel target draws for the single route and pod, over the whole run.

    The sidecar's target picked (target=vllm): fleet mode exports the same replica again, as target
    llm/vllm-0, from Prometheus's copy, which lags the sidecar by a scrape.
    """
    (t,) = [t for p in panels(load_dashboard()) if p["title"] == title for t in p["targets"] if t["refId"] == ref]
    expr = substitute(t["expr"], dict(values, target=grafana_regex_escape("vllm")), rate_interval=RATE_INTERVAL)
    body = prom_get(stack, "/api/v1/query_range", query=expr, start=stack.started_wall - 5, end=time.time(), step=1)
    assert body["status"] == "success", body
    result = body["data"]["result"]
    assert len(result) <= 1, result
    return {float(ts): float(v) for ts, v in (result[0]["values"] if result else [])}


def first_time(points: list[tuple[float, bool]]) -> float | None:
    return next((ts for ts, flag in points if flag), None)


def test_acceptance_and_load_rows_show_alpha_falling_below_the_rising_breakeven_as_batch_grows(stack, live):
    """The issue's story, read from the dashboard's own queries on a short window of batch-surge."""
    if SCENARIO != "batch-surge":
        pytest.skip("the story needs the batch-surge scenario")
    values = dict(live[0], window=STORY_WINDOW)
    deadline = time.monotonic() + 120
    while True:
        alpha = panel_values(stack, values, ACCEPTANCE_PANEL, "A")
        breakeven = panel_values(stack, values, ACCEPTANCE_PANEL, "B")
        batch = panel_values(stack, values, LOAD_PANEL, "A")
        max_batch = panel_values(stack, values, LOAD_PANEL, "B")
        ts = sorted(set(alpha) & set(breakeven) & set(batch) & set(max_batch))
        if ts and alpha[ts[-1]] < breakeven[ts[-1]] and batch[ts[-1]] > max_batch[ts[-1]]:
            break
        assert time.monotonic() < deadline, (
            f"no crossing yet: last α={alpha.get(ts[-1]) if ts else None} α*={breakeven.get(ts[-1]) if ts else None} "
            f"B={batch.get(ts[-1]) if ts else None} max B={max_batch.get(ts[-1]) if ts else None}"
        )
        time.sleep(3)
    first, last = ts[0], ts[-1]
    # at first speculation pays: α above α*, the batch below the largest paying batch
    assert alpha[first] > breakeven[first] and batch[first] < max_batch[first]
    # α holds (0.45 in the scenario) while the batch grows and the break-even rises past it
    assert abs(alpha[last] - alpha[first]) < 0.1
    assert batch[last] > 2 * batch[first]
    assert breakeven[last] > breakeven[first] + 0.1
    # both rows show the crossing at the same moment
    t_acc = first_time([(t, alpha[t] < breakeven[t]) for t in ts])
    t_load = first_time([(t, batch[t] > max_batch[t]) for t in ts])
    assert t_acc is not None and t_load is not None and abs(t_acc - t_load) <= 5, (t_acc, t_load)
    print(
        f"\nα {alpha[first]:.3f} -> {alpha[last]:.3f}; α* {breakeven[first]:.3f} -> {breakeven[last]:.3f}; "
        f"B {batch[first]:.0f} -> {batch[last]:.0f}; max paying B {max_batch[first]:.0f} -> {max_batch[last]:.0f}; "
        f"crossing {t_acc - first:.0f}s (acceptance) / {t_load - first:.0f}s (load) after the first point"
    )


def test_every_sidecar_metric_the_dashboard_names_is_in_the_real_exposition(stack, live):
    from prometheus_client.parser import text_string_to_metric_families

    # While a poll of the simulated vLLM fails (a slow poll on a loaded 2-core machine), its series are
    # absent by design: take the exposition of a moment when that target is up.
    deadline = time.monotonic() + 30
    while True:
        text = requests.get(stack.sidecar + "/metrics", timeout=5).text
        if 'specwatch_target_up{target="vllm"} 1.0' in text or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    exposed = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    used = {
        s.name
        for _, t in panel_targets()
        for s in selectors(substitute(t["expr"], live[0], rate_interval=RATE_INTERVAL))
    }
    used_exported = used & EXPORTED
    assert used_exported, "the dashboard names no sidecar metric?"
    assert used_exported - exposed == set()


# ---- screenshots of key queries in Prometheus's /graph page ------------------------------------------


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) into rows of RGB(A) bytes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    bpp = 4 if color == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r) if bpp == 3 else bytes(b for i, b in enumerate(r) if i % 4 != 3) for r in rows]


# Coloured pixels of Prometheus 2.42's /graph page that are not plotted series: the Bootstrap primary
# blue of buttons, links and the focus ring (hue 211°, and its blends with white keep that hue).
# Everything else vivid below the title bar is a plotted line or its legend swatch.
UI_BLUE_HUE = (208.0, 215.0)


def plotted_pixels(path: Path) -> int:
    width, height, rows = png_pixels(path.read_bytes())
    count = 0
    for y in range(60, height):  # below the dark title bar
        row = rows[y]
        for x in range(width):
            r, g, b = row[3 * x : 3 * x + 3]
            if max(r, g, b) - min(r, g, b) < 40:  # grey, black, white: text, grid, axes
                continue
            hue, sat, val = colorsys.rgb_to_hsv(r / 255, g / 255, b / 255)
            # vivid and bright (not the dark red text of "No datapoints found."), and not UI blue
            if sat > 0.4 and val > 0.5 and not UI_BLUE_HUE[0] <= hue * 360 <= UI_BLUE_HUE[1]:
                count += 1
    return count


def screenshot(stack: Stack, expr: str, out: Path) -> Path:
    url = stack.prom + "/graph?" + urllib.parse.urlencode({"g0.expr": expr, "g0.tab": "0", "g0.range_input": "1m"})
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--window-size=1280,800",
                "--virtual-time-budget=8000",
                f"--screenshot={out}",
                url,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert proc.returncode == 0 and out.exists(), proc.stderr[-2000:]
    return out


# Key pictures: each is one Prometheus graph with the series a panel overlays.
KEY_QUERIES = {
    "alpha-vs-breakeven": ("Acceptance rate α vs break-even α* ($window window)", ("A", "B")),
    "batch-vs-max-paying-batch": ("Live batch size vs largest batch where speculation pays", ("A", "B")),
    "itl-p50-p99-baseline": ("ITL per step: P50 and P99 vs spec-off baseline", ("A", "B", "C")),
    "fleet-itl": ("Fleet ITL per step P50 / P99 and per-token mean", ("A", "B", "C")),
}


def test_key_queries_render_as_nontrivial_graphs_in_prometheus(stack, live, tmp_path_factory):
    if not shutil.which("chromium"):
        pytest.skip("Debian package `chromium` is not installed")
    values, problems = live
    assert problems == [], "panels without data: screenshots would be empty"
    # let a minute of history build up so the lines span the graph
    time.sleep(max(0.0, SCREENSHOT_HISTORY_S - (time.monotonic() - stack.started)))
    # the short window: at 20x the 5m window spans the whole run and smooths the crossing away
    values = dict(values, window=STORY_WINDOW)
    keep = os.environ.get("SPECWATCH_SCREENSHOT_DIR")
    out_dir = Path(keep) if keep else tmp_path_factory.mktemp("screenshots")
    out_dir.mkdir(parents=True, exist_ok=True)
    by_title = {p["title"]: p for p in panels(load_dashboard())}

    # The detector must see nothing on a graph with no data.
    empty = screenshot(stack, 'specwatch_acceptance_ratio{route="no-such-route"}', out_dir / "empty.png")
    width, height, _ = png_pixels(empty.read_bytes())
    assert (width, height) == (1280, 800)
    baseline = plotted_pixels(empty)
    # only the anti-aliased edges of the red "No datapoints found." text count there (~200 pixels)
    assert baseline < 400, f"empty graph shows {baseline} coloured pixels"

    report = {}
    for name, (title, refs) in KEY_QUERIES.items():
        targets = {t["refId"]: t for t in by_title[title]["targets"]}
        # `or` matches label sets without the metric name, so tag each query with its legend's name
        expr = " or ".join(
            'label_replace({}, "series", "{}", "", "")'.format(
                substitute(targets[r]["expr"], values, rate_interval=RATE_INTERVAL),
                targets[r]["legendFormat"].split("{{")[0].strip() or r,
            )
            for r in refs
        )
        shot = screenshot(stack, expr, out_dir / f"{name}.png")
        data = shot.read_bytes()
        assert png_pixels(data)[:2] == (1280, 800)
        plotted = plotted_pixels(shot)
        report[name] = {"png": str(shot), "bytes": len(data), "plotted_pixels": plotted}
        assert plotted > max(1000, 3 * baseline), f"{name}: only {plotted} coloured pixels ({shot})"
    print("\nscreenshots:", json.dumps(report, indent=1))


def test_the_fleet_modes_live_page_in_a_browser_shows_the_fleet_rows_and_every_replicas_verdict(stack, live):
    """`/` of the fleet-mode specwatch, as headless Chromium renders it: the query source, a fleet
    row per route and window, and each replica-route's verdict with plotted points (the sidecar's
    page is tests/system/e2e/test_live_page.py)."""
    if not shutil.which("chromium"):
        pytest.skip("Debian package `chromium` is not installed")
    from system.e2e.test_live_page import dump_dom

    deadline = time.monotonic() + 60
    while True:
        dom = dump_dom(stack.fleet + "/")
        if "<polyline" in dom and "No replica evaluated yet" not in dom:
            break
        assert time.monotonic() < deadline, dom[-3000:]
        time.sleep(2)
    assert "fleet mode" in dom and "Query source" in dom and "The fleet, per route" in dom
    for route in stack.routes:
        assert route in dom
    assert re.search(r'class="v v-(keep|shorten|disable|insufficient_data|undecided)"', dom), "a replica's verdict"
    assert "<script" not in dom and "http://cdn" not in dom
