"""The sidecar config a user would write for a scenario's deployment (the demo, the tests and the
benchmarks run the real sidecar against the simulator with it)."""

from __future__ import annotations

from typing import Any

from specwatch.sim.scenario import Scenario


def sidecar_config_for(
    scenario: Scenario,
    *,
    target_url: str,
    listen: str,
    poll_interval: float,
    windows: tuple[str, ...],
    min_drafts: int = 500,
    hold: int = 2,
    speed: float = 1.0,
) -> dict[str, Any]:
    """The sidecar config a user would write for the scenario's deployment. `speed`: how much faster
    than real time the simulator runs it; above 1, every poll is evaluated, since one wall-clock
    poll then stands for `speed` of the deployment's (unset, `evaluation_interval` would space the
    evaluations by seconds of wall time, minutes of the scenario's)."""
    return {
        "listen": listen,
        "poll_interval": f"{poll_interval}s",
        **({"evaluation_interval": f"{poll_interval}s"} if speed > 1 else {}),
        "windows": list(windows),
        "targets": [{"name": "vllm", "url": target_url}],
        "hardware": scenario.hardware,
        "tensor_parallel": scenario.tensor_parallel,
        "model": {
            "preset": scenario.model,
            "dtype": scenario.dtype,
            "context_tokens": int(scenario.prompt_tokens + scenario.output_tokens / 2),
        },
        "draft": {
            "method": scenario.method,
            "k": scenario.num_speculative_tokens,
            **({"cost_per_token": scenario.draft_cost_per_token} if scenario.draft_cost_per_token is not None else {}),
            # What the server was started with, stated as the user would (draft.config).
            **({"config": dict(scenario.speculative_config)} if scenario.speculative_config is not None else {}),
        },
        "decision": {"min_drafts": min_drafts, "hold": hold},
        "log": {"format": "json", "level": "warning"},
    }
