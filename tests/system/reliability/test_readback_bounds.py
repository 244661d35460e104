"""Read-back and fleet history are bounded like a poll: peak RSS of the process that
reads them, measured in a subprocess against a fake query API on loopback, stays under the
chart's memory limits; hostile answers (a 400-digit number, JSON nested 100,000 deep, samples
stamped in the future or at +Inf) are counted and logged once, never a dead thread."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specwatch.base.logsetup import capture_logs
from specwatch.config import ReadbackConfig
from specwatch.fleet import queries as promql
from specwatch.fleet.history import HISTORY_BYTES_PER_REPLICA
from specwatch.serve.readback import Readback

from .promfake import FakePrometheus, grid, matrix

ROOT = Path(__file__).resolve().parents[3]
EXPORTER = ROOT / "exporter"
NOW = 1_800_000_000.0


def _chart_values() -> str:
    return (ROOT / "helm/specwatch/values.yaml").read_text()


def sidecar_limit_mib() -> int:
    limits = _chart_values().split("resources:\n  requests:", 1)[1]
    return int(re.search(r"limits:\n\s+cpu: \S+\n\s+memory: (\d+)Mi", limits).group(1))  # type: ignore[union-attr]


def fleet_limit_mib(replicas: int) -> int:
    """The chart's fleet formula (templates/_helpers.tpl): 64 MiB + (64 KiB + the history's) a replica."""
    helpers = (ROOT / "helm/specwatch/templates/_helpers.tpl").read_text()
    assert "(add 64 $historyKib)" in helpers, "the chart's formula carries the history's cost"
    kib = int(re.search(r"\$historyKib := (\d+)", helpers).group(1))  # type: ignore[union-attr]
    assert kib * 1024 >= HISTORY_BYTES_PER_REPLICA
    return 64 + -(-(64 + kib) * replicas // 1024)


def _probe(script: str, *args: str, timeout: float = 240.0) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(EXPORTER)}
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


_HWM = (
    "hwm = next(int(l.split()[1]) for l in open('/proc/self/status').read().splitlines() if l.startswith('VmHWM:'))\n"
)

READBACK_PROBE = (
    """
import json, sys
from specwatch.config import ReadbackConfig
from specwatch.serve.readback import Readback
readback = Readback(ReadbackConfig(url=sys.argv[1], timeout=60.0))
readback.run(now=float(sys.argv[2]))
"""
    + _HWM
    + "print(json.dumps({'hwm_kib': hwm, 'errors': {k: v for k, v in readback.errors.items() if v}, "
    "'restored': readback.restored}))\n"
)


def _dense_readback(form: dict[str, str]) -> bytes:
    """~4 MiB under max_bytes: 400 curve series of the route, each 280 points (dense)."""
    times = grid(form)
    dense = [times[0] + i * (times[-1] - times[0]) / 279 for i in range(280)]
    series = [
        (
            {"__name__": "specwatch_step_time_curve_seconds", "route": "chat", "pod": f"old-{p}", "tokens": str(n)},
            [(t, f"{0.004 + n * 1e-6:.9f}") for t in dense],
        )
        for p in range(10)
        for n in range(1, 41)
    ]
    return matrix(series)


def test_a_dense_4_mib_readback_answer_peaks_under_the_sidecars_memory_limit():
    with FakePrometheus(_dense_readback) as fake:
        size = len(_dense_readback({"start": str(NOW - 3600), "end": str(NOW), "step": "30"}))
        assert 3 * 2**20 < size <= 4 * 2**20, size
        result = _probe(READBACK_PROBE, fake.url, str(NOW))
    limit = sidecar_limit_mib()
    print(f"read-back 4 MiB dense answer: peak RSS {result['hwm_kib'] / 1024:.1f} MiB (limit {limit} MiB)")
    assert result["errors"] == {} and result["restored"] == 1
    assert result["hwm_kib"] < limit * 1024 * 0.75, "with room for the windows beside it"


HISTORY_PROBE = (
    """
import json, sys, time
from specwatch.config import from_mapping
from specwatch.fleet.evaluator import FleetEvaluator
from specwatch.fleet.history import read_history
config = from_mapping({"windows": ["1m", "5m"], "prometheus": {"url": sys.argv[1], "replica_labels": ["pod"],
    "history_lookback": "12h"}}, environ={})
read = read_history(FleetEvaluator(config), float(sys.argv[2]))
"""
    + _HWM
    + "print(json.dumps({'hwm_kib': hwm, 'steps': read.steps, 'queries': read.queries, 'error': read.error}))\n"
)
REPLICAS = 16
K = 3


def _fleet_history(form: dict[str, str]) -> bytes:
    """Every replica's window series (~35, K=3, 20 ITL buckets) at every step of the range."""
    times = grid(form)
    pods = [f"vllm-{i}" for i in range(REPLICAS)]
    if "timestamp(" in form["query"]:
        return matrix([({"pod": pod}, [(t, f"{t - 5:.3f}") for t in times]) for pod in pods])
    minutes = 5.0 if '"5m"' in form["query"] or "[5m" in form["query"] else 1.0
    steps, batch = 2000.0 * minutes, 8.0
    obs = steps * batch
    families: list[tuple[str, float, dict[str, str]]] = [
        (promql.STEPS, steps, {}),
        (promql.RUNNING_MEAN, batch, {}),
        (promql.SAMPLES, 5.0 * minutes, {}),
        (promql.ITL_SUM, obs * 0.012, {}),
        (promql.ITL_COUNT, obs, {}),
        (promql.GENERATION, obs * 2.5, {}),
        (promql.DRAFTS, obs, {}),
        (promql.DRAFT_TOKENS, K * obs, {}),
        (promql.ACCEPTED, obs * 1.5, {}),
        *((promql.ACCEPTED_PER_POS, obs * 0.5, {"position": str(i)}) for i in range(K)),
        *((promql.ITL_BUCKET, obs, {"le": f"{0.001 * 2**i:g}"}) for i in range(20)),
    ]
    series = [
        (
            {"pod": pod, "engine": "0", "model_name": "llama", promql.FAMILY_LABEL: family, **extra},
            [(t, f"{value:.6g}") for t in times],
        )
        for pod in pods
        for family, value, extra in families
    ]
    return matrix(series)


def test_sixteen_replicas_of_12h_history_peak_under_the_charts_fleet_limit():
    with FakePrometheus(_fleet_history) as fake:
        started = time.monotonic()
        result = _probe(HISTORY_PROBE, fake.url, str(NOW))
        took = time.monotonic() - started
    limit = fleet_limit_mib(REPLICAS)
    print(f"history 16 replicas x 12 h: peak RSS {result['hwm_kib'] / 1024:.1f} MiB (limit {limit} MiB), {took:.0f} s")
    assert result["error"] is None and result["steps"] == 720, result
    assert result["hwm_kib"] < limit * 1024, result


def _serving(body: bytes):
    return FakePrometheus(lambda form: body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"route":"chat"},"values":[['
        + b"9" * 400
        + b',"1"]]}]}}',
        b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"route":"chat"},"values":[[1,'
        + b"9" * 400
        + b"]]}]}}",
        b'{"status":"success","data":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"status":"success","stats":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b"[" * 100_000 + b"]" * 100_000,
    ],
    ids=["400-digit time", "400-digit value", "100k-deep data", "100k-deep member", "100k-deep answer"],
)
def test_a_huge_number_or_deep_json_is_counted_and_logged_once_and_the_thread_ends(body):
    with _serving(body) as fake:
        readback = Readback(ReadbackConfig(url=fake.url, timeout=10.0))
        with capture_logs() as logs:
            readback.start(now=NOW)
            assert readback._thread is not None
            readback._thread.join(timeout=30)
    assert readback.take() is not None, "the thread ended with a result"
    failed = [e for e in logs if e["event"] in ("readback_failed", "readback_implausible")]
    assert len(failed) == 1, logs
    assert sum(readback.errors.values()) >= 1 and readback.restored == 0
