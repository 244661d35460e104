"""(1) parse + derive cost per poll, and (6) scaling with routes, engines and payload size.

specwatch's parse = a vLLM target's `Selector.parse` (find the selected lines, parse, validate: the same
families-of-samples output as the peer's), and the same followed by grouping into route snapshots
(`grouping.Grouping.snapshots`, remembered between polls as in the pipeline). specwatch's full poll =
parse + grouping
+ `RouteWindow.ingest` (reset-aware mirrors) + `Pipeline.evaluate` at the poll time (windows 1m and
5m: alpha, tau, K, p_i, B, ITL quantiles, cost model, verdict), all through `Pipeline.ingest/evaluate`
exactly as the live sidecar calls them. The peer is prometheus_client's
`text_string_to_metric_families` on the same text, every family and sample materialised (a parser
that yields lazily costs nothing until consumed). The four are timed in alternation on each payload,
in CPU time of the benchmark's thread (time.thread_time): on cores shared with other work, wall time
also counts the turns of other processes, which land more often inside the peer's longer parse.
"""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from specwatch import sim
from specwatch.config import from_mapping
from specwatch.engines import grouping
from specwatch.engines.vllm import VLLM
from specwatch.exposition import Selector
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.sidecar_config import sidecar_config_for

from . import payloads
from .common import Table, fmt_us, median, verdict_mark

WINDOWS = ("1m", "5m")


def pc_parse(text: str) -> int:
    n = 0
    for fam in text_string_to_metric_families(text):
        n += len(fam.samples)
    return n


def config_for_scenario(path_or_name) -> object:
    sc = sim.load_scenario(str(path_or_name))
    return from_mapping(
        sidecar_config_for(
            sc,
            target_url="http://127.0.0.1:1/metrics",
            listen="127.0.0.1:0",
            poll_interval=payloads.POLL,
            windows=WINDOWS,
        )
    )


def default_config() -> object:
    return from_mapping({"poll_interval": "5s", "windows": list(WINDOWS), "log": {"level": "warning"}})


def measure_sequence(
    seq: list[tuple[float, str]], config, *, rounds: int, skip: int = 2, pc_stride: int = 1, sw_parse: bool = True
) -> dict[str, float]:
    """Median seconds per payload: pc parse, specwatch parse, parse + group by route, and poll
    (parse + group + ingest + evaluate).

    Each round replays the whole sequence into a fresh Pipeline (a poll can only happen once);
    the first `skip` polls (empty windows) are not counted. pc is timed on every pc_stride-th payload."""
    pc, parse, grouped, poll = [], [], [], []
    perf = time.thread_time  # CPU time: on shared cores, wall time also counts other processes' turns
    for _ in range(rounds):
        pipeline = Pipeline(config)
        # A vLLM target's parser (its engine's names) and a grouping that remembers its plan, as the pipeline's.
        selector = Selector(VLLM.families)
        long_lived = grouping.Grouping(selector=selector)
        for i, (t, text) in enumerate(seq):
            if i >= skip and i % pc_stride == 0:
                a = perf()
                pc_parse(text)
                pc.append(perf() - a)
            if i >= skip and sw_parse:
                a = perf()
                families = selector.parse(text)
                b = perf()
                long_lived.snapshots(families, t=t, target="vllm", shape=selector.shape)
                grouped.append(perf() - a)
                parse.append(b - a)
            a = perf()
            result = pipeline.ingest("vllm", t, text)
            pipeline.evaluate(t)
            b = perf()
            if not result.ok:
                raise RuntimeError(f"payload {i} rejected: {result.message}")
            if i >= skip:
                poll.append(b - a)
    return {
        "pc": median(pc),
        "parse": median(parse) if parse else float("nan"),
        "parse_grouped": median(grouped) if grouped else float("nan"),
        "poll": median(poll),
        "polls_timed": len(poll),
    }


def run_parse_cost(smoke: bool) -> tuple[Table, dict]:
    rounds = 1 if smoke else 5
    polls = 14 if smoke else 72  # 72 polls = 6 min: the 5m window is full for the last 12
    table = Table(
        "parse_cost",
        "Parse + derive cost per poll (specwatch vs prometheus_client, same text, one run)",
        [
            "payload",
            "bytes / lines",
            "prometheus_client parse",
            "specwatch parse",
            "ratio (parse)",
            "specwatch parse + group by route",
            "ratio (pc parse / parse + group)",
            "specwatch full poll (parse+group+ingest+evaluate)",
            "ratio (pc parse / full poll)",
            "goal",
            "met",
        ],
        note="Medians over every payload of the sequence and every round. specwatch parse = "
        "a vLLM target's `Selector.parse` (text -> validated families of samples, what the peer returns); "
        "+ group by route = the same + `grouping.Grouping.snapshots` (a long-lived grouping, as the pipeline's). Goals: parse ≥ 30× faster than "
        "prometheus_client for one payload; one full poll for 8 engines < 5 ms.",
    )
    results = {}
    sources = []
    real = payloads.real_payloads()
    if real:
        seq = [(t, text) for _, t, text in (real[:12] if smoke else real)]
        sources.append(("real vLLM 0.32 CPU, 1 engine (fixtures)", seq, default_config(), 1))
    for engines in (1, 2, 8):
        seq = payloads.sim_sequence(engines, polls)
        scen = payloads._scenario_file(
            f"bench-dp{engines}", payloads.dp_scenario_yaml(engines, duration=payloads.POLL * (polls + 1))
        )
        sources.append(
            (f"simulator, {engines} DP engine{'s' if engines > 1 else ''}", seq, config_for_scenario(scen), engines)
        )
    for label, seq, config, engines in sources:
        m = measure_sequence(seq, config, rounds=rounds)
        size = median(len(t) for _, t in seq)
        lines = median(t.count("\n") for _, t in seq)
        ratio_parse = m["pc"] / m["parse"]
        ratio_grouped = m["pc"] / m["parse_grouped"]
        ratio_poll = m["pc"] / m["poll"]
        if engines == 8:
            goal, met = "poll < 5 ms", m["poll"] < 0.005
        elif engines == 1:
            goal, met = "parse ≥ 30×", ratio_parse >= 30
        else:
            goal, met = "—", None
        table.add(
            label,
            f"{size / 1024:.0f} KiB / {lines:.0f}",
            fmt_us(m["pc"]),
            fmt_us(m["parse"]),
            f"{ratio_parse:.1f}×",
            fmt_us(m["parse_grouped"]),
            f"{ratio_grouped:.1f}×",
            fmt_us(m["poll"]),
            f"{ratio_poll:.1f}×",
            goal,
            verdict_mark(met),
        )
        results[label] = {
            **m,
            "bytes": size,
            "lines": lines,
            "ratio_parse": ratio_parse,
            "ratio_parse_grouped": ratio_grouped,
            "ratio_poll": ratio_poll,
            "engines": engines,
            "goal": goal,
            "met": met,
        }
    return table, results


def run_scaling(smoke: bool) -> tuple[Table, dict]:
    rounds = 1 if smoke else 3
    n = 6 if smoke else 20
    base = payloads.sim_sequence(1, max(n, 14))[:n]
    scen = payloads._scenario_file("bench-dp1", payloads.dp_scenario_yaml(1, duration=payloads.POLL * (max(n, 14) + 1)))
    config = config_for_scenario(scen)
    table = Table(
        "scaling",
        "Scaling: cost per poll vs routes, engines and payload size (one run)",
        [
            "dimension",
            "value",
            "bytes",
            "selected series",
            "prometheus_client parse",
            "specwatch parse",
            "specwatch full poll",
            "marginal cost per extra unit",
            "ratio (pc / full poll)",
        ],
        note="Routes and engines: the simulator's vLLM series copied per model_name / engine label. "
        "Size: unrelated series appended (other exporters in the same process). Marginal cost = (full poll − "
        "full poll of the first row) / (units − first row's units), per route, engine or MiB: a flat "
        "column means linear growth.",
    )
    variants = []
    for r in (1, 2, 4, 8):
        variants.append(("routes", r, [(t, payloads.replicate(x, r, 1)) for t, x in base], r))
    for e in (1, 2, 4, 8) if smoke else (1, 2, 4, 8, 16):
        variants.append(("engines", e, [(t, payloads.replicate(x, 1, e)) for t, x in base], e))
    for size in (256 << 10, 1 << 20) if smoke else (64 << 10, 256 << 10, 1 << 20, 4 << 20):
        seq = [(t, payloads.pad(x, size)) for t, x in base]
        variants.append(("payload size", f"{size >> 10} KiB", seq, size / (1 << 20)))
    results = []
    first: dict[str, tuple[float, float]] = {}
    for dim, value, seq, unit in variants:
        nbytes = len(seq[0][1])
        stride = 1 if nbytes < (600 << 10) else 3
        m = measure_sequence(seq, config, rounds=rounds, pc_stride=stride)
        selected = sum(len(f.samples) + len(f.created) for f in Selector(VLLM.families).parse(seq[-1][1]).values())
        if dim not in first:
            first[dim] = (unit, m["poll"])
            per_unit = None
            shown = "(base)"
        else:
            per_unit = (m["poll"] - first[dim][1]) / (unit - first[dim][0])
            shown = fmt_us(per_unit) + (" /MiB" if dim == "payload size" else "")
        table.add(
            dim,
            str(value),
            f"{nbytes / 1024:.0f} KiB",
            selected,
            fmt_us(m["pc"]),
            fmt_us(m["parse"]),
            fmt_us(m["poll"]),
            shown,
            f"{m['pc'] / m['poll']:.1f}×",
        )
        results.append(
            {
                "dimension": dim,
                "value": value,
                "bytes": nbytes,
                "selected_series": selected,
                **m,
                "marginal_poll_per_unit": per_unit,
            }
        )
    return table, {"variants": results}
