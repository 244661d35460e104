"""An evaluation works its controller terms out only when the advice reads them, and they are then
what working them out during the poll gives: every evaluation and every engine's advice of the real
vLLM recording are the same with evaluation.with_controller_terms as with its plain version, under
no stated config, a stated batch schedule and adaptive verification (the engine moves K itself)."""

from __future__ import annotations

import pytest

from specwatch.config import from_mapping
from specwatch.engines.advice import ADVISED_ENGINES, advise
from specwatch.sidecar.pipeline import Pipeline
from specwatch.verdict import evaluation
from specwatch.verdict.evaluation import RouteEvaluation
from support.paths import fixture_path

STATED = {
    "none": None,
    "schedule": {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 16, 4], [17, 48, 2], [49, 512, 1]],
    },
    "adaptive": {"method": "ngram", "num_speculative_tokens": 4, "enable_adaptive_verification": True},
}


def recording() -> list[str]:
    return [p.read_text() for p in sorted(fixture_path("vllm-cpu-real").glob("*.prom"))]


def evaluations(stated: dict[str, object] | None) -> list[tuple[RouteEvaluation, ...]]:
    mapping: dict[str, object] = {"windows": ["1m", "5m"], "log": {"level": "warning"}}
    if stated is not None:
        mapping["draft"] = {"config": stated}
    pipeline = Pipeline(from_mapping(mapping, environ={}))
    out = []
    for i, text in enumerate(recording()):
        t = 1_795_952_400.0 + 2.0 * i
        assert pipeline.ingest("vllm", t, text).ok
        out.append(tuple(pipeline.evaluate(t)))
    return out


@pytest.fixture
def counted(monkeypatch):
    """How many times the controller terms were worked out."""
    calls = []
    plain = evaluation.controller_terms

    def terms(*args, **kwargs):
        calls.append(1)
        return plain(*args, **kwargs)

    monkeypatch.setattr(evaluation, "controller_terms", terms)
    return calls


@pytest.mark.parametrize("stated", STATED)
def test_the_poll_leaves_the_controller_terms_to_their_first_reader_and_they_equal_the_plain_ones(
    stated, counted, monkeypatch
):
    deferred = evaluations(STATED[stated])
    assert counted == []  # nothing read them: nothing worked them out
    monkeypatch.setattr(evaluation, "with_controller_terms", evaluation.with_controller_terms_plain)
    eager = evaluations(STATED[stated])
    assessed = sum(e.assessment is not None and e.assessment.controller_terms is not None for p in eager for e in p)
    assert assessed > 0 and len(counted) >= assessed  # the plain version worked them out during the poll
    assert deferred == eager  # every field of every evaluation, the deferred terms read for it
    for late, now in zip(deferred, eager, strict=True):
        for a, b in zip(late, now, strict=True):
            for engine in ADVISED_ENGINES:
                assert advise(a.advised, engine) == advise(b.advised, engine)
