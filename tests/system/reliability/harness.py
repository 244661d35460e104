"""Drive the real sidecar Service poll by poll against a real HTTP target, and read it over HTTP.

`Sidecar` is `specwatch run` minus the timer thread: the same Service, Scraper, Pipeline and
HTTP server, but each poll happens when the test calls `poll()`, with a fake wall clock that
advances 5 s per poll (the sim advances with it). So a test can put a fault on exactly one poll
and compare the state before and after, without sleeping for real poll intervals.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from specwatch.config import from_mapping
from specwatch.serve import service as service_mod
from specwatch.serve.http_server import CappedHTTPServer, handler_for
from specwatch.sim import Simulator, load_scenario
from support.builders import scenario_raw_config

from .hostile import HostileServer, respond

POLL = 5.0
TARGET = "vllm"


def parse_metrics(text: str) -> dict[tuple[str, tuple], float]:
    """Our /metrics output through prometheus_client's parser (the oracle): {(sample, labels): value}."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, f"duplicate series in /metrics: {key}"
            out[key] = s.value
    return out


def value(metrics: dict, name: str, **labels) -> float | None:
    want = set(labels.items())
    hits = [v for (n, lab), v in metrics.items() if n == name and want <= set(lab)]
    assert len(hits) <= 1, f"{name}{labels} is ambiguous"
    return hits[0] if hits else None


def names(metrics: dict) -> set[str]:
    return {n for n, _ in metrics}


class Sidecar:
    def __init__(
        self,
        url: str,
        *,
        scenario: str = "steady",
        timeout: str = "1s",
        max_bytes: str = "4MiB",
        seed: int = 0,
        min_drafts: int = 500,
        **overrides: Any,
    ):
        self.scenario = load_scenario(scenario)
        raw = scenario_raw_config(self.scenario, url=url, poll_interval=POLL, min_drafts=min_drafts)
        raw["targets"][0].update(timeout=timeout, max_bytes=max_bytes)
        raw.update(overrides)
        self.config = from_mapping(raw, environ={})
        self.sim = Simulator(self.scenario, seed=seed)
        self.sim_t = 0.0
        self.service = service_mod.Service(self.config, clock=lambda: self.sim.epoch + self.sim_t)
        self.httpd = CappedHTTPServer(("127.0.0.1", 0), handler_for(self.service))
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.http = requests.Session()
        self.http.trust_env = False

    # -- traffic ----------------------------------------------------------------------------
    def render(self) -> str:
        return self.sim.render()

    def good(self):
        """The behaviour of a healthy vLLM: the simulator's exposition at the current sim time."""
        return respond(200, lambda: self.render().encode())

    def mutated(self, change):
        """A healthy vLLM whose payload text goes through `change(text) -> text`."""
        return respond(200, lambda: change(self.render()).encode())

    def poll(self, n: int = 1) -> float:
        """Advance 5 s of sim and wall-clock time and poll; returns the real seconds the last poll took."""
        took = 0.0
        for _ in range(n):
            self.sim_t += POLL
            self.sim.advance_to(self.sim_t)
            start = time.monotonic()
            self.service.poll_once()
            took = time.monotonic() - start
        return took

    # -- reading --------------------------------------------------------------------------
    def scrape(self) -> dict:
        response = self.http.get(self.base + "/metrics", timeout=10)
        assert response.status_code == 200, response.status_code
        return parse_metrics(response.text)

    def errors(self) -> dict[str, float]:
        m = self.scrape()
        return {
            dict(lab)["reason"]: v
            for (n, lab), v in m.items()
            if n == "specwatch_scrape_errors_total" and dict(lab)["target"] == TARGET
        }

    def up(self) -> float | None:
        return value(self.scrape(), "specwatch_target_up", target=TARGET)

    def verdicts(self) -> dict[tuple[str, str], str | None]:
        return {
            (name, label): vs.current
            for name, route in self.service.poller.pipeline._routes.items()
            for label, vs in route.verdicts.items()
        }

    def window_state(self):
        """Everything the windows hold, to compare byte for byte across a failed poll."""
        out = {}
        for name, route in sorted(self.service.poller.pipeline._routes.items()):
            w = route.window
            out[name] = (
                len(w.entries),
                w.entries[-1].t if w.entries else None,
                tuple(sorted(w.totals.items())),
                tuple(sorted(w._raw.items())),
                w.resets,
            )
        return out

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        for scraper in self.service.poller.scrapers.values():
            scraper.close()
        self.http.close()


def new_pair(**kwargs) -> tuple[HostileServer, Sidecar]:
    server = HostileServer()
    car = Sidecar(server.url, **kwargs)
    server.set(car.good())
    return server, car
