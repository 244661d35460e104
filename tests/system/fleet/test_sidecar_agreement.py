"""Fleet mode agrees with sidecar mode on the same traffic.

Twelve simulated vLLMs (different scenarios, seeds and speeds; one restarts, one speaks the
pre-0.10.2 ITL name, two run two data-parallel engines, one serves two models) are scraped every
second by a real Prometheus. Every payload a simulator serves is kept, so the sidecar's own
evaluation path (the Pipeline that `specwatch run` and `specwatch replay` use) is fed exactly the
samples Prometheus stored, at Prometheus's scrape timestamps. One fleet-mode evaluator queries
Prometheus at the same evaluation times. Per replica, route and window: alpha, tau, K, batch and
ITL P50/P99 agree within 1 %, and the verdicts are the same outside the seconds after a restart.
One replica goes away before the end: from Prometheus's first failed scrape it is stale in fleet
mode and nothing is served for it.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from specwatch import config as config_mod
from specwatch.fleet.evaluator import FleetEvaluator, FleetSource
from specwatch.sidecar.pipeline import Pipeline
from support.agreement import WINDOW_VALUES, agree

from .promharness import PROMETHEUS, RecordedSim, serve_recorded, start_prometheus

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed")]

HERE = Path(__file__).resolve().parent
REPLICAS = [  # (scenario, seed, speed)
    ("steady", 1, 1.0),
    ("alpha-drop", 2, 4.0),
    ("batch-surge", 3, 4.0),
    ("mixed-routes", 4, 1.0),
    ("restart", 5, 4.0),
    ("slow-drift", 6, 2.0),
    (str(HERE / "scenarios" / "legacy-itl.yaml"), 7, 1.0),
    ("steady", 8, 2.0),
    ("alpha-drop", 9, 1.0),
    ("batch-surge", 10, 1.0),
    ("mixed-routes", 11, 2.0),
    ("slow-drift", 12, 4.0),
]
WINDOWS = ["10s", "30s"]
POLL = 5.0
RUN_SECONDS = 80.0
STOPPED = 7  # this replica goes away STOP_AFTER seconds into the run
STOP_AFTER = 60.0
FIRST_EVALUATION = 32.0


def _evaluation_offset(timestamps: dict[str, list[tuple[float, float]]]) -> float:
    """A sub-second offset for evaluation times as far as possible from every replica's scrape
    offset, so no sample sits on a window edge (where Prometheus versions differ)."""
    offsets = sorted({round(points[-1][0] % 1.0, 3) for points in timestamps.values()})
    gaps = [((offsets[(i + 1) % len(offsets)] - o) % 1.0 or 1.0, o) for i, o in enumerate(offsets)]
    width, start = max(gaps)
    return (start + width / 2) % 1.0


def _prometheus_times(sim: RecordedSim, stored: list[float]) -> list[tuple[float, str]]:
    """Each kept payload at the timestamp Prometheus gave the scrape that fetched it."""
    out = []
    with sim.lock:
        payloads = list(sim.payloads)
    for served_at, text in payloads:
        candidates = [t for t in stored if 0 <= served_at - t < 0.5]
        if candidates:
            out.append((max(candidates), text))
    return out


def _reset_times(payloads: list[tuple[float, str]]) -> list[float]:
    times, previous = [], None
    for t, text in payloads:
        for line in text.splitlines():
            if line.startswith("vllm:spec_decode_num_drafts_total{"):
                value = float(line.rsplit(" ", 1)[1])
                if previous is not None and value < previous:
                    times.append(t)
                previous = value
                break
    return times


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory):
    sims = [serve_recorded(scenario, seed, speed, f"r{i}") for i, (scenario, seed, speed) in enumerate(REPLICAS)]
    prometheus = start_prometheus(tmp_path_factory.mktemp("prom"), scrape_targets=[s.instance for s in sims])
    t0 = time.time()
    try:
        time.sleep(STOP_AFTER)
        sims[STOPPED].go_away()
        stopped_at = time.time()
        time.sleep(RUN_SECONDS - STOP_AFTER)
        yield sims, prometheus, t0, stopped_at
    finally:
        prometheus.stop()
        for sim in sims:
            sim.handle.stop()


def test_fleet_mode_matches_the_sidecar_per_replica_route_and_window(fleet_run) -> None:
    sims, prometheus, t0, stopped_at = fleet_run
    end = time.time() - 2.0
    stored = prometheus.raw_samples('up{job="vllm"}', end, int(end - t0) + 5)
    assert len(stored) == len(sims), "every simulator is a scraped replica"
    offset = _evaluation_offset(stored)
    times = []
    t = math.floor(t0 + FIRST_EVALUATION) + offset
    while t < end:
        times.append(t)
        t += POLL
    # Both on the configured prior (the sidecar learns a step-time curve per pod, fleet mode one per
    # route from all its replicas, so learned verdicts may part at a threshold), with hardware and
    # model stated: on assumed ones every verdict is undecided and the comparison would cover none.
    stated = {"hardware": {"preset": "h100-sxm"}, "model": {"preset": "llama-3.1-8b"}}
    fleet_config = config_mod.from_mapping(
        {
            "windows": WINDOWS,
            "poll_interval": f"{POLL:g}s",
            "learning": {"enabled": False},
            "prometheus": {"url": prometheus.url, "selector": '{job="vllm"}', "replica_labels": ["instance"]},
            **stated,
        },
        environ={},
    )
    fleet = FleetSource(FleetEvaluator(fleet_config))
    config = config_mod.from_mapping(
        {"windows": WINDOWS, "poll_interval": f"{POLL:g}s", "learning": {"enabled": False}, **stated}, environ={}
    )

    # The sidecar path, fed each replica's scrapes at Prometheus's timestamps.
    sidecar: dict[tuple[str, str, str, float], object] = {}
    resets: dict[str, list[float]] = {}
    for sim in sims:
        scraped = [t for t, up in stored[sim.instance] if up == 1.0]
        payloads = _prometheus_times(sim, scraped)
        assert len(payloads) >= 0.9 * len(scraped), "nearly every successful scrape maps to a kept payload"
        resets[sim.instance] = _reset_times(payloads)
        pipeline = Pipeline(config)
        pending = iter(payloads)
        nxt = next(pending, None)
        for now in times:
            while nxt is not None and nxt[0] <= now:
                pipeline.ingest("vllm", nxt[0], nxt[1])
                nxt = next(pending, None)
            for evaluation in pipeline.evaluate(now):
                sidecar[(sim.instance, evaluation.stats.route, evaluation.stats.window, now)] = evaluation

    fleet_out: dict[tuple[str, str, str, float], object] = {}
    for now in times:
        results = fleet.poll(now)
        assert results is not None, "every poll of a healthy Prometheus succeeds"
        for replica, evaluation in results:
            fleet_out[(dict(replica)["instance"], evaluation.stats.route, evaluation.stats.window, now)] = evaluation
    assert fleet.evaluator.state().queries_per_poll == len(WINDOWS) + 1
    assert fleet.client.queries == len(times) * (len(WINDOWS) + 1), "queries per poll do not depend on replicas"

    # The stopped replica: Prometheus marks its series stale at the first failed scrape, so from
    # then on fleet mode serves nothing for it (the sidecar would show the target down).
    gone = sims[STOPPED].instance
    after_stop = {key for key in sidecar if key[0] == gone and key[3] > stopped_at - 0.5}
    assert not {key for key in fleet_out if key[0] == gone and key[3] > stopped_at + 2.5}
    assert any(key[3] > stopped_at + 2.5 for key in after_stop)
    assert fleet.evaluator.state().stale_replicas == 1
    for key in after_stop:
        sidecar.pop(key)
        fleet_out.pop(key, None)
    assert set(fleet_out) == set(sidecar), "the same replicas, routes and windows are evaluated"
    assert {key[0] for key in sidecar} == {s.instance for s in sims}

    mismatches = []
    compared = verdicts = with_values = 0
    for key, side in sorted(sidecar.items()):
        instance, route, window, now = key
        width = config.windows[config.window_labels.index(window)]
        near_reset = any(now - width - POLL * (config.decision.hold + 1) <= r <= now for r in resets[instance])
        if near_reset:
            continue
        mine = fleet_out[key]
        for name in WINDOW_VALUES:
            a, b = side.value(name), mine.value(name)  # type: ignore[attr-defined]
            compared += 1
            with_values += a is not None
            if not agree(a, b):
                mismatches.append((key, name, a, b))
        verdicts += 1
        if side.verdict != mine.verdict:  # type: ignore[attr-defined]
            mismatches.append((key, "verdict", side.verdict, mine.verdict))  # type: ignore[attr-defined]
        if not agree(side.stats.drafts, mine.stats.drafts):  # type: ignore[attr-defined]
            mismatches.append((key, "drafts", side.stats.drafts, mine.stats.drafts))  # type: ignore[attr-defined]
    assert compared > 500 and verdicts > 100 and with_values > 0.6 * compared
    assert {e.stats.schema for e in fleet_out.values()} == {"v1", "v1-legacy-itl"}  # type: ignore[attr-defined]
    assert {e.verdict for e in fleet_out.values()} >= {"keep", "undecided"}  # type: ignore[attr-defined]
    assert not mismatches, f"{len(mismatches)} disagreements, first: {mismatches[:5]}"
    # The restart replica is there and was seen restarting.
    assert any(resets.values())

    # Fleet rows: token-weighted alpha of the last poll over the (fresh) replicas whose guard passed.
    last = times[-1]
    rows = {(row.route, row.window): row for row in fleet.evaluator.state().fleet}
    for (route, window), row in rows.items():
        members = [e for (i, r, w, t), e in fleet_out.items() if r == route and w == window and t == last]
        assert row.replicas == len(members)
        accepted = sum(e.stats.accepted_tokens for e in members if e.guard_passed and e.stats.draft_tokens)
        proposed = sum(e.stats.draft_tokens for e in members if e.guard_passed and e.stats.draft_tokens)
        assert agree(row.acceptance_rate, accepted / proposed if proposed else None)
        assert sum(row.verdicts.values()) == len(members)
