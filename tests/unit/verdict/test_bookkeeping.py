"""What a reload rebuilds (verdict/bookkeeping.py): the same rules for the sidecar's Pipeline and
fleet mode's FleetEvaluator, each fed real input (simulated vLLM payloads; answers in the query
API's shape) until its route learns, then reconfigured."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from specwatch import sim
from specwatch.config import Config, HardwareConfig, from_mapping
from specwatch.config.cost_model import cost_model_from_config
from specwatch.costmodel import learned
from specwatch.costmodel.observation import observation_from_deltas
from specwatch.fleet import queries as promql
from specwatch.fleet.client import Sample
from specwatch.fleet.evaluator import FleetEvaluator
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.polling import simulated_polls
from specwatch.sim.scenario import parse_scenario
from specwatch.verdict.bookkeeping import EvaluationContext, RouteLearning
from support.builders import chat_scenario, scenario_raw_config

K = 3
LEARNING = {"enabled": True, "min_points": 2}
STATED = {"method": "eagle3", "model": "/models/eagle3", "num_speculative_tokens": K}
SCENARIO = chat_scenario(
    "k3-server", K, [{"name": "steady", "duration": "10m", "concurrency": 8, "k": K, "alpha": 0.7}]
)


def _sidecar_config() -> Config:
    raw = scenario_raw_config(parse_scenario(SCENARIO), windows=("1m",))
    raw["draft"]["config"] = STATED
    return from_mapping({**raw, "learning": LEARNING}, environ={})


def _feed_sidecar(pipeline: Any) -> None:
    for _ in simulated_polls(sim.Simulator(parse_scenario(SCENARIO), seed=4), pipeline, interval=5.0, count=30):
        pass


def _sidecar_learners(pipeline: Any) -> dict[str, learned.StepTimeLearner]:
    return {name: learner for name, (learner, _model) in pipeline.learners().items()}


def _fleet_config() -> Config:
    return from_mapping(
        {
            "windows": ["1m"],
            "draft": {"method": "eagle3", "k": K, "config": STATED},
            "hardware": {"preset": "h100-sxm"},
            "model": {"preset": "llama-3.1-8b", "context_tokens": 1024},
            "learning": LEARNING,
            "prometheus": {"url": "http://prometheus:9090", "replica_labels": ["pod"], "scrape_interval": "15s"},
        },
        environ={},
    )


def _fleet_answer(pod: str, batch: float) -> list[Sample]:
    """One spec-on replica's 1m window at `batch`, its steps as the prior times them."""
    model = cost_model_from_config(_fleet_config()).with_method("eagle3")
    steps, alpha = 2000.0, 0.6
    observations = steps * batch
    labels = {"pod": pod, "engine": "0", "model_name": "llama"}

    def sample(family: str, value: float, **extra: str) -> Sample:
        return Sample({**labels, promql.FAMILY_LABEL: family, **extra}, value)

    return [
        sample(promql.STEPS, steps),
        sample(promql.RUNNING_MEAN, batch),
        sample(promql.SAMPLES, 5.0),
        sample(promql.ITL_SUM, observations * model.spec_step_time(batch, K)),
        sample(promql.ITL_COUNT, observations),
        sample(promql.ITL_BUCKET, observations, le="+Inf"),
        sample(promql.GENERATION, observations * (1 + K * alpha)),
        sample(promql.DRAFTS, observations),
        sample(promql.DRAFT_TOKENS, K * observations),
        sample(promql.ACCEPTED, observations * K * alpha),
        *(sample(promql.ACCEPTED_PER_POS, observations * alpha, position=str(i)) for i in range(K)),
    ]


def _feed_fleet(evaluator: Any) -> None:
    for n in range(8):
        now = 1_800_000_000.0 + 60.0 * n
        answer = [*_fleet_answer("vllm-0", (4.0, 8.0, 16.0)[n % 3]), *_fleet_answer("vllm-1", 8.0)]
        evaluator.evaluate(now, {"1m": answer}, [Sample({"pod": pod}, now - 5) for pod in ("vllm-0", "vllm-1")])


def _fleet_learners(evaluator: Any) -> dict[str, learned.StepTimeLearner]:
    return {name: r.learner for name, r in evaluator.learning._routes.items() if r.learner is not None}


@dataclass(frozen=True)
class Mode:
    name: str
    build: Callable[[Config], EvaluationContext]
    config: Callable[[], Config]
    feed: Callable[[Any], None]
    learners: Callable[[Any], dict[str, learned.StepTimeLearner]]


MODES = [
    Mode("sidecar", Pipeline, _sidecar_config, _feed_sidecar, _sidecar_learners),
    Mode("fleet", FleetEvaluator, _fleet_config, _feed_fleet, _fleet_learners),
]


@pytest.fixture(params=MODES, ids=[m.name for m in MODES])
def learnt(request: pytest.FixtureRequest) -> tuple[Mode, Any, dict[str, learned.StepTimeLearner]]:
    """An evaluator of either mode whose route has learned from a few points."""
    mode: Mode = request.param
    evaluator = mode.build(mode.config())
    mode.feed(evaluator)
    learners = mode.learners(evaluator)
    assert learners and all(learner.points >= 2 for learner in learners.values()), "the route learns"
    return mode, evaluator, learners


def test_a_reload_of_draft_config_alone_rebuilds_the_schedule_but_not_the_cost_model(learnt):
    mode, evaluator, before = learnt
    model, schedule = evaluator.cost_model, evaluator.schedule
    config = evaluator.config
    rebuilt = evaluator.reconfigure(
        replace(config, draft=replace(config.draft, config={**STATED, "num_speculative_tokens": 2}))
    )
    assert rebuilt == []
    assert evaluator.cost_model is model
    assert schedule is not None and schedule.num_speculative_tokens == K
    assert evaluator.schedule is not None and evaluator.schedule.num_speculative_tokens == 2
    after = mode.learners(evaluator)
    assert {n: (x.points, x.prior) for n, x in after.items()} == {n: (x.points, x.prior) for n, x in before.items()}


def test_a_reload_of_the_cost_inputs_rebuilds_the_cost_model_and_refits_the_learners_under_its_prior(learnt):
    mode, evaluator, before = learnt
    model, config = evaluator.cost_model, evaluator.config
    rebuilt = evaluator.reconfigure(replace(config, hardware=replace(config.hardware, preset="l40s")))
    assert rebuilt == ["cost_model"]
    assert evaluator.cost_model is not model and evaluator.cost_model.hardware.name == "l40s"
    after = mode.learners(evaluator)
    assert after.keys() == before.keys()
    for name, learner in after.items():
        assert learner.prior.hardware.name == "l40s"
        assert learner.points == pytest.approx(before[name].points)  # the same points, refitted


def test_a_reload_that_changes_learning_starts_fresh_learners(learnt):
    mode, evaluator, before = learnt
    config = evaluator.config
    rebuilt = evaluator.reconfigure(replace(config, learning=replace(config.learning, min_points=3)))
    assert rebuilt == ["learners"]
    after = mode.learners(evaluator)
    # None left, or (the sidecar evaluates again at once) one new from the current window at most.
    assert all(learner.points <= 1 < before[name].points for name, learner in after.items())


def _auto_on_defaults(config: Config) -> Config:
    """`config` with learning auto and neither hardware nor model configured: learning is on."""
    return replace(
        config,
        learning=replace(config.learning, enabled=None),
        hardware=HardwareConfig(),
        model=replace(config.model, preset=None, hf_config=None, params=None),
    )


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_a_reload_that_turns_auto_learning_off_drops_the_learners_and_serves_the_configured_model(mode):
    evaluator = mode.build(_auto_on_defaults(mode.config()))
    assert evaluator.learning_enabled
    mode.feed(evaluator)
    assert mode.learners(evaluator), "the route learns on the defaults"
    config = evaluator.config
    rebuilt = evaluator.reconfigure(replace(config, hardware=replace(config.hardware, preset="l40s")))
    assert rebuilt == ["cost_model", "learners"]
    assert not evaluator.learning_enabled
    assert mode.learners(evaluator) == {}
    if mode.name == "sidecar":  # what status, the page and replay read
        assert evaluator.cost_model_info().source == "preset"
        assert all(
            route.cost_model is evaluator.route_model(route.engine, route.schema) for route in evaluator.state().routes
        )


def _point(t: float) -> learned.StepObservation:
    obs = observation_from_deltas(
        t, itl_sum=12.0, itl_count=16_000.0, steps=2_000.0, draft_tokens=6_000.0, drafts=2_000.0
    )
    assert obs is not None
    return obs


def test_a_learner_keeps_its_points_when_the_class_becomes_known_and_starts_afresh_when_it_changes():
    model = cost_model_from_config(_fleet_config())
    settings = _fleet_config().learning
    route = RouteLearning()
    assert route.follow("unknown", model, settings)  # the first learner
    assert route.learner is not None
    route.learner.add(_point(60.0))
    assert not route.follow("unknown", model, settings)  # still no evidence: kept
    assert not route.follow("eagle3", model, settings)  # the same drafter's points, its prior now
    assert route.learner.points == pytest.approx(1.0) and route.learner.prior.draft == model.with_method("eagle3").draft
    assert route.follow("ngram", model, settings)  # another drafter: a new fit
    assert route.learner.points == 0.0 and route.learner_method == "ngram"
