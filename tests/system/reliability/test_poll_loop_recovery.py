"""A poll-loop bug (not a target fault) is recovered in process: no /healthz failure for a kubelet
to act on (in sidecar mode a restarting container takes the vLLM pod out of its Service), the fault
counted in specwatch_poll_errors_total and logged, and the verdicts back with the next polls."""

from __future__ import annotations

import threading
import time

import requests

from specwatch.config import from_mapping
from specwatch.serve.service import Service
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim import Simulator, load_scenario
from support.builders import scenario_raw_config

from .harness import parse_metrics, value
from .hostile import HostileServer, respond


def test_a_poll_loop_bug_is_counted_and_recovered_without_failing_liveness(monkeypatch):
    scenario = load_scenario("steady")
    sim, clock = Simulator(scenario, seed=1), [0.0]

    def payload() -> bytes:
        clock[0] += 5.0  # each poll is 5 simulated seconds
        sim.advance_to(clock[0])
        return sim.render().encode()

    vllm = HostileServer(respond(200, payload))
    raw = scenario_raw_config(scenario, url=vllm.url, poll_interval=1.0, windows=("1m",), min_drafts=10)
    service = Service(from_mapping(raw, environ={}), clock=lambda: sim.epoch + clock[0])
    failures = {"left": 2}
    evaluate = Pipeline.evaluate

    def buggy(self, now):
        if failures["left"] > 0 and self._evaluated:
            failures["left"] -= 1
            raise RuntimeError("injected poll-loop bug")
        return evaluate(self, now)

    monkeypatch.setattr(Pipeline, "evaluate", buggy)
    service.start()
    http = requests.Session()
    http.trust_env = False
    base = f"http://127.0.0.1:{service.port}"
    try:
        healthz, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline:
            healthz.append(http.get(base + "/healthz", timeout=5).status_code)
            metrics = parse_metrics(http.get(base + "/metrics", timeout=5).text)
            recovered = failures["left"] == 0 and value(
                metrics, "specwatch_acceptance_ratio", route="llama-70b", target="vllm", window="1m"
            )
            if recovered:
                break
            time.sleep(0.3)
        assert failures["left"] == 0, "both injected faults happened"
        assert recovered, "the verdict's inputs are served again after the recovery"
        assert value(metrics, "specwatch_poll_errors_total") == 2.0
        assert set(healthz) == {200}, "liveness never failed"
        assert threading.active_count() > 1 and service._poll_thread is not None and service._poll_thread.is_alive()
    finally:
        service.stop()
        vllm.stop()
