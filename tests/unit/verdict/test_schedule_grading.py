"""A change is a change: K moving along a stated plan is no change to grade. With the batch
schedule specwatch's own `shorten` writes stated in `draft.config`, or an engine that picks K per
step (vLLM's adaptive verification, SGLang's speculative_adaptive), K following the batch is the
same configuration; only a K the plan cannot give, or another method, is graded (AdviceGrader,
the sidecar's grader; fleet mode's RolloutGrader: tests/unit/fleet/test_schedule_rollouts.py)."""

from __future__ import annotations

from specwatch import sim
from specwatch.config import from_mapping
from specwatch.config.cost_model import cost_model_from_config
from specwatch.engines.vllm_schedule import speculative_config
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.polling import simulated_polls
from specwatch.sim.scenario import parse_scenario
from specwatch.verdict.grading import AdviceGrader, KPlan, Regime, k_plan, on_plan
from support.builders import chat_scenario, scenario_raw_config, window_stats

#: What `shorten` recommends for a drafter sure of two tokens: K=4 up to batch 16, K=2 above.
SCHEDULE = speculative_config("eagle3", 4, [[1, 16, 4], [17, 1024, 2]])
PLAN = k_plan(SCHEDULE)
COST_MODEL = cost_model_from_config(from_mapping({"hardware": {"preset": "h100-sxm"}}, environ={}))


def _window(t: float, k: int, batch: float, itl: float):
    return window_stats(
        0.6, k, batch, t=t, itl_per_token_mean_seconds=itl, generation_tokens=50_000.0, span_seconds=60.0
    )


def _grade(steps: list[tuple[int, float, float]], plan: KPlan | None, polls_each: int = 40) -> AdviceGrader:
    """Each step (K, batch, ITL per token) for polls_each 5 s polls of a 60 s window."""
    grader = AdviceGrader()
    t = 1000.0
    for k, batch, itl in steps:
        for _ in range(polls_each):
            t += 5.0
            grader.observe(t, [_window(t, k, batch, itl)], "eagle3", 100.0, COST_MODEL, plan)
    return grader


def test_k_following_the_stated_schedule_as_the_batch_grows_is_not_graded():
    # Batch 8 drafts K=4, batch 64 drafts K=2, back and forth: the schedule at work, no rollout.
    steps = [(4, 8.0, 0.010), (2, 64.0, 0.031), (4, 8.0, 0.010), (2, 64.0, 0.031)]
    assert _grade(steps, PLAN).grading is None


def test_without_the_stated_schedule_the_same_k_moves_are_graded():
    steps = [(4, 8.0, 0.010), (2, 64.0, 0.031)]
    assert _grade(steps, None).grading is not None


def test_a_k_the_schedule_cannot_give_at_the_batch_is_graded_as_the_change_it_is():
    # After following the schedule, K=4 at batch 64 (the schedule says 2): the config changed.
    grader = _grade([(4, 8.0, 0.010), (2, 64.0, 0.031), (4, 64.0, 0.028)], PLAN)
    grading = grader.grading
    assert grading is not None and grading.status == "graded"
    assert grading.before.draft_length == 2 and grading.new_draft_length == 4


def test_a_server_that_ignores_its_stated_schedule_is_one_fixed_k_regime_not_a_rollout():
    # K=4 at every batch: the config check reports the schedule not applied; nothing was rolled out.
    assert _grade([(4, 8.0, 0.010), (4, 64.0, 0.035), (4, 8.0, 0.010)], PLAN).grading is None


def test_an_engine_choosing_k_per_step_is_no_change_whatever_k_it_picks():
    for config in (
        {"method": "eagle3", "num_speculative_tokens": 5, "enable_adaptive_verification": True},
        {"num_speculative_tokens": 5, "speculative_adaptive": True},  # SGLang's controller
    ):
        plan = k_plan(config)
        assert plan is not None
        assert _grade([(5, 8.0, 0.010), (2, 64.0, 0.031), (3, 32.0, 0.02)], plan).grading is None


def test_a_fixed_stated_k_is_no_plan_and_the_plan_gives_its_k_around_the_batch():
    assert k_plan({"method": "eagle3", "num_speculative_tokens": 4}) is None
    assert k_plan(None) is None
    assert PLAN is not None
    assert on_plan(PLAN, 4.0, 8.0) and on_plan(PLAN, 2.0, 64.0)
    assert not on_plan(PLAN, 4.0, 64.0) and not on_plan(PLAN, 2.0, 4.0)
    assert on_plan(PLAN, 3.0, 16.0), "a window across the band edge drafts between the two"


def test_a_regime_rules_out_the_reading_each_window_contradicts():
    regime = Regime.first(4.0, "eagle3", 8.0, PLAN)
    assert regime.fixed and regime.follows
    regime.take(2.0, 64.0)
    assert regime.follows and not regime.fixed
    assert not regime.admits(4.0, "eagle3", 64.0)
    assert not regime.admits(4.0, "mtp", 8.0), "another configured method is a change"


def _sidecar_run(stated: bool):
    """Sidecar + simulator in virtual time: quiet (8 requests, K=4), then busy (64 requests, K=2,
    as the stated schedule gives): the issue's attack, where the busy phase was graded 0.31x."""
    phases = [
        {"name": "quiet", "duration": "240s", "concurrency": 8, "k": 4, "acceptance": [0.9, 0.7, 0.25, 0.15]},
        {"name": "busy", "duration": "300s", "concurrency": 64, "k": 2, "acceptance": [0.9, 0.7]},
    ]
    sc = parse_scenario(chat_scenario("schedule-follows-batch", 4, phases))
    raw = scenario_raw_config(sc, windows=("1m", "4m"))
    if stated:
        raw["draft"] = {**raw["draft"], "config": dict(SCHEDULE)}
    pipeline = Pipeline(from_mapping(raw, environ={}))
    for _ in simulated_polls(sim.Simulator(sc, seed=3), pipeline, interval=5.0, count=108):
        pass
    return pipeline.state().routes[0].grading


def test_the_sidecar_does_not_grade_k_following_the_stated_schedule_as_a_rollout():
    assert _sidecar_run(stated=True) is None


def test_the_sidecar_grades_the_same_k_move_when_no_schedule_is_stated():
    assert _sidecar_run(stated=False) is not None
