"""Fleet mode does not grade K following a stated schedule as a rollout: replicas of one
route at different batches draft the K the stated `draft.config` schedule gives at each (the
schedule specwatch's own `shorten` writes), so the route has one regime; a replica drafting a K the
schedule cannot give at its batch is still a rollout, graded. FleetEvaluator on answers in the
query API's shape (no Prometheus needed)."""

from __future__ import annotations

from specwatch.engines.vllm_schedule import speculative_config
from specwatch.fleet.client import Sample
from specwatch.fleet.evaluator import FleetEvaluator
from support.fleet_answers import START, fleet_config, replica_answer

#: What `shorten` recommends at batch 64 for a drafter sure of two tokens: K=4 up to batch 16, K=2 above.
SCHEDULE = speculative_config("eagle3", 4, [[1, 16, 4], [17, 1024, 2]])


def _run(config, replicas_at) -> FleetEvaluator:
    """20 polls a minute apart; replicas_at(n) -> [(pod, k, batch, alpha, itl)]."""
    evaluator = FleetEvaluator(config)
    for n in range(20):
        now = START + 60.0 * n
        replicas = replicas_at(n)
        one = [s for r in replicas for s in replica_answer(*r, windows=1.0)]
        five = [s for r in replicas for s in replica_answer(*r, windows=5.0)]
        fresh = [Sample({"pod": r[0]}, now - 5) for r in replicas]
        evaluator.evaluate(now, {"1m": one, "5m": five}, fresh)
    return evaluator


def _following(n: int) -> list[tuple[str, int, float, float, float]]:
    # A quiet replica at batch 8 drafts K=4, a busy one at batch 64 drafts K=2: both as stated.
    return [("quiet-0", 4, 8.0, 0.6, 0.010), ("busy-0", 2, 64.0, 0.7, 0.016)]


def test_replicas_drafting_the_stated_schedules_k_at_their_batches_are_no_rollout():
    evaluator = _run(fleet_config(SCHEDULE), _following)
    assert evaluator.state().gradings == {}, "K followed the stated schedule: nothing was rolled out"


def test_without_a_stated_schedule_the_same_replicas_read_as_two_regimes():
    # The control: what the schedule tells apart (without it, K 4 beside K 2 is a rollout in progress).
    evaluator = _run(fleet_config(None), _following)
    assert evaluator.state().gradings != {}


def test_a_replica_drafting_a_k_the_schedule_cannot_give_at_its_batch_is_still_a_rollout():
    def replicas(n: int) -> list[tuple[str, int, float, float, float]]:
        busy = ("busy-0", 2, 64.0, 0.7, 0.016) if n < 10 else ("busy-new-0", 4, 64.0, 0.7, 0.018)
        return [("quiet-0", 4, 8.0, 0.6, 0.010), busy]

    evaluator = _run(fleet_config(SCHEDULE), replicas)
    (grading,) = evaluator.state().gradings.values()
    assert grading.new_draft_length == 4
    assert grading.before.draft_length == 2 and grading.before.batch_size == 64.0
