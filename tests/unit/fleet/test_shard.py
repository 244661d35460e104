"""Fleet shards (fleet/shard.py, prometheus.shard): each route of each deployment is evaluated by
exactly one shard, by a hash that does not depend on the process."""

from __future__ import annotations

import hashlib

from specwatch.config import from_mapping
from specwatch.fleet import queries as promql
from specwatch.fleet.client import Sample
from specwatch.fleet.evaluator import FleetEvaluator
from specwatch.fleet.shard import shard_of


def test_every_route_falls_on_exactly_one_shard_and_the_shards_share_them():
    routes = [(f"route-{i}", (("namespace", f"ns-{i % 7}"),)) for i in range(1000)]
    counts = [0, 0, 0, 0]
    for route, deployment in routes:
        counts[shard_of(route, deployment, 4)] += 1
    assert sum(counts) == 1000
    assert all(150 <= c <= 350 for c in counts), counts  # no shard empty or holding most


def test_the_shard_is_the_identity_md5s_last_eight_bytes_modulo_the_total_as_hashmod_reads_it():
    digest = hashlib.md5("chat\xffnamespace=llm".encode()).digest()
    assert shard_of("chat", (("namespace", "llm"),), 5) == int.from_bytes(digest[8:], "big") % 5
    assert shard_of("chat", (), 1) == 0


def _answer(pod: str, model: str) -> list[Sample]:
    labels = {"pod": pod, "model_name": model, "engine": "0"}
    return [
        Sample({**labels, promql.FAMILY_LABEL: promql.DRAFTS}, 100.0),
        Sample({**labels, promql.FAMILY_LABEL: promql.RUNNING_MEAN}, 4.0),
    ]


def test_shards_over_one_answer_evaluate_each_route_once_between_them():
    models = [f"model-{i}" for i in range(40)]
    answer = [s for i, m in enumerate(models) for s in _answer(f"pod-{i}", m)]
    seen: list[str] = []
    for index in range(3):
        config = from_mapping(
            {
                "windows": ["1m", "5m"],
                "prometheus": {
                    "url": "http://prometheus:9090",
                    "replica_labels": ["pod"],
                    "recorded": False,
                    "shard": {"index": index, "total": 3},
                },
            },
            environ={},
        )
        grouped = FleetEvaluator(config).group({"1m": answer, "5m": answer})
        assert set(grouped["1m"]) == set(grouped["5m"])
        seen += [route for _, route in grouped["1m"]]
    assert sorted(seen) == sorted(models)
