"""The progressive-delivery templates' queries (deploy/progressive/) against a real Prometheus fed by
the simulator: scenario alpha-drop, accelerated, the unmodified sidecar (`specwatch run`), Debian's
`prometheus` scraping it every second with the labels a Kubernetes scrape adds (namespace, pod).

The queries are sent as Argo Rollouts and Flagger send them: the template variables filled
(route, namespace) and the pinned window="5m" replaced by the sidecar's accelerated window, as the
alert pipeline test does with the rules. What it proves:
- before the drop the loss probability is below the templates' 0.8 failure threshold (the rollout
  would pass), after it the same query reaches 0.8 (the rollout would fail and roll back);
- the Argo and the Flagger queries return the same value;
- the graded gain's query returns nothing when nothing was rolled out (no change of K in the
  scenario): the templates treat that as inconclusive, never as a pass.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from deploy.test_progressive import argo, flagger
from support.cli import start_specwatch
from support.loopback import free_port, stop_process
from support.prometheus import PROMETHEUS, start_prometheus, static_job

pytestmark = [pytest.mark.e2e, pytest.mark.system]

SCENARIO = "alpha-drop"
SPEED = 20.0
SEED = 7
POLL_S = 0.5
WINDOW = "3s"
ROUTE, NAMESPACE = "chat", "llm"
THRESHOLD = 0.8


def sent(query: str) -> str:
    text = re.sub(r"\{\{\s*(args\.route|variables\.route)\s*\}\}", ROUTE, query)
    text = re.sub(r"\{\{\s*(args\.)?namespace\s*\}\}", NAMESPACE, text)
    assert 'window="5m"' in text or "window" not in text
    return text.replace('window="5m"', f'window="{WINDOW}"')


def instant(api: str, query: str, at: float) -> list[float]:
    answer = requests.get(f"{api}/query", params={"query": query, "time": at}, timeout=5).json()
    assert answer["status"] == "success", answer
    return [float(r["value"][1]) for r in answer["data"]["result"]]


@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus")
def test_template_queries_pass_before_the_alpha_drop_and_fail_after_it(tmp_path: Path):
    from specwatch import sim
    from specwatch.sim.sidecar_config import sidecar_config_for

    from .test_alert_pipeline import drop_time

    scenario = sim.load_scenario(SCENARIO)
    model_name = scenario.model_names[0]
    t_drop = drop_time(scenario, model_name)
    metrics = {m["name"]: m["provider"]["prometheus"]["query"] for m in argo()["spec"]["metrics"]}
    loss_argo, gain_argo = sent(metrics["specwatch-loss-probability"]), sent(metrics["specwatch-measured-gain"])
    flagger_queries = {d["metadata"]["name"]: sent(d["spec"]["query"]) for d in flagger()}

    procs: list[tuple[subprocess.Popen, Path]] = []
    handle = None
    try:
        sidecar_port = free_port()
        api = start_prometheus(
            tmp_path,
            [static_job("specwatch", f"127.0.0.1:{sidecar_port}", {"namespace": NAMESPACE, "pod": "vllm-0"})],
            procs,
        )

        handle = sim.serve(SCENARIO, host="127.0.0.1", port=0, speed=SPEED, seed=SEED)
        cfg = sidecar_config_for(
            scenario,
            target_url=handle.url,
            listen=f"127.0.0.1:{sidecar_port}",
            poll_interval=POLL_S,
            windows=(WINDOW,),
            speed=SPEED,
        )
        cfg["routes"] = [{"name": ROUTE, "target": "vllm", "match": {"model_name": model_name}}]
        start_specwatch(cfg, tmp_path, procs)

        before: list[float] = []
        after: list[float] = []
        gains: list[float] = []
        while handle.sim_time() < scenario.duration:
            now = handle.sim_time()
            # One evaluation time for the queries, three scrape intervals back: a scrape stamped before
            # `at` but ingested between two queries would otherwise give them different answers.
            at = time.time() - 3.0
            loss = instant(api, loss_argo, at)
            assert loss == instant(api, flagger_queries["specwatch-loss-probability"], at)
            gains += instant(api, gain_argo, at) + instant(api, flagger_queries["specwatch-measured-gain"], at)
            # a window wholly before (after) the drop, with a scrape's and a poll's delay of margin
            if loss and now < t_drop - 2 * SPEED:
                before += loss
            elif loss and now > t_drop + 5 * SPEED:
                after += loss
            time.sleep(1.0)

        print(
            f"\n[progressive] loss before the drop max {max(before, default=float('nan')):.3f} ({len(before)} reads), "
            f"after min {min(after, default=float('nan')):.3f} max {max(after, default=float('nan')):.3f} ({len(after)} reads)"
        )
        assert before, "no loss probability before the drop"
        assert max(before) < THRESHOLD, f"before the drop the rollout would fail: {before}"
        assert after and max(after) >= THRESHOLD, f"after the drop the rollout would pass: {after}"
        assert gains == [], "nothing was rolled out: the gain is absent (inconclusive), never a pass"
    finally:
        if handle is not None:
            handle.stop()
        for proc, _ in reversed(procs):
            stop_process(proc)
