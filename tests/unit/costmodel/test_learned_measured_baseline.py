"""A real vLLM recording that starts with a spec-off baseline, replayed with nothing configured.

tests/fixtures/vllm-0.32-cpu/baseline-draft-*: one port watched for the whole run of
tests/system/realvllm/bench_baseline.py; the tiny model served without speculation, then (restarted
on the same port) with itself as its own draft (K=3, as costly as the target), alternately, the same
seeded load at concurrency 1, 4 and 16 in each. The recording (gzip) keeps every 1 s payload, cut
to the families specwatch reads; the measured spec-on/spec-off tokens/s ratios are stored beside it.
"""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Iterable
from pathlib import Path

from specwatch.config import from_mapping
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sidecar.replay import read_recording

FIXTURES = Path(__file__).parents[2] / "fixtures" / "vllm-0.32-cpu"
RECORDING = FIXTURES / "baseline-draft-recording.jsonl.gz"
RESULTS = FIXTURES / "baseline-draft-results.json"
#: The issue's bar for a prediction of the measured speedup.
TOLERANCE = 0.15
WINDOW = "30s"
#: Nothing about the hardware, model, draft or step time: where to read and how often.
CONFIG = {
    "poll_interval": "1s",
    "windows": [WINDOW, "5m"],
    "targets": [{"name": "vllm", "url": "http://127.0.0.1:9/metrics", "timeout": "900ms"}],
}


@functools.cache
def results() -> dict:
    return json.loads(RESULTS.read_text())


@functools.cache
def entries() -> tuple[dict, ...]:
    return tuple(read_recording(gzip.decompress(RECORDING.read_bytes()).decode().splitlines()))


def at_phase_ends(recorded: Iterable[dict], ends: dict[tuple[int, int], float]) -> dict[tuple[int, int], tuple]:
    """Replays `recorded` through a fresh sidecar pipeline; for each (run, concurrency) -> phase end,
    the 30s window's (expected speedup, verdict) at the last poll before that end."""
    pipeline = Pipeline(from_mapping(CONFIG))
    out: dict[tuple[int, int], tuple] = {}
    for entry in recorded:
        t = float(entry["t"])
        pipeline.ingest(entry["target"], t, entry["text"])
        windows = {e.stats.window: e for e in pipeline.evaluate(t)}
        for key, t_end in ends.items():
            if t <= t_end and WINDOW in windows:
                e = windows[WINDOW]
                out[key] = (e.value("expected_speedup"), e.verdict)
    return out


@functools.cache
def with_baseline() -> dict[tuple[int, int], tuple]:
    """The whole recording (the spec-off baseline first) through one pipeline."""
    return at_phase_ends(entries(), spec_phase_ends(results()))


def spec_phase_ends(res: dict) -> dict[tuple[int, int], float]:
    return {
        (i, int(c)): phase["client"]["t_end"]
        for i, run in enumerate(res["runs"])
        if run["arm"] == "spec"
        for c, phase in run["phases"].items()
    }


def measured(res: dict) -> dict[int, float]:
    return {int(c): row["measured_ratio"] for c, row in res["summary"].items()}


def test_after_a_spec_off_baseline_the_predicted_speedups_at_1_4_16_are_within_15_percent_of_measured():
    # The measured ratio is mean spec-on over mean spec-off tokens/s across the alternating runs, so
    # the prediction is the mean over the same spec-on runs (one 30s window varies ±15 % here).
    res = results()
    predicted = with_baseline()
    for c, ratio in measured(res).items():
        speedups = [speedup for (_, conc), (speedup, _) in predicted.items() if conc == c]
        mean = sum(speedups) / len(speedups)
        print(f"c={c}: measured {ratio:.2f}x, predicted {mean:.2f}x ({mean / ratio - 1:+.0%}) from {speedups}")
        assert len(speedups) == len([r for r in res["runs"] if r["arm"] == "spec"])
        assert abs(mean / ratio - 1) <= TOLERANCE, (c, ratio, speedups)


def test_after_a_spec_off_baseline_speculation_that_loses_at_concurrency_16_is_never_kept():
    """0.77x predicted where 0.75x was measured: disable, or undecided where the learned curve's
    residual on this noisy machine leaves the interval reaching 1 (then the status names the
    measurement); keep would be the costly mistake."""
    res = results()
    assert measured(res)[16] < 1
    pipeline_verdicts = with_baseline()
    last_spec_run = max(i for i, run in enumerate(res["runs"]) if run["arm"] == "spec")
    speedup, verdict = pipeline_verdicts[(last_spec_run, 16)]
    assert speedup < 1 and verdict in ("disable", "undecided"), (speedup, verdict)


def test_without_a_baseline_each_prediction_is_within_15_percent_or_no_verdict_is_given():
    res = results()
    first = next(i for i, run in enumerate(res["runs"]) if run["arm"] == "spec")
    spec_on = [e for e in entries() if res["runs"][first]["t0"] <= e["t"] < res["runs"][first + 1]["t0"]]
    ends = {key: t for key, t in spec_phase_ends(res).items() if key[0] == first}
    for (_, c), (speedup, verdict) in at_phase_ends(spec_on, ends).items():
        ratio = measured(res)[c]
        assert abs(speedup / ratio - 1) <= TOLERANCE or verdict not in ("keep", "shorten", "disable"), (
            c,
            ratio,
            speedup,
            verdict,
        )


def test_the_recording_holds_a_baseline_before_the_first_spec_on_server_and_both_arms_alternate():
    res = results()
    arms = [run["arm"] for run in res["runs"]]
    assert arms[0] == "nospec" and "spec" in arms
    first_spec_t0 = next(run["t0"] for run in res["runs"] if run["arm"] == "spec")
    before = [e for e in entries() if e["t"] < first_spec_t0]
    assert before and all("spec_decode_num_drafts" not in e["text"] for e in before)
