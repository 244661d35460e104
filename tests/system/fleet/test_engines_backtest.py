"""Fleet mode reads every counter engine through the same engine layer as the sidecar: each
engine's fixture polls, stored in a real Prometheus (promtool backfill, as a scrape would store
them), give in `specwatch backtest` what `specwatch replay` gives of the same polls."""

from __future__ import annotations

import io
import json
import math
import subprocess

import pytest

from specwatch import config as config_mod
from specwatch.fleet.backtest import backtest_to
from specwatch.sidecar.replay import replay
from support.paths import FIXTURES

from .openmetrics import recording_to_openmetrics
from .promharness import PROMETHEUS, PROMTOOL, start_prometheus

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason="prometheus/promtool not installed"),
]

T0, T1 = 1_796_058_000.0, 1_796_058_030.0
PREFIXES = {"llamacpp": "llamacpp:", "lmdeploy": "lmdeploy:", "ray-vllm": "ray_vllm_"}
COMPARED = ("acceptance_rate", "mean_acceptance_length", "draft_length", "batch_size", "itl_p50_seconds", "drafts")


def _config(prometheus: dict[str, object] | None) -> config_mod.Config:
    return config_mod.from_mapping(
        {"windows": ["1m"], "poll_interval": "30s", "decision": {"min_drafts": 10}, "prometheus": prometheus},
        environ={},
    )


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory):
    """A Prometheus holding each engine's two fixture polls, one instance per engine."""
    work = tmp_path_factory.mktemp("engines")
    recordings = {}
    for engine in PREFIXES:
        path = work / f"{engine}.jsonl"
        path.write_text(
            "".join(
                json.dumps(
                    {"t": t, "target": "vllm", "text": (FIXTURES / "engines" / engine / f"{name}.prom").read_text()}
                )
                + "\n"
                for t, name in ((T0, "before"), (T1, "after"))
            )
        )
        recordings[engine] = path
    openmetrics = work / "history.om.txt"
    text = ""
    for engine, prefix in PREFIXES.items():
        part = work / f"{engine}.om.txt"
        assert recording_to_openmetrics([(recordings[engine], {"instance": engine, "job": "llm"})], part, prefix)
        text += part.read_text().removesuffix("# EOF\n")
    openmetrics.write_text(text + "# EOF\n")
    data = work / "data"
    subprocess.run(
        [str(PROMTOOL), "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    prometheus = start_prometheus(work / "prom", storage=data)
    try:
        yield prometheus, recordings
    finally:
        prometheus.stop()


@pytest.mark.parametrize("engine", sorted(PREFIXES))
def test_backtest_of_each_engine_equals_its_replay(stored, engine) -> None:
    prometheus, recordings = stored
    config = _config(
        {"url": prometheus.url, "selector": '{job="llm"}', "replica_labels": ["instance"], "scrape_interval": "30s"}
    )
    out = io.StringIO()
    backtest_to(config, T1, T1, 30.0, out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    mine = next(r for r in rows if (r.get("replica") or {}).get("instance") == engine)
    replayed = list(replay(_config(None), recordings[engine].read_text().splitlines()))[-1]
    for name in COMPARED:
        a, b = replayed[name], mine[name]
        assert (a is None and b is None) or math.isclose(a, b, rel_tol=1e-9), (name, a, b)
    assert mine["acceptance_rate"] == pytest.approx(0.65)
