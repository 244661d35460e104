"""An alpha drop reaches a webhook: simulator → `specwatch run` → Prometheus → Alertmanager → receiver.

Everything is real and on loopback: the simulated vLLM (scenario alpha-drop, accelerated), the
unmodified sidecar started as `specwatch run --config FILE`, Debian's `prometheus` (scrape and rule
evaluation every 1 s) loading a test copy of rules/, Debian's `prometheus-alertmanager` with HA
gossip off, and an HTTP receiver in this test.

The test copy of the rules changes only what acceleration forces: every `for:` becomes FOR_S seconds
and the pinned window="5m" becomes the sidecar's short window (the sidecar's windows are wall clock,
the simulator runs SPEED times faster). Expressions, labels and annotations are the shipped ones.

What it proves:
- SpecDecodeBelowBreakeven is not notified while the scenario is in its chat phase (alpha above
  break-even, which the sidecar's margin gauge shows as positive);
- after the drop it reaches the receiver with the route label from the sidecar config, its severity,
  and a description with live numbers (no "n/a") and the recommendation the sidecar really exported,
  rendered by its action (a --speculative-config to paste, keys to merge, or removing the flag);
- every specwatch metric the rules read is in the real sidecar's /metrics (the contract, live);
- the route-level SpecDecodeFleetBelowBreakeven reaches the receiver too, once for the route;
- the delay from the drop to the notification, printed with its stages (run with -s to see it).
"""

from __future__ import annotations

import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from deploy.test_rules import FLEET_HEALTH, every_expression, selectors  # the rules' metric names, parsed
from support.cli import start_specwatch
from support.loopback import free_port, stop_process, wait_http
from support.prometheus import PROMETHEUS, start_prometheus, static_job

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "rules"
SCENARIO = "alpha-drop"
SPEED = 20.0  # simulated seconds per wall second
SEED = 7
POLL_S = 0.5  # sidecar poll interval
WINDOW = "3s"  # sidecar window (60 simulated seconds at SPEED)
FOR_S = 2  # every `for:` in the test copy of the rules
ROUTE = "chat"  # route name given in the sidecar config (not derived from the model)
ALERT = "SpecDecodeBelowBreakeven"

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def render_recommendation(action: str, config: str) -> str:
    """What the rules' "Recommended:" template makes of one specwatch_recommended_config_info series."""
    if action == "apply":
        return f"--speculative-config '{config}'" if config.startswith("{") else config
    if action == "remove_speculative_config":
        return config or "remove --speculative-config and restart vLLM"
    if config:
        return f"merge {config} into your --speculative-config"
    return "no change"


def _sim():
    try:
        from specwatch import sim
    except ImportError:
        return None
    return sim if hasattr(sim, "serve") else None


# ---- helpers -------------------------------------------------------------------------------------


def accelerated_rules_copy(dest: Path) -> list[Path]:
    """Copy rules/*.yaml with every `for:` shortened to FOR_S and window="5m" re-pinned to WINDOW."""
    out = []
    for src in sorted(RULES.glob("*.yaml")):
        text = original = src.read_text()
        text, n_for = re.subn(r"^(\s+for:\s*)\S+\s*$", rf"\g<1>{FOR_S}s", text, flags=re.MULTILINE)
        text = text.replace('window="5m"', f'window="{WINDOW}"')
        n_alerts = len(re.findall(r"^\s+- alert:", text, flags=re.MULTILINE))
        if n_alerts:
            assert n_for == n_alerts, f"{src.name}: expected a `for:` per alert ({n_alerts}), rewrote {n_for}"
            # (a file whose alerts read no per-window family, e.g. the fleet shard alert, pins none)
            assert ('window="5m"' in original) <= (f'window="{WINDOW}"' in text), f"{src.name}: no window pin rewritten"
        path = dest / src.name
        path.write_text(text)
        out.append(path)
    return out


def drop_time(scenario, route: str) -> float:
    """Simulated time of the first phase whose acceptance is below the phase before it."""
    prev = None
    for phase in scenario.phases:
        acc = phase.routes[route].acceptance
        mean = sum(acc) / len(acc)
        if prev is not None and mean < prev:
            return phase.start
        prev = mean
    raise AssertionError(f"scenario {scenario.name} has no acceptance drop")


class Receiver:
    """Alertmanager webhook receiver: keeps every POSTed payload with its arrival (sim) time."""

    def __init__(self, clock):
        self.clock = clock
        self.posts: list[tuple[float, dict]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with outer.lock:
                    outer.posts.append((outer.clock(), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def firing(self, alertname: str) -> list[tuple[float, dict]]:
        with self.lock:
            return [
                (t, a)
                for t, p in self.posts
                for a in p.get("alerts", [])
                if a.get("status") == "firing" and a["labels"].get("alertname") == alertname
            ]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def sidecar_samples(text: str, name: str) -> list[tuple[dict, float]]:
    out = []
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels_part, _, value = line[len(name) :].rpartition("} ")
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels_part))
        labels = {k: v.encode().decode("unicode_escape") for k, v in labels.items()}
        out.append((labels, float(value)))
    return out


# ---- the test ------------------------------------------------------------------------------------


@pytest.mark.skipif(
    PROMETHEUS is None or ALERTMANAGER is None, reason="needs Debian packages prometheus and prometheus-alertmanager"
)
@pytest.mark.skipif(_sim() is None, reason="specwatch.sim.serve is not available")
def test_alpha_drop_reaches_alertmanager_webhook_with_route_and_recommendation(tmp_path: Path):
    sim = _sim()
    from specwatch.sim.sidecar_config import sidecar_config_for

    scenario = sim.load_scenario(SCENARIO)
    model_name = scenario.model_names[0]
    t_drop = drop_time(scenario, model_name)
    rules = accelerated_rules_copy(tmp_path)

    procs: list[tuple[subprocess.Popen, Path]] = []
    handle = None
    receiver = None
    try:
        # Alertmanager → receiver (the receiver's clock is the simulator's, set once it starts)
        clock = {"fn": lambda: float("nan")}
        receiver = Receiver(lambda: clock["fn"]())  # noqa: PLW0108 -- late-bound: clock["fn"] is replaced once the sim starts
        am_port = free_port()
        am_cfg = tmp_path / "alertmanager.yml"
        am_cfg.write_text(
            yaml.safe_dump(
                {
                    "route": {
                        "receiver": "hook",
                        "group_by": ["alertname", "route"],
                        "group_wait": "1s",
                        "group_interval": "1s",
                        "repeat_interval": "1h",
                    },
                    "receivers": [{"name": "hook", "webhook_configs": [{"url": receiver.url, "send_resolved": False}]}],
                }
            )
        )
        am_log = tmp_path / "alertmanager.log"
        am = subprocess.Popen(
            [
                ALERTMANAGER,
                f"--config.file={am_cfg}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
                f"--storage.path={tmp_path / 'am-data'}",
            ],
            stdout=am_log.open("w"),
            stderr=subprocess.STDOUT,
        )
        procs.append((am, am_log))

        # the sidecar's port is chosen now so Prometheus can be configured before anything runs
        sidecar_port = free_port()
        wait_http(f"http://127.0.0.1:{am_port}/-/ready", 30, am, am_log)
        prom_api = start_prometheus(
            tmp_path,
            [static_job("specwatch", f"127.0.0.1:{sidecar_port}", {"namespace": "llm", "pod": "vllm-0"})],
            procs,
            rule_files=rules,
            alertmanager=f"127.0.0.1:{am_port}",
        )
        groups = requests.get(f"{prom_api}/rules", timeout=5).json()["data"]["groups"]
        assert {"spec-decode", "specwatch-health"} <= {g["name"] for g in groups}

        # the simulated vLLM and the sidecar, configured as a user would for this deployment
        handle = sim.serve(SCENARIO, host="127.0.0.1", port=0, speed=SPEED, seed=SEED)
        clock["fn"] = handle.sim_time
        cfg = sidecar_config_for(
            scenario,
            target_url=handle.url,
            listen=f"127.0.0.1:{sidecar_port}",
            poll_interval=POLL_S,
            windows=(WINDOW,),
            speed=SPEED,
        )
        cfg["routes"] = [
            {"name": ROUTE, "target": "vllm", "match": {"model_name": model_name}, "baseline_itl_p99_seconds": 0.05}
        ]
        start_specwatch(cfg, tmp_path, procs)

        # watch the three stages until the notification arrives or the scenario is over
        margins: list[tuple[float, float]] = []  # (sim time, sidecar margin)
        advice_seen: set[tuple[str, str]] = set()  # (action, config) exported for the route
        t_prom_firing = None
        deadline_sim = scenario.duration + 5 * SPEED
        while handle.sim_time() < deadline_sim and not receiver.firing(ALERT):
            now = handle.sim_time()
            try:
                text = requests.get(f"http://127.0.0.1:{sidecar_port}/metrics", timeout=2).text
            except requests.RequestException:
                text = ""
            for labels, value in sidecar_samples(text, "specwatch_acceptance_margin"):
                if labels.get("route") == ROUTE and labels.get("window") == WINDOW:
                    margins.append((now, value))
            for labels, _ in sidecar_samples(text, "specwatch_recommended_config_info"):
                if labels.get("route") == ROUTE and labels.get("window") == WINDOW:
                    advice_seen.add((labels.get("action", ""), labels.get("config", "")))
            if t_prom_firing is None:
                alerts = requests.get(f"{prom_api}/alerts", timeout=5).json()["data"]["alerts"]
                if any(a["labels"]["alertname"] == ALERT and a["state"] == "firing" for a in alerts):
                    t_prom_firing = handle.sim_time()
            for proc, log in procs:
                assert proc.poll() is None, f"{proc.args[0]} died:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)

        notified = receiver.firing(ALERT)
        logs = "\n".join(f"--- {log.name}\n{log.read_text()[-1500:]}" for _, log in procs)
        assert notified, f"no {ALERT} notification by sim t={handle.sim_time():.0f}s; margins={margins[-5:]}\n{logs}"

        # silent before the drop, and the chat phase really was above break-even
        before = [m for t, m in margins if t < t_drop]
        assert before and all(m > 0 for m in before[len(before) // 2 :]), f"chat-phase margins: {before}"
        t_notified, alert = notified[0]
        assert t_notified > t_drop, f"{ALERT} notified at sim t={t_notified:.1f}s, before the drop at {t_drop:.0f}s"

        # the notification: routing labels and the recommendation
        labels, annotations = alert["labels"], alert["annotations"]
        assert labels["route"] == ROUTE
        assert labels["window"] == WINDOW
        assert labels["severity"] == "info"  # per replica; the route-level alert is the fleet one
        assert labels["target"] == "vllm" and labels["namespace"] == "llm" and labels["job"] == "specwatch"
        description = annotations["description"]
        assert "n/a" not in description, description
        assert re.search(r"alpha=0\.\d{3} is below the break-even 0\.\d{3}", description), description
        match = re.search(r"Recommended: (.*)$", description)
        assert match, description
        assert match.group(1) in {render_recommendation(a, c) for a, c in advice_seen}, (match.group(1), advice_seen)
        for keys in re.findall(r"(\{.*\})", match.group(1)):
            assert isinstance(json.loads(keys), dict) and json.loads(keys)
        assert annotations["runbook_url"].endswith("docs/runbook.md#specdecodebelowbreakeven")
        assert annotations["summary"]

        # the route-level alert: once for the route, with the number and share of replicas below break-even
        fleet_deadline = time.monotonic() + 15
        while not receiver.firing("SpecDecodeFleetBelowBreakeven") and time.monotonic() < fleet_deadline:
            time.sleep(0.2)
        fleet = receiver.firing("SpecDecodeFleetBelowBreakeven")
        assert fleet, "no SpecDecodeFleetBelowBreakeven notification"
        fleet_alert = fleet[0][1]
        assert fleet_alert["labels"]["route"] == ROUTE and fleet_alert["labels"]["severity"] == "warning"
        assert "instance" not in fleet_alert["labels"], "one alert per route, not per replica"
        assert "1 of 1 replicas (100%) are below break-even" in fleet_alert["annotations"]["description"], fleet_alert

        # every specwatch metric the rules and their template queries read is in the real sidecar's output
        # (but fleet mode's own health, which only a fleet-mode specwatch exports: specwatch-fleet group)
        text = requests.get(f"http://127.0.0.1:{sidecar_port}/metrics", timeout=5).text
        exported = set(re.findall(r"^# TYPE (\S+)", text, flags=re.MULTILINE)) | set(
            re.findall(r"^(\w+)[{ ]", text, flags=re.MULTILINE)
        )
        read = {
            sel.name for _, expr in every_expression() for sel in selectors(expr) if sel.name.startswith("specwatch_")
        } - FLEET_HEALTH
        assert read - exported == set(), f"rules read metrics the sidecar does not export: {sorted(read - exported)}"

        # the delay from the drop to the notification, and its stages, in wall-clock seconds
        t_negative = next((t for t, m in margins if t > t_drop and m < 0), None)

        def wall(t):
            return "n/a" if t is None else f"{(t - t_drop) / SPEED:.2f}s"

        delay = (t_notified - t_drop) / SPEED
        print(
            f"\n[alert delay] scenario {SCENARIO} at {SPEED:g}x, sidecar poll {POLL_S}s window {WINDOW}, "
            f"scrape/eval 1s, for {FOR_S}s, group_wait 1s: drop -> sidecar margin < 0 {wall(t_negative)}, "
            f"-> Prometheus firing {wall(t_prom_firing)}, -> webhook {delay:.2f}s wall "
            f"({t_notified - t_drop:.0f}s simulated)"
        )
        print(f"[alert delay] description: {description}")
        # generous bound for a shared 2-core machine: window + scrape + eval + for + group_wait is ~8 s
        assert delay < 20, f"notification took {delay:.1f}s after the drop"
    finally:
        for proc, _ in reversed(procs):
            stop_process(proc)
        if handle is not None:
            handle.stop()
        if receiver is not None:
            receiver.close()
