"""Fleet mode's inputs without Prometheus: a sidecar-free config over a `pod`-labelled fleet, and one
replica's window answer in the query API's shape (FleetEvaluator.evaluate reads these)."""

from __future__ import annotations

from collections.abc import Mapping

from specwatch.config import Config, from_mapping
from specwatch.fleet import queries as promql
from specwatch.fleet.client import Sample

START = 1_800_000_000.0
#: Engine steps per 1m window of a replica's answer.
STEPS_PER_MINUTE = 2000.0


def fleet_config(stated: Mapping[str, object] | None) -> Config:
    """Fleet mode over replicas told apart by `pod`, EAGLE-3 on Llama-3.1-8B (H100), 1m and 5m
    windows; ``stated``: the draft.config the servers run with (None: nothing stated)."""
    draft: dict[str, object] = {"method": "eagle3"}
    if stated is not None:
        draft["config"] = dict(stated)
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


def replica_answer(
    pod: str, k: int, batch: float, alpha: float, itl: float, windows: float, *, drafting: bool = True
) -> list[Sample]:
    """One replica's window answer (``windows`` 1m windows' worth) at ``batch``, drafting K with
    i.i.d. acceptance ``alpha`` per position, or (``drafting`` False) its spec counters frozen (no
    draft in the window) while generation goes on."""
    base = {"pod": pod, "engine": "0", "model_name": "llama"}

    def sample(family: str, value: float, **extra: str) -> Sample:
        return Sample({**base, promql.FAMILY_LABEL: family, **extra}, value)

    steps = STEPS_PER_MINUTE * windows
    observations = steps * batch
    share = 1.0 if drafting else 0.0
    return [
        sample(promql.STEPS, steps),
        sample(promql.RUNNING_MEAN, batch),
        sample(promql.SAMPLES, 5.0 * windows),
        sample(promql.ITL_SUM, observations * itl),
        sample(promql.ITL_COUNT, observations),
        sample(promql.ITL_BUCKET, observations, le="+Inf"),
        sample(promql.GENERATION, observations * (1 + share * k * alpha)),
        sample(promql.DRAFTS, share * observations),
        sample(promql.DRAFT_TOKENS, share * k * observations),
        sample(promql.ACCEPTED, share * observations * k * alpha),
        *(sample(promql.ACCEPTED_PER_POS, share * observations * alpha, position=str(i)) for i in range(k)),
    ]
