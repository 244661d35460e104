"""A spec-off canary settles the split a wrong prior guesses (fleet mode, backtest over a real
Prometheus backfilled from simulated replicas).

Three replicas run Llama-3.1-8B with EAGLE-3 K=3 on a simulated H100 whose fixed costs of
speculation (verify overhead, per request, per drafting pass) are 2x, or 0.5x, what the exporter's
prior (the same presets) assumes; a fourth replica of the same model runs without speculation (the
canary). Load changes every 3 minutes over 39 minutes. specwatch backtests them with learning on:
with the canary in its selector, and without it. After 30 simulated minutes the break-even of every
spec-on replica's 1m window is compared with the simulator's truth at the batch and K it measured:
within 0.03 with the canary, off by more without it (learning from spec-on steps alone scales the
prior's split uniformly, which cancels out of the break-even). A second set of replicas of the 2x
server, without a canary, ran their first 12 minutes (four loads) without speculation: backtested
from a minute after the switch with those minutes before it (--baseline-from), that history is
their baseline. The figures are in docs/costmodel.md and docs/fleet.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specwatch import config as config_mod
from specwatch import sim
from specwatch.fleet.backtest import Backtest
from specwatch.sim.record import record
from specwatch.sim.scenario import parse_scenario

from .promharness import PROMETHEUS, PROMTOOL, serve_backfilled

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="prometheus/promtool not installed"),
]

POLL = 5.0
PHASE = 180.0
LOADS = (2, 16, 4, 32, 8, 24, 12, 4, 16, 8, 2, 24, 12)
LEARNED_AFTER = 30 * 60.0  # sim time
TOLERANCE = 0.03
CANARY = "canary:8000"
SPEC_ON = ("on-0:8000", "on-1:8000", "on-2:8000")
HISTORY = ("hist-0:8000", "hist-1:8000", "hist-2:8000")
SPEC_ON_AT = 4 * PHASE  # the history replicas switch after loads 2, 16, 4 and 32


def scenario(scale: float, events: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": f"fleet-x{scale:g}",
        "description": "A fleet whose fixed costs of speculation are a multiple of the prior's.",
        "hardware": "h100-sxm",
        "model": "llama-3.1-8b",
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "prompt_tokens": 64,
        "output_tokens": 1024,
        "noise": 0.03,
        "spec_cost_scale": scale,
        "routes": [{"model_name": "llama-8b"}],
        "phases": [
            {"name": f"c{c}-{i}", "duration": f"{PHASE:.0f}s", "concurrency": c, "acceptance_rate": 0.5}
            for i, c in enumerate(LOADS)
        ],
        "events": events,
    }


def backfill(work: Path, scale: float, history: bool) -> tuple[Any, float, float]:
    """A Prometheus over the TSDB of the spec-on replicas and the canary (job vllm), and the
    history replicas (job vllm-history) when asked."""
    spec_on = parse_scenario(scenario(scale, []))
    replicas = [(spec_on, name, "vllm", 10 + i) for i, name in enumerate(SPEC_ON)]
    replicas.append((parse_scenario(scenario(scale, [{"at": 0, "type": "spec_off"}])), CANARY, "vllm", 20))
    if history:
        switched = parse_scenario(
            scenario(scale, [{"at": 0, "type": "spec_off"}, {"at": SPEC_ON_AT, "type": "spec_on"}])
        )
        replicas += [(switched, name, "vllm-history", 30 + i) for i, name in enumerate(HISTORY)]
    recordings = []
    for sc, instance, job, seed in replicas:
        path = work / f"{instance.split(':')[0]}.jsonl"
        record(sc, path, poll_interval=POLL, seed=seed)
        recordings.append((path, {"instance": instance, "job": job}, "vllm:"))
    prometheus = serve_backfilled(work, recordings)
    times = [json.loads(line)["t"] for line in recordings[0][0].read_text().splitlines()]
    return prometheus, times[0], times[-1]


def backtest(
    url: str, selector: str, origin: float, end: float, scale: float, *, after: float = 0.0, baseline: bool = False
) -> dict[str, Any]:
    """Backtest with learning on from ``origin + after`` (the simulation's start + after; with
    ``baseline``, learning from ``origin`` on: --baseline-from): the worst break-even error of the
    spec-on replicas' 1m windows after LEARNED_AFTER (windows inside one phase), and what the
    route's verdicts rested on."""
    config = config_mod.from_mapping(
        {
            "windows": ["1m", "5m"],
            "poll_interval": f"{POLL:g}s",
            "hardware": {"preset": "h100-sxm"},
            "model": {"preset": "llama-3.1-8b"},
            "learning": {"enabled": True},
            "decision": {"min_drafts": 200, "hold": 1},
            "prometheus": {"url": url, "selector": selector, "replica_labels": ["instance"], "scrape_interval": "5s"},
        },
        environ={},
    )
    truth = sim.Simulator(parse_scenario(scenario(scale, [])), seed=0).timer
    run = Backtest(config)
    worst, evaluations = 0.0, 0
    try:
        for line in run.run(origin + after, end, POLL, origin if baseline else None):
            replica = line.get("replica")
            if not replica or line["window"] != "1m" or replica["instance"] == CANARY:
                continue
            t = line["t"] - origin
            breakeven, batch, k = line["breakeven_acceptance_rate"], line["batch_size"], line["draft_length"]
            if t < LEARNED_AFTER or t % PHASE < 75.0 or breakeven is None or batch is None or not k:
                continue  # before the deadline, or a window still holding the previous load
            worst = max(worst, abs(breakeven - truth.breakeven(batch, round(k))))
            evaluations += 1
    finally:
        run.client.close()
    (route,) = run.evaluator.state().cost_models
    return {"worst": worst, "evaluations": evaluations, "source": route.source, "baseline": route.baseline}


@pytest.fixture(scope="module", params=[2.0, 0.5], ids=["prior-x0.5", "prior-x2"])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """scale = truth / prior: 2.0 is a prior at half the true fixed costs, 0.5 one at twice them."""
    scale = request.param
    prometheus, start, end = backfill(tmp_path_factory.mktemp(f"canary-x{scale:g}"), scale, history=scale == 2.0)
    try:
        url = prometheus.url
        results = {
            "scale": scale,
            "canary": backtest(url, '{job="vllm"}', start, end, scale),
            "none": backtest(url, f'{{job="vllm",instance!="{CANARY}"}}', start, end, scale),
        }
        if scale == 2.0:
            # Backtests from a window after the switch (no spec-off window left in them): with the
            # minutes before it (--baseline-from), and without.
            history, after = '{job="vllm-history"}', SPEC_ON_AT + 60.0
            results["history"] = backtest(url, history, start, end, scale, after=after, baseline=True)
            results["unseen history"] = backtest(url, history, start, end, scale, after=after)
    finally:
        prometheus.stop()
    for name in ("canary", "none", "history", "unseen history"):
        if name in results:
            r = results[name]
            print(
                f"true fixed costs x{scale:g} the prior's, baseline {name}: worst break-even error {r['worst']:.4f} "
                f"over {r['evaluations']} evaluations (source {r['source']}, baseline {r['baseline']})"
            )
    return results


def test_with_a_spec_off_canary_the_breakeven_is_within_0_03_after_30_minutes_and_without_it_it_is_not(fleet):
    with_canary, without = fleet["canary"], fleet["none"]
    assert with_canary["evaluations"] >= 100 and without["evaluations"] == with_canary["evaluations"]
    assert with_canary["worst"] <= TOLERANCE
    assert without["worst"] > TOLERANCE  # the wrong prior really is wrong: the test can fail


def test_the_route_says_its_learned_curve_rests_on_the_canary_or_on_no_measured_baseline(fleet):
    assert (fleet["canary"]["source"], fleet["canary"]["baseline"]) == ("learned", "canary")
    assert (fleet["none"]["source"], fleet["none"]["baseline"]) == ("learned", "none")


def test_spec_off_minutes_before_the_switch_are_the_baseline_of_replicas_without_a_canary(fleet):
    if "history" not in fleet:
        pytest.skip("the history replicas run beside the 2x server only")
    history, unseen = fleet["history"], fleet["unseen history"]
    assert history["evaluations"] == unseen["evaluations"] >= 100
    assert (history["baseline"], unseen["baseline"]) == ("history", "none")
    assert history["worst"] <= TOLERANCE < unseen["worst"]
