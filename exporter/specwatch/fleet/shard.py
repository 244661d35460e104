"""Fleet shards: several fleet instances split the routes between them (prometheus.shard).

A route's identity is its name and its deployment (prometheus.deployment_labels' values): every
replica of it, the rollout grader and the learned curve's points of that deployment stay in one
shard. Its shard is the identity's MD5 (the last 8 bytes, big-endian, as Prometheus's hashmod
relabelling reads it) modulo the number of shards: stable across restarts, hosts and versions,
so each route is evaluated and exported by exactly one shard.
"""

from __future__ import annotations

import hashlib

from specwatch.view.fleet import DeploymentKey


def shard_of(route: str, deployment: DeploymentKey, total: int) -> int:
    """The shard (0..total-1) that evaluates this route of this deployment."""
    if total <= 1:
        return 0
    identity = "\xff".join((route, *(f"{name}={value}" for name, value in deployment)))
    digest = hashlib.md5(identity.encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest[8:], "big") % total
