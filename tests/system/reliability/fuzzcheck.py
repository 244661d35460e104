"""The fuzz oracle shared by bench/fuzz.py (atheris or Hypothesis) and the corpus regression test.

`check(text)` feeds one payload to the parser and to a pipeline that already holds a good poll:
the parser may raise only ExpositionError, `Pipeline.ingest` may raise nothing, and a rejected
payload leaves the windows exactly as they were. Anything else is a finding.
"""

from __future__ import annotations

from pathlib import Path

from specwatch.config import from_mapping
from specwatch.engines.grouping import SELECTOR
from specwatch.exposition import ExpositionError
from specwatch.sidecar.pipeline import Pipeline
from support.paths import fixture_path

from .mutate import MUTATIONS, apply_mutations

CORPUS = Path(__file__).parent / "corpus"
_CONFIG = None


def seed_payloads(every: int = 3) -> list[str]:
    """Every `every`-th real vLLM payload of the fixtures: a spread of phases (idle, load, restart,
    spec off, multiprocess)."""
    folder = fixture_path("vllm-cpu-real")
    files = sorted(folder.glob("*.prom")) + sorted((folder / "extra").glob("*.prom"))
    return [p.read_text() for p in files[::every]]


def _pipeline(good: str) -> Pipeline:
    global _CONFIG
    if _CONFIG is None:
        _CONFIG = from_mapping(
            {
                "poll_interval": "5s",
                "windows": ["1m"],
                "decision": {"min_drafts": 1},
                "model": {"preset": "llama-3.1-8b"},
            },
            environ={},
        )
    pipeline = Pipeline(_CONFIG)
    pipeline.ingest("vllm", 1000.0, good)
    return pipeline


def check(text: str, good: str) -> None:
    try:
        SELECTOR.parse(text)
    except ExpositionError as exc:
        assert exc.reason in ("parse", "invalid"), exc.reason
    pipeline = _pipeline(good)
    before = [(n, list(r.window.entries), dict(r.window.totals)) for n, r in pipeline._routes.items()]
    result = pipeline.ingest("vllm", 1005.0, text)
    pipeline.evaluate(1005.0)
    pipeline.state()
    if not result.ok:
        assert [(n, list(r.window.entries), dict(r.window.totals)) for n, r in pipeline._routes.items()] == before


def text_from_bytes(data: bytes, payloads: list[str]) -> tuple[str, str]:
    """Bytes -> (payload, the good payload before it): mutations of a real payload, or raw bytes."""
    if len(data) < 2 or not payloads:
        return data.decode("utf-8", "replace"), payloads[0] if payloads else ""
    base = payloads[data[0] % len(payloads)]
    mode = data[1] % 3
    rest = data[2:]
    if mode == 0:
        names = sorted(MUTATIONS)
        ops = []
        for i in range(0, len(rest) - 8, 9):
            a = int.from_bytes(rest[i + 1 : i + 5], "little")
            b = int.from_bytes(rest[i + 5 : i + 9], "little")
            ops.append((names[rest[i] % len(names)], a, b))
        return apply_mutations(base, ops[:16]), base
    if mode == 1:
        cut = int.from_bytes(rest[:4].ljust(4, b"\0"), "little") % (len(base) + 1)
        return base[:cut] + rest[4:].decode("utf-8", "replace") + base[cut:], base
    return rest.decode("utf-8", "replace"), base
