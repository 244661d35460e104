"""Fleet mode does not grade K following a stated schedule as a rollout: replicas of one
route at different batches draft the K the stated `draft.config` schedule gives at each (the
schedule specwatch's own `shorten` writes), so the route has one regime; a replica drafting a K the
schedule cannot give at its batch is still a rollout, graded. FleetEvaluator on answers in the
query API's shape (no Prometheus needed)."""

from __future__ import annotations

from specwatch.config import from_mapping
from specwatch.engines.vllm_schedule import speculative_config
from specwatch.fleet import queries as promql
from specwatch.fleet.client import Sample
from specwatch.fleet.evaluator import FleetEvaluator

START = 1_800_000_000.0
#: What `shorten` recommends at batch 64 for a drafter sure of two tokens: K=4 up to batch 16, K=2 above.
SCHEDULE = speculative_config("eagle3", 4, [[1, 16, 4], [17, 1024, 2]])


def _config(stated: bool):
    draft: dict[str, object] = {"method": "eagle3"}
    if stated:
        draft["config"] = dict(SCHEDULE)
    return from_mapping(
        {
            "windows": ["1m", "5m"],
            "decision": {"min_drafts": 100, "hold": 1},
            "draft": draft,
            "hardware": {"preset": "h100-sxm"},
            "model": {"preset": "llama-3.1-8b", "context_tokens": 1024},
            "prometheus": {"url": "http://prometheus:9090", "replica_labels": ["pod"], "scrape_interval": "15s"},
        },
        environ={},
    )


def _answer(pod: str, k: int, batch: float, alpha: float, itl: float, windows: float) -> list[Sample]:
    """One replica's window answer (``windows`` 1m windows' worth) at ``batch``."""
    base = {"pod": pod, "engine": "0", "model_name": "llama"}

    def sample(family: str, value: float, **extra: str) -> Sample:
        return Sample({**base, promql.FAMILY_LABEL: family, **extra}, value)

    steps = 2000.0 * windows
    observations = steps * batch
    return [
        sample(promql.STEPS, steps),
        sample(promql.RUNNING_MEAN, batch),
        sample(promql.SAMPLES, 5.0 * windows),
        sample(promql.ITL_SUM, observations * itl),
        sample(promql.ITL_COUNT, observations),
        sample(promql.ITL_BUCKET, observations, le="+Inf"),
        sample(promql.GENERATION, observations * (1 + k * alpha)),
        sample(promql.DRAFTS, observations),
        sample(promql.DRAFT_TOKENS, k * observations),
        sample(promql.ACCEPTED, observations * k * alpha),
        *(sample(promql.ACCEPTED_PER_POS, observations * alpha, position=str(i)) for i in range(k)),
    ]


def _run(config, replicas_at) -> FleetEvaluator:
    """20 polls a minute apart; replicas_at(n) -> [(pod, k, batch, alpha, itl)]."""
    evaluator = FleetEvaluator(config)
    for n in range(20):
        now = START + 60.0 * n
        replicas = replicas_at(n)
        one = [s for r in replicas for s in _answer(*r, windows=1.0)]
        five = [s for r in replicas for s in _answer(*r, windows=5.0)]
        fresh = [Sample({"pod": r[0]}, now - 5) for r in replicas]
        evaluator.evaluate(now, {"1m": one, "5m": five}, fresh)
    return evaluator


def _following(n: int) -> list[tuple[str, int, float, float, float]]:
    # A quiet replica at batch 8 drafts K=4, a busy one at batch 64 drafts K=2: both as stated.
    return [("quiet-0", 4, 8.0, 0.6, 0.010), ("busy-0", 2, 64.0, 0.7, 0.016)]


def test_replicas_drafting_the_stated_schedules_k_at_their_batches_are_no_rollout():
    evaluator = _run(_config(stated=True), _following)
    assert evaluator.state().gradings == {}, "K followed the stated schedule: nothing was rolled out"


def test_without_a_stated_schedule_the_same_replicas_read_as_two_regimes():
    # The control: what the schedule tells apart (without it, K 4 beside K 2 is a rollout in progress).
    evaluator = _run(_config(stated=False), _following)
    assert evaluator.state().gradings != {}


def test_a_replica_drafting_a_k_the_schedule_cannot_give_at_its_batch_is_still_a_rollout():
    def replicas(n: int) -> list[tuple[str, int, float, float, float]]:
        busy = ("busy-0", 2, 64.0, 0.7, 0.016) if n < 10 else ("busy-new-0", 4, 64.0, 0.7, 0.018)
        return [("quiet-0", 4, 8.0, 0.6, 0.010), busy]

    evaluator = _run(_config(stated=True), replicas)
    (grading,) = evaluator.state().gradings.values()
    assert grading.new_draft_length == 4
    assert grading.before.draft_length == 2 and grading.before.batch_size == 64.0
