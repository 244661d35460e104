"""specwatch's advice as llama.cpp's per-request draft length, on a real llama.cpp server: the
advice for a shorter K carries `speculative.n_max`, and a request that sets it in its body is
accepted by a server started with K=4; the sidecar's window over that request shows the K the
server really drafted, the ratio of its own counters.

The pinned build (llama-server 11434) compiles its per-request speculative fields out
(tools/server/server-schema.cpp, `#if 0`): it accepts the field and ignores it, so the window over
the advised request shows K unchanged, the same as over a request that sets nothing. That is why
the advice says so and tells to confirm it in the next window; a build that reads the field fails
the last assertion here, and the advice's note should then be revised."""

from __future__ import annotations

import json
import time
import urllib.request

import llamacpp_harness as harness
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwatch.config import from_mapping
from specwatch.engines.advice import ControllerTerms, advise
from specwatch.sidecar.pipeline import Pipeline
from specwatch.verdict.decide import Assessment
from support.loopback import free_port

rv = harness.rv
pytestmark = pytest.mark.realllamacpp

K = 4
ADVISED_K = 2
SETTLE = 2.0  # llama.cpp folds a request's counts in when its slot is released
WINDOW = 10.0  # synthetic seconds between the sidecar's polls: each window holds one request
DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens_total"
DRAFTS = "llamacpp:spec_decode_num_drafts_total"


def complete(base: str, extra: dict) -> dict:
    body = {"prompt": "Once upon a time, in a land far away,", "n_predict": 64, "temperature": 0, **extra}
    req = urllib.request.Request(
        f"{base}/completion", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as res:
        return json.loads(res.read())


def counters(text: str) -> tuple[float, float]:
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    return values[DRAFTS], values[DRAFT_TOKENS]


def test_the_advised_per_request_n_max_is_accepted_and_the_next_window_shows_the_k_the_server_drafts(
    llamacpp_env, llamacpp_artifacts
):
    shorter = Assessment(
        candidate="shorten",
        recommended_draft_length=ADVISED_K,
        action="merge",
        config_changes={"num_speculative_tokens": ADVISED_K},
        controller_terms=ControllerTerms(batch=1.0, zero_k_tax=0.066),
    )
    advice = advise(shorter, "llamacpp", {"spec_draft_n_min": 0})
    assert advice is not None and advice.request == {"speculative.n_max": ADVISED_K}

    binary, models = llamacpp_env
    server = harness.start_server(
        harness.server_argv(binary, models, free_port(), K), "per-request", llamacpp_artifacts
    )
    try:
        config = from_mapping(
            {
                "windows": ["10s"],
                "targets": [{"name": "llamacpp", "url": server.metrics_url, "engine": "llamacpp"}],
                "decision": {"min_drafts": 5, "hold": 1},
                "log": {"level": "warning"},
            },
            environ={},
        )
        pipeline = Pipeline(config)
        lengths = []
        t = 1_790_000_000.0
        pipeline.ingest("llamacpp", t, rv.fetch_metrics(server.metrics_url)[1])
        for extra in ({}, dict(advice.request)):
            before = counters(rv.fetch_metrics(server.metrics_url)[1])
            answer = complete(server.base, extra)
            assert answer.get("content"), answer
            time.sleep(SETTLE)
            text = rv.fetch_metrics(server.metrics_url)[1]
            after = counters(text)
            assert after[0] > before[0], "the request drafted"
            t += WINDOW
            pipeline.ingest("llamacpp", t, text)
            (evaluation,) = [e for e in pipeline.evaluate(t) if e.stats.window == "10s"]
            lengths.append(evaluation.stats.draft_length)
            # specwatch's K is the server's own counters' ratio over the request
            assert evaluation.stats.draft_length == pytest.approx((after[1] - before[1]) / (after[0] - before[0]))
    finally:
        server.stop()
    default, advised = lengths
    assert default is not None and advised is not None
    assert ADVISED_K < default <= K, lengths
    # The pinned build ignores the per-request field: the same K, the same drafts, as without it.
    assert advised == pytest.approx(default), lengths
