"""Hypothesis: the sidecar's mirrored counters (and its own target counters) never decrease, and are
never inflated past what vLLM really counted, whatever mix of data-parallel scale-down/up, counter
dips, vLLM restarts and config reloads that rebuild the pipeline (Service.apply) happens. Read from
the real /metrics the service renders (docs/architecture.md §3, §4)."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from specwatch.config import from_mapping
from specwatch.serve.service import Service
from support.metric_names import MIRRORED
from support.vllm_payloads import FakeVllm

TARGET_COUNTERS = {"specwatch_target_restarts_total", "specwatch_target_dips_total", "specwatch_scrape_errors_total"}
BASE = {
    "poll_interval": "5s",
    "decision": {"min_drafts": 20},
    "model": {"preset": "llama-3.1-8b"},
    "targets": [{"name": "vllm", "url": "http://127.0.0.1:1/metrics"}],
}
WINDOWS = (["15s", "5m"], ["1m", "5m"], ["30s", "5m"])
SAMPLE = re.compile(r"^(?P<name>vllm:[^{\s]+)(?P<labels>\{[^}]*\})? (?P<value>\S+)$")
ENGINES = 4

events = st.lists(
    st.sampled_from(["traffic", "traffic", "traffic", "scale_down", "scale_up", "dip", "restart", "reload", "fail"]),
    min_size=4,
    max_size=30,
)


class World:
    """A vLLM with 4 DP engines (2 of them may be scaled away) and what it really counted since the
    sidecar's first poll."""

    def __init__(self, created: bool):
        self.fake = FakeVllm(engines=ENGINES)
        self.created = created
        self.active = ENGINES
        self.counted = {"drafts": 0.0, "gen": 0.0, "itl": 0.0}
        for _ in range(20):  # a server that ran long before the sidecar: large lifetime values
            self.step(count=False)

    def step(self, count: bool = True) -> None:
        for e in range(self.active):
            self.fake.step(e, batch=6, accepted_per_request=[4, 3, 3, 2, 1, 0], itl_seconds=0.02)
        if count:
            self.counted["drafts"] += 6 * self.active
            self.counted["gen"] += (13 + 6) * self.active
            self.counted["itl"] += 6 * self.active

    def reset_engines(self, engines: range) -> None:
        """Scaled back up: those engines are new processes, their counters start at 0."""
        f = self.fake
        for e in engines:
            lv = f._lv(e)
            for metric in (f.drafts, f.draft_tokens, f.accepted, f.gen, f.itl, f.steps):
                metric.remove(*lv)
            for i in range(f.k):
                f.per_pos.remove(*lv, str(i))
                f.per_pos.labels(*lv, str(i))

    def text(self, dip: bool = False) -> str:
        lines = []
        for line in self.fake.text().split("\n"):
            if any(f'engine="{e}"' in line for e in range(self.active, ENGINES)):
                continue  # scaled down: those engines are gone from /metrics
            if not self.created and re.match(r"^(# \w+ )?\S+_created\b", line):
                continue
            m = SAMPLE.match(line)
            if dip and m and not m["name"].endswith("_created") and "num_requests" not in m["name"]:
                value = float(m["value"])
                value = value - 1e-6 if m["name"].endswith("_sum") else value - 1.0 if value >= 1.0 else value
                line = f"{m['name']}{m['labels'] or ''} {max(value, 0.0)!r}"
            lines.append(line)
        return "\n".join(lines)


def exported(service: Service) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    service.published = service._publish(ready=True)
    out = {}
    for family in text_string_to_metric_families(service.published.metrics.decode()):
        for s in family.samples:
            if s.name in MIRRORED or s.name in TARGET_COUNTERS:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events, st.booleans())
def test_mirrored_counters_never_decrease_nor_exceed_what_vllm_counted(script, created):
    world = World(created)
    windows = 0
    service = Service(from_mapping({**BASE, "windows": WINDOWS[0]}, environ={}))
    highest: dict = {}
    t = 1000.0
    try:
        for event in ["traffic", *script]:
            dip = False
            if event == "traffic":
                world.step()
            elif event == "scale_down":
                world.active = 2
                world.step()
            elif event == "scale_up":
                if world.active < ENGINES:
                    world.reset_engines(range(world.active, ENGINES))
                world.active = ENGINES
                world.step()
            elif event == "dip":
                dip = True  # an idle interval whose counters read one lower (ITL _sum 1e-6 s)
            elif event == "restart":
                world.fake.restart()
                world.step()
            elif event == "reload":
                windows = (windows + 1) % len(WINDOWS)
                service.apply(from_mapping({**BASE, "windows": WINDOWS[windows]}, environ={}))
            t += 5.0
            if event == "fail":
                service.poller.pipeline.ingest_error("vllm", t, "timeout")
            elif event != "reload":
                assert service.poller.pipeline.ingest("vllm", t, world.text(dip)).ok
            service.poller.pipeline.evaluate(t)
            now = exported(service)
            for key, value in now.items():
                assert value >= highest.get(key, 0.0), (event, key, value, highest.get(key))
                highest[key] = value
            # Never inflated: at most what vLLM counted since the sidecar's first poll.
            for name, kind in (
                ("specwatch_drafts_total", "drafts"),
                ("specwatch_generation_tokens_total", "gen"),
                ("specwatch_itl_seconds_count", "itl"),
            ):
                for (sample, _), value in now.items():
                    if sample == name:
                        assert value <= world.counted[kind] + 1e-6, (event, name, value, world.counted[kind])
    finally:
        service.stop()
