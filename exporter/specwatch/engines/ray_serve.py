"""Ray Serve LLM's re-export of vLLM's metrics, as an EngineSchema.

Under Ray Serve, vLLM records its metrics through Ray (vllm/v1/metrics/ray_wrappers.py), which
replaces every character outside [a-zA-Z0-9_] of a name with "_" (`vllm:` -> `vllm_`); Ray's
metrics agent (python/ray/_private/metrics_agent.py) prefixes its namespace `ray_` and exports a
counter as `<name>_total`, by default beside a deprecated gauge of the bare name (the same
observations; RAY_EXPORT_COUNTER_AS_GAUGE=0 drops it), which is not read. Labels are vLLM's plus
Ray's `ReplicaId`, `WorkerId`, `Component`, `SessionName`, `Version`: one node's endpoint carries
every replica on it, so a series is one (ReplicaId, engine).
"""

from __future__ import annotations

from specwatch.engines.vllm import vllm_shaped

PREFIX = "ray_vllm_"

RAY_VLLM = vllm_shaped(
    "ray-vllm", PREFIX, series_labels=("ReplicaId", "engine"), summary="Ray Serve LLM (vLLM engine), Ray's `/metrics`"
)
