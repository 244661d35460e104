"""(7) Evaluation cost: one route-window (derive + cost model + verdict) per poll.

`Pipeline.evaluate(t)` after each ingested poll, timed alone and divided by the evaluations it
returned (routes x windows): window view, `derive.window_stats`, the cost model (break-even, best K,
largest speculative batch, V1 schedule) and the verdict with hold. Medians over every poll and round.

Sources:
* the real vLLM 0.32 CPU recording in tests/fixtures (n-gram K=4: measured K ~3.4 and draft
  coverage ~0.7, so every poll brings new floats into the cost model; quiet phases and the 1m/5m
  windows holding the same polls repeat questions the assessment memo answers);
* the simulator's steady scenario and mixed-routes (two routes), 5 s polls: new traffic every poll.

Two variants in alternation: the pipeline as shipped, and the same with the assessment memo
emptied before every evaluation (what every window costs when nothing repeats). The peer,
prometheus_client parsing the same payload, is timed in the same rounds. All in CPU time of the
benchmark's thread (time.thread_time), as in parse_cost.
"""

from __future__ import annotations

import json
import time

from specwatch.config import from_mapping
from specwatch.sidecar.pipeline import Pipeline
from specwatch.verdict.memo import AssessmentCache

from . import payloads
from .common import REPO, Table, fmt_us, median, verdict_mark
from .parse_cost import config_for_scenario, pc_parse

GOAL_SECONDS = 100e-6
#: The goal was set against prometheus_client's parse of the real payload on a quiet machine
#: (7.79 ms). On shared cores absolute times move with the neighbours, so the goal is judged as
#: the same ratio to the peer measured in the same run: peer / per route-window >= 78.
GOAL_PEER_SECONDS = 7.79e-3
GOAL_RATIO = GOAL_PEER_SECONDS / GOAL_SECONDS
REAL_RECORDING = REPO / "tests" / "fixtures" / "vllm-0.32-cpu" / "ngram-recording.jsonl"


def _read(path) -> list[tuple[float, str, str]]:
    with open(path, encoding="utf-8") as handle:
        entries = [json.loads(line) for line in handle if line.strip()]
    return [(float(e["t"]), e.get("target", "vllm"), e["text"]) for e in entries]


def measure(seq: list[tuple[float, str, str]], config, *, rounds: int, memo: bool) -> dict[str, float]:
    """Median seconds per route-window evaluation over every poll and round."""
    per_eval: list[float] = []
    assessed = evaluations = hits = misses = 0
    perf = time.thread_time  # CPU time, as in parse_cost.measure_sequence
    for _ in range(rounds):
        pipeline = Pipeline(config)
        if not memo:
            pipeline.assessments = AssessmentCache(size=0)  # keeps nothing: every window assessed afresh
        for t, target, text in seq:
            pipeline.ingest(target, t, text)
            a = perf()
            out = pipeline.evaluate(t)
            b = perf()
            if out:
                per_eval.append((b - a) / len(out))
                evaluations += len(out)
                assessed += sum(
                    1 for e in out if e.assessment is not None and e.assessment.breakeven_acceptance_rate is not None
                )
        cache = pipeline.assessments
        hits, misses = hits + cache.hits, misses + cache.misses
    return {
        "median": median(per_eval),
        "evaluations": evaluations,
        "with_cost_model": assessed,
        "memo_hit_rate": hits / max(hits + misses, 1),
    }


def run_evaluate(smoke: bool) -> tuple[Table, dict]:
    rounds = 2 if smoke else 10
    polls = 14 if smoke else 72
    table = Table(
        "evaluate",
        "Evaluation cost per route-window (derive + cost model + verdict), one run",
        [
            "recording",
            "polls x routes x windows",
            "windows reaching the cost model",
            "specwatch per route-window",
            "same, assessment memo off",
            "memo hit rate",
            "prometheus_client parse of one payload (peer)",
            "ratio (peer / route-window)",
            "goal",
            "met",
        ],
        note="Median over every poll and round of Pipeline.evaluate(t) / evaluations returned. "
        "'memo off': the assessment memo emptied before each evaluation (every window assessed "
        "afresh; the step-time and derived-model memos still work). The peer column is "
        "prometheus_client's text_string_to_metric_families on the same payloads, same run. "
        "Goal: ≤ 100 µs per route-window where the peer takes 7.79 ms (the issue's quiet-machine "
        "figure), judged as the ratio: peer / route-window ≥ 78.",
    )
    sources = []
    if REAL_RECORDING.exists():
        sources.append(
            (
                "real vLLM 0.32 CPU, n-gram K=4 (tests/fixtures)",
                _read(REAL_RECORDING),
                from_mapping({"poll_interval": "10s", "windows": ["1m", "5m"]}),
            )
        )
    for name in ("steady", "mixed-routes"):
        rec = payloads.scenario_recording(name, duration=payloads.POLL * (polls + 1))
        sources.append((f"simulator {name}, EAGLE-3 (5 s polls)", _read(rec)[:polls], config_for_scenario(name)))
    results = {}
    for label, seq, config in sources:
        # Alternate the variants and the peer so a noisy neighbour hits all of them alike.
        on, off, pc = [], [], []
        for _ in range(rounds):
            on.append(measure(seq, config, rounds=1, memo=True))
            off.append(measure(seq, config, rounds=1, memo=False))
            a = time.thread_time()
            for _, _, text in seq:
                pc_parse(text)
            pc.append((time.thread_time() - a) / len(seq))
        m_on = median(r["median"] for r in on)
        m_off = median(r["median"] for r in off)
        m_pc = median(pc)
        routes_windows = on[0]["evaluations"] // max(len(seq), 1)
        table.add(
            label,
            f"{len(seq)} x {routes_windows}",
            f"{on[0]['with_cost_model']} of {on[0]['evaluations']}",
            fmt_us(m_on),
            fmt_us(m_off),
            f"{on[0]['memo_hit_rate']:.0%}",
            fmt_us(m_pc),
            f"{m_pc / m_on:.0f}×",
            "≥ 78× (100 µs at 7.79 ms)",
            verdict_mark(m_pc / m_on >= GOAL_RATIO),
        )
        results[label] = {
            "per_route_window": m_on,
            "per_route_window_memo_off": m_off,
            "pc_parse": m_pc,
            "memo_hit_rate": on[0]["memo_hit_rate"],
            "evaluations": on[0]["evaluations"],
            "with_cost_model": on[0]["with_cost_model"],
            "ratio": m_pc / m_on,
            "met": m_pc / m_on >= GOAL_RATIO,
        }
    return table, results
