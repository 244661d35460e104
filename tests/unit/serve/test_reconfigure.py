"""A reload that keeps the windows re-derives everything the evaluators took from the config:
the stated schedule behind the config check, the cost model and the learners' prior."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specwatch import sim
from specwatch.config import from_mapping
from specwatch.export.collector import registry_for
from specwatch.serve.service import Service
from specwatch.sim.polling import simulated_polls
from specwatch.sim.scenario import parse_scenario
from support.builders import chat_scenario, scenario_raw_config

SCENARIO = chat_scenario(
    "k2-server", 2, [{"name": "steady", "duration": "10m", "concurrency": 8, "k": 2, "alpha": 0.7}]
)


def _config(k: int, **extra):
    sc = parse_scenario(SCENARIO)
    raw = scenario_raw_config(sc, windows=("1m",))
    raw["draft"]["config"] = {"method": "eagle3", "model": "/models/eagle3", "num_speculative_tokens": k}
    raw.update(extra)
    return sc, from_mapping(raw, environ={})


def _exported(service: Service, name: str) -> float | None:
    text = generate_latest(registry_for(service.poller.pipeline.view)).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("window") == "1m":
                return sample.value
    return None


def test_a_reload_of_draft_config_alone_rechecks_the_server_against_the_new_k():
    """The server drafts K=2; the config said 4 (a mismatch), then is reloaded to say 2. Windows
    and verdicts are kept (same targets and windows), and the check now uses K=2."""
    sc, stated_k4 = _config(4)
    _, stated_k2 = _config(2)
    service = Service(stated_k4)
    polls = simulated_polls(sim.Simulator(sc, seed=3), service.poller.pipeline, interval=5.0)
    for _ in islice(polls, 20):
        pass
    assert _exported(service, "specwatch_speculative_config_mismatch") == 1.0
    assert _exported(service, "specwatch_configured_draft_length_tokens") == 4
    kept = service.poller.pipeline
    service.apply(stated_k2)
    assert service.poller.pipeline is kept  # not rebuilt: only the stated config changed, so the polls go on feeding it
    next(polls)
    assert _exported(service, "specwatch_configured_draft_length_tokens") == 2
    assert _exported(service, "specwatch_speculative_config_mismatch") == 0.0


def test_a_reload_that_changes_the_cost_inputs_gives_the_learners_the_new_prior():
    sc, config = _config(2, learning={"enabled": True, "min_points": 2})
    service = Service(config)
    for _ in simulated_polls(sim.Simulator(sc, seed=4), service.poller.pipeline, interval=5.0, count=40):
        pass
    learners = service.poller.pipeline.learners()
    assert learners, "the route learns"
    service.apply(replace(config, hardware=replace(config.hardware, preset="l40s")))
    (learner, _model), *_ = service.poller.pipeline.learners().values()
    assert learner.prior.hardware == service.poller.pipeline.cost_model.hardware
    assert learner.prior.hardware.name != "h100-sxm"
