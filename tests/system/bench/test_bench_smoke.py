"""`python -m bench --smoke` runs and produces every table (timings are not checked: CI machines are noisy)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TABLES = ("parse_cost", "evaluate", "scaling", "replay", "http", "attack", "detection", "false_changes", "accuracy")

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="needs Debian package prometheus (backfilled Prometheus for detection/accuracy)",
)


def test_smoke_mode_produces_every_table(tmp_path):
    out = tmp_path / "results.json"
    md = tmp_path / "tables.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(out), "--markdown", str(md)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(out.read_text())
    assert results["mode"] == "smoke"
    assert not results["errors"]
    assert set(TABLES) <= set(results["tables"]), sorted(results["tables"])
    for key in TABLES:
        table = results["tables"][key]
        assert table["rows"], key
        assert all(len(row) == len(table["headers"]) for row in table["rows"]), key
        assert f"### {table['title']}" in proc.stdout
        assert f"### {table['title']}" in md.read_text()
    # The whole-process peer must be the same computation with another parser.
    assert results["parts"]["replay"]["identical_output"] is True
    assert results["machine"]["cpus"]


PEER_CHECK = """
import prometheus_client.parser as peer
from bench import payloads, pcparser
from specwatch.config import from_mapping
from specwatch.sidecar.pipeline import Pipeline

calls = []
original = peer.text_string_to_metric_families
def counting(text):
    calls.append(1)
    return original(text)
peer.text_string_to_metric_families = counting
pcparser.text_string_to_metric_families = counting
pcparser.install()
pipeline = Pipeline(from_mapping({"poll_interval": "5s"}))
real = payloads.real_payloads()[:6]
for _, t, text in real:
    assert pipeline.ingest("vllm", t, text).ok
    pipeline.evaluate(t)
print(len(calls), len(real))
"""


def test_the_peer_parser_is_the_one_every_poll_uses_once_installed():
    # The replay benchmark's peer swaps prometheus_client in; a new fast path that bypassed the
    # swap once made that peer silently measure specwatch's own parser.
    proc = subprocess.run(
        [sys.executable, "-c", PEER_CHECK], cwd=REPO, capture_output=True, text=True, check=False, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    calls, polls = proc.stdout.split()
    assert int(calls) == int(polls) > 0
