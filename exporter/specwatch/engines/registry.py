"""The engines specwatch reads, and which one a payload speaks.

Adding an engine: write its EngineSchema (engines/<engine>.py, its names only), list it in ENGINES,
and add a fixture exposition with replay tests (tests/fixtures/engines/<engine>/). Detection,
the target config key `engine`, the grouping and fleet mode's queries pick it up from here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from specwatch.engines.llamacpp import LLAMACPP
from specwatch.engines.lmdeploy import LMDEPLOY
from specwatch.engines.ray_serve import RAY_VLLM
from specwatch.engines.schema import EngineSchema
from specwatch.engines.sglang import SGLANG
from specwatch.engines.trtllm import TRTLLM
from specwatch.engines.vllm import VLLM

#: Every engine, in detection order (on a tie the first wins; vLLM is the default).
ENGINES: tuple[EngineSchema, ...] = (VLLM, RAY_VLLM, LMDEPLOY, LLAMACPP, SGLANG, TRTLLM)
DEFAULT = VLLM
BY_NAME: Mapping[str, EngineSchema] = {engine.name: engine for engine in ENGINES}
#: The target config's `engine` values: a name, or AUTO (detected from each payload).
AUTO = "auto"
ENGINE_NAMES: tuple[str, ...] = tuple(BY_NAME)

#: Every family of every engine, name -> type: what detection reads of a payload.
FAMILIES: dict[str, str] = {name: kind for engine in ENGINES for name, kind in engine.families.items()}


def engine_named(name: str) -> EngineSchema:
    """The schema of an engine name (KeyError: unknown; the config validates names first)."""
    return BY_NAME[name]


def detect(families: Collection[str], default: EngineSchema = DEFAULT) -> EngineSchema:
    """The engine whose families the payload holds most of; `default` (the target's last engine)
    when it holds none or ties, so a payload mixing engines does not flip the target each poll."""
    best, best_count = default, sum(1 for name in default.families if name in families)
    for engine in ENGINES:
        count = sum(1 for name in engine.families if name in families)
        if count > best_count:
            best, best_count = engine, count
    return best
