"""(4) detection delay and false verdict changes against two peer rules, and (5) ITL quantile accuracy
against a real Prometheus.

Every scenario recording (sim.record, 5 s polls) is replayed through specwatch's Pipeline exactly as
`specwatch replay` does. At each poll the sidecar's own /metrics exposition (SpecwatchCollector) is
rendered, and its `specwatch_acceptance_margin` and mirrored `specwatch_itl_seconds` histogram lines
are kept with the poll's timestamp, next to vLLM's raw acceptance counters from the same payload
(what a Prometheus scraping vLLM directly every 5 s would store). All of it is backfilled into a real
Prometheus (promtool tsdb create-blocks-from openmetrics), which then evaluates, at the poll
instants:

* specwatch's alert condition `specwatch_acceptance_margin{window="5m"} < 0` (SpecDecodeBelowBreakeven);
  the alert time is that condition's start + the rule's `for:` (derived, not a rule-manager run);
* peer 1, the lesson's static gate on vLLM's counters:
  `sum by (model_name) (vllm:spec_decode_num_accepted_tokens_total) / sum by (model_name) (vllm:spec_decode_num_draft_tokens_total) < 0.55`;
* peer 2, the same ratio of vLLM's raw counters over 5m: `sum(rate(accepted[5m])) / sum(rate(drafted[5m])) < 0.55`;
* `histogram_quantile(q, sum by (le) (rate(specwatch_itl_seconds_bucket[w])))` for the accuracy check.

specwatch's verdict times come from the replay timeline (windows 1m and 5m, hold 2, margin 0.02).
The true crossings are `sim.crossings(scenario)` (documented in each scenario's `expected.crossings`).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

from prometheus_client import generate_latest

from specwatch import sim
from specwatch.config import from_mapping
from specwatch.export.collector import registry_for
from specwatch.sidecar.pipeline import Pipeline
from specwatch.sim.sidecar_config import sidecar_config_for

from . import payloads
from .common import BackfilledPrometheus, Table, verdict_mark
from .parse_cost import default_config

SCENARIOS = ("alpha-drop", "slow-drift", "batch-surge", "mixed-routes", "restart")
SMOKE_SCENARIOS = ("alpha-drop",)
ALERT_FOR = 15 * 60  # SpecDecodeBelowBreakeven `for:` in rules/specwatch-alerts.yaml
WINDOW_5M, HOLD_POLLS = 300.0, 2
GRACE = WINDOW_5M + HOLD_POLLS * payloads.POLL  # the goal: delay <= window + hold
THRESHOLD = 0.55

PEER_STATIC = (
    "sum by (scenario, model_name) (vllm:spec_decode_num_accepted_tokens_total) / "
    "sum by (scenario, model_name) (vllm:spec_decode_num_draft_tokens_total) < 0.55"
)
PEER_RATE = (
    "sum by (scenario, model_name) (rate(vllm:spec_decode_num_accepted_tokens_total[5m])) / "
    "sum by (scenario, model_name) (rate(vllm:spec_decode_num_draft_tokens_total[5m])) < 0.55"
)
SW_ALERT = 'specwatch_acceptance_margin{window="5m"} < 0'

_KEEP_SW = (
    "specwatch_itl_seconds_bucket{",
    "specwatch_itl_seconds_sum{",
    "specwatch_itl_seconds_count{",
    "specwatch_acceptance_margin{",
)
_KEEP_VLLM = ("vllm:spec_decode_num_accepted_tokens_total{", "vllm:spec_decode_num_draft_tokens_total{")
_FAMILY_TYPES = {
    "specwatch_itl_seconds": "histogram",
    "specwatch_acceptance_margin": "gauge",
    "vllm:spec_decode_num_accepted_tokens": "counter",
    "vllm:spec_decode_num_draft_tokens": "counter",
}


def _family_of(line: str) -> str:
    name = line.split("{", 1)[0]
    for suffix in ("_bucket", "_sum", "_count", "_total"):
        if name.endswith(suffix) and name[: -len(suffix)] in _FAMILY_TYPES:
            return name[: -len(suffix)]
    return name


class Backfill:
    """OpenMetrics lines grouped by family (OpenMetrics wants a family's lines together)."""

    def __init__(self):
        self.families: dict[str, list[str]] = defaultdict(list)

    def add(self, line: str, scenario: str, t: float) -> None:
        brace = line.index("{")
        self.families[_family_of(line)].append(f'{line[: brace + 1]}scenario="{scenario}",{line[brace + 1 :]} {t:.3f}')

    def text(self) -> str:
        out = []
        for fam, lines in self.families.items():
            out.append(f"# TYPE {fam} {_FAMILY_TYPES[fam]}")
            out.extend(lines)
        out.append("# EOF")
        return "\n".join(out) + "\n"


def replay_with_exposition(name: str, lines, config, backfill: Backfill, *, vllm_lines: bool = True) -> list[dict]:
    """Replay like `specwatch replay`; keep each evaluation and the sidecar's exported series."""
    pipeline = Pipeline(config)
    registry = registry_for(pipeline.view)
    evals = []
    for raw in lines:
        entry = json.loads(raw) if isinstance(raw, str) else raw
        t, text = float(entry["t"]), entry["text"]
        pipeline.ingest("vllm", t, text)
        for ev in pipeline.evaluate(t):
            evals.append(
                {
                    "t": t,
                    "route": ev.stats.route,
                    "window": ev.stats.window,
                    "verdict": ev.verdict,
                    "margin": ev.value("acceptance_margin"),
                    "p50": ev.stats.itl_p50_seconds,
                    "p99": ev.stats.itl_p99_seconds,
                }
            )
        for line in generate_latest(registry).decode().split("\n"):
            if line.startswith(_KEEP_SW):
                backfill.add(line, name, t)
        if vllm_lines:
            for line in text.split("\n"):
                if line.startswith(_KEEP_VLLM):
                    backfill.add(line, name, t)
    return evals


def vllm_counter_lines(rec: Path, name: str, backfill: Backfill) -> tuple[float, float]:
    first = last = math.nan
    with open(rec, encoding="utf-8") as fh:
        for raw in fh:
            entry = json.loads(raw)
            t = float(entry["t"])
            first = t if math.isnan(first) else first
            last = t
            for line in entry["text"].split("\n"):
                if line.startswith(_KEEP_VLLM):
                    backfill.add(line, name, t)
    return first, last


def truth_timeline(name: str) -> tuple[dict[str, str], list[dict]]:
    s = sim.Simulator(name)
    initial = {r: v["verdict"] for r, v in s.truth()["routes"].items()}
    return initial, sim.crossings(name)


def _true_verdict(initial: str, crossings: list[dict], route: str, t_rel: float) -> str:
    v = initial
    for c in crossings:
        if c["route"] == route and c["at"] <= t_rel:
            v = c["to"]
    return v


def _first_at_or_after(series: list[tuple[float, object]], t0: float, pred) -> float | None:
    for t, v in series:
        if t >= t0 and pred(v):
            return t
    return None


def _held_since(series: list[tuple[float, object]], t0: float, pred) -> float | None:
    """If pred holds at t0 (the last state before or at t0), since when it held continuously."""
    since = None
    for t, v in series:
        if t > t0:
            break
        since = (since if since is not None else t) if pred(v) else None
    return since


def _transitions(series: list[tuple[float, object]], ignore=("insufficient_data", None)) -> list[tuple[float, object]]:
    out, prev = [], None
    for t, v in series:
        if v in ignore:
            continue
        if prev is not None and v != prev:
            out.append((t, v))
        prev = v
    return out


def _bool_series(result: list[dict], key: dict, times: list[float]) -> list[tuple[float, bool]]:
    """A range query's filtered result -> True at the instants where the condition held, else False."""
    true_times: set[float] = set()
    for series in result:
        if all(series["metric"].get(k) == v for k, v in key.items()):
            true_times.update(round(float(t), 3) for t, _ in series["values"])
    return [(t, round(t, 3) in true_times) for t in times]


def _delay_cell(t_cross: float, series, pred, before_pred=None) -> tuple[str, float | None]:
    """Delay from the true crossing to the detector showing the new state; 'already' if it did before."""
    already = _held_since(series, t_cross, pred)
    if already is not None and already < t_cross:
        return f"already since t={already - series[0][0]:.0f}s (no change)", None
    hit = _first_at_or_after(series, t_cross, pred)
    if hit is None:
        return "missed", None
    return f"{hit - t_cross:.0f} s", hit - t_cross


def run_detection(smoke: bool, stable_output: str | None = None) -> tuple[list[Table], dict]:
    names = SMOKE_SCENARIOS if smoke else SCENARIOS
    backfill = Backfill()
    data = {}
    for name in names:
        rec = payloads.scenario_recording(name)
        sc = sim.load_scenario(name)
        config = from_mapping(
            sidecar_config_for(
                sc,
                target_url="http://127.0.0.1:1/metrics",
                listen="127.0.0.1:0",
                poll_interval=payloads.POLL,
                windows=("1m", "5m"),
            )
        )
        with open(rec, encoding="utf-8") as fh:
            evals = replay_with_exposition(name, fh, config, backfill)
        initial, crossings = truth_timeline(name)
        data[name] = {
            "evals": evals,
            "initial": initial,
            "crossings": crossings,
            "epoch": sim.EPOCH_BASE,
            "routes": list(sc.model_names),
        }
    # The real vLLM fixture sequence, for accuracy only (irregular scrape times, a restart inside).
    real = payloads.real_payloads()
    real_evals = (
        replay_with_exposition(
            "real-vllm-cpu", ({"t": t, "text": x} for _, t, x in real), default_config(), backfill, vllm_lines=False
        )
        if real
        else []
    )
    # 24 h of stable noisy traffic: specwatch's verdicts from the whole-process replay output, the peers
    # from vLLM's counters in the same recording.
    stable_polls = 720 if smoke else 17_280
    stable_rec = payloads.tiled_recording(stable_polls)
    s_first, s_last = vllm_counter_lines(stable_rec, "steady-24h", backfill)
    stable_evals = _stable_specwatch(stable_rec, stable_output)

    tables: list[Table] = []
    out: dict = {"scenarios": {}, "accuracy": {}}
    with BackfilledPrometheus(backfill.text()) as prom:
        # --- detection -----------------------------------------------------------------------------------
        epoch = sim.EPOCH_BASE
        end = max(max(e["t"] for e in d["evals"]) for d in data.values())
        q_static = prom.query_range(PEER_STATIC, epoch, end, payloads.POLL)
        q_rate = prom.query_range(PEER_RATE, epoch, end, payloads.POLL)
        q_alert = prom.query_range(SW_ALERT, epoch, end, payloads.POLL)
        delays = Table(
            "detection",
            "Detection delay from the true break-even crossing (replayed scenario recordings, 5 s polls, one run)",
            [
                "scenario",
                "route",
                "true crossing",
                "specwatch verdict 1m",
                "specwatch verdict 5m",
                "specwatch alert condition (margin 5m < 0)",
                "specwatch alert (+ for: 15m)",
                "peer: static alpha < 0.55",
                "peer: rate(5m) ratio < 0.55",
                "goal (5m ≤ window + hold)",
                "met",
            ],
            note="Delays in seconds after the true crossing of `sim.crossings` (scenario "
            "`expected.crossings`). 'already since' = the detector was in that state before the "
            "crossing (a false alarm, not a detection); 'missed' = never. Peer rules only say "
            "disable-or-not, so only crossings into or out of `disable` apply to them. The alert "
            "column is derived: condition start + `for: 15m`. Goal: specwatch's 5m verdict within "
            f"window + hold = {GRACE:.0f} s.",
        )
        falses = Table(
            "false_changes",
            "False verdict changes and time in the wrong state (one run)",
            [
                "scenario",
                "route",
                "specwatch 1m",
                "specwatch 5m",
                "specwatch alert condition",
                "peer: static < 0.55",
                "peer: rate(5m) < 0.55",
                "goal (specwatch 0 false changes)",
                "met",
            ],
            note="Cell = false changes (changes within 10 min after a true crossing) / share of time the "
            "detector disagrees with the truth on 'should speculation be off?'. The first 5 min (warm-up: "
            "windows filling, the simulated batch ramping up from 0) are not scored, nor window + hold "
            "after each true crossing for the share. A change is false when no true crossing "
            "happened in the 10 min before it; changes after a crossing include the intermediate "
            "verdict a window passes through while it fills with the new traffic (e.g. keep → shorten → "
            "disable after a step drop). steady-24h: the 10-minute simulated steady run tiled to 24 h "
            "(17,280 polls), the same recording as the replay benchmark.",
        )
        for name, d in data.items():
            times = sorted({e["t"] for e in d["evals"]})
            res_s = {}
            for route in d["routes"]:
                sw = {
                    w: [(e["t"], e["verdict"]) for e in d["evals"] if e["route"] == route and e["window"] == w]
                    for w in ("1m", "5m")
                }
                alert = _bool_series(q_alert, {"scenario": name, "route": route}, times)
                static = _bool_series(q_static, {"scenario": name, "model_name": route}, times)
                rate = _bool_series(q_rate, {"scenario": name, "model_name": route}, times)
                crossings = [c for c in d["crossings"] if c["route"] == route]
                rows = []
                for c in crossings:
                    tc = epoch + c["at"]
                    cell_1m, _ = _delay_cell(tc, sw["1m"], lambda v, s=c["to"]: v == s)
                    cell_5m, d5 = _delay_cell(tc, sw["5m"], lambda v, s=c["to"]: v == s)
                    if c["to"] == "disable" or c["from"] == "disable":
                        want = c["to"] == "disable"
                        cell_alert, da = _delay_cell(tc, alert, lambda v, w=want: v == w)
                        cell_fire = (
                            f"{da + ALERT_FOR:.0f} s"
                            if (da is not None and want)
                            else ("—" if da is None else "resolves")
                        )
                        cell_static, _ = _delay_cell(tc, static, lambda v, w=want: v == w)
                        cell_rate, _ = _delay_cell(tc, rate, lambda v, w=want: v == w)
                    else:
                        cell_alert = cell_fire = cell_static = cell_rate = "n/a (not a disable crossing)"
                    met = d5 is not None and d5 <= GRACE
                    delays.add(
                        name,
                        route,
                        f"t={c['at']:.0f}s {c['from']}→{c['to']}",
                        cell_1m,
                        cell_5m,
                        cell_alert,
                        cell_fire,
                        cell_static,
                        cell_rate,
                        f"≤ {GRACE:.0f} s",
                        verdict_mark(met),
                    )
                    rows.append(
                        {
                            "crossing": c,
                            "specwatch_1m": cell_1m,
                            "specwatch_5m": cell_5m,
                            "delay_5m": d5,
                            "alert_condition": cell_alert,
                            "alert": cell_fire,
                            "peer_static": cell_static,
                            "peer_rate": cell_rate,
                            "met": met,
                        }
                    )
                if not crossings:
                    delays.add(
                        name,
                        route,
                        f"none (true verdict {d['initial'][route]} throughout)",
                        "—",
                        "—",
                        "—",
                        "—",
                        "—",
                        "—",
                        "—",
                        "—",
                    )
                # false changes + wrong time
                truth = [(t, _true_verdict(d["initial"][route], d["crossings"], route, t - epoch)) for t in times]
                cells, stats = [], {}
                for label, series, kind in (
                    ("specwatch_1m", sw["1m"], "verdict"),
                    ("specwatch_5m", sw["5m"], "verdict"),
                    ("alert_condition", alert, "bool"),
                    ("peer_static", static, "bool"),
                    ("peer_rate", rate, "bool"),
                ):
                    n_false, n_trans, wrong = _score(series, kind, truth, crossings, epoch)
                    stats[label] = {"false_changes": n_false, "changes_after_crossings": n_trans, "wrong_share": wrong}
                    cells.append(f"{n_false} ({n_trans}) / {wrong * 100:.0f} %")
                sw_false = stats["specwatch_1m"]["false_changes"] + stats["specwatch_5m"]["false_changes"]
                falses.add(name, route, *cells, "0", verdict_mark(sw_false == 0))
                res_s[route] = {"delays": rows, "false": stats}
            out["scenarios"][name] = res_s
        # 24 h stable
        s_times = [s_first + payloads.POLL * i for i in range(stable_polls)]
        q_static_24 = prom.query_range(PEER_STATIC.replace("vllm:", "vllm:", 1), s_first, s_last, payloads.POLL)
        q_rate_24 = prom.query_range(PEER_RATE, s_first, s_last, payloads.POLL)
        route24 = sim.load_scenario("steady").model_names[0]
        st = _bool_series(q_static_24, {"scenario": "steady-24h", "model_name": route24}, s_times)
        rt = _bool_series(q_rate_24, {"scenario": "steady-24h", "model_name": route24}, s_times)
        truth24 = [(t, "keep") for t in s_times]
        stable = {}
        cells = []
        for label, series, kind in (
            ("specwatch_1m", [(e["t"], e["verdict"]) for e in stable_evals if e["window"] == "1m"], "verdict"),
            ("specwatch_5m", [(e["t"], e["verdict"]) for e in stable_evals if e["window"] == "5m"], "verdict"),
            (
                "alert_condition",
                [(e["t"], e["margin"] is not None and e["margin"] < 0) for e in stable_evals if e["window"] == "5m"],
                "bool",
            ),
            ("peer_static", st, "bool"),
            ("peer_rate", rt, "bool"),
        ):
            n_false, n_trans, wrong = _score(series, kind, truth24, [], s_first)
            stable[label] = {"false_changes": n_false, "wrong_share": wrong}
            cells.append(f"{n_false} ({n_trans}) / {wrong * 100:.0f} %")
        sw_false = stable["specwatch_1m"]["false_changes"] + stable["specwatch_5m"]["false_changes"]
        falses.add(
            f"steady-{stable_polls * payloads.POLL / 3600:g}h", route24, *cells, "0", verdict_mark(sw_false == 0)
        )
        out["stable"] = {"polls": stable_polls, **stable}
        tables += [delays, falses]

        # --- accuracy ------------------------------------------------------------------------------------
        acc = Table(
            "accuracy",
            "ITL P50/P99: specwatch vs a real Prometheus's histogram_quantile over the same "
            "window on the same scrape data (one run)",
            ["data", "window", "instants compared", "max |Δ| P50", "max |Δ| P99", "presence mismatches", "goal", "met"],
            note="Prometheus evaluates `histogram_quantile(q, sum by (le) (rate(specwatch_itl_seconds_bucket[w])))` "
            "on the sidecar's mirrored histogram as exported at each poll (backfilled with the poll "
            "timestamps), at the poll instants; specwatch's values are its `specwatch_itl_p50/p99_seconds` "
            "at the same instants. Presence mismatch = one side has a value and the other not. Where a "
            "window starts exactly on a poll (the simulator's regular 5 s polls) Prometheus's rate() does "
            "not extrapolate and the two agree to float rounding. The real fixtures were scraped about "
            "every 2 s at irregular times: there rate() extrapolates to the window edges, by a different "
            "factor for buckets whose counter is 0 at the window start (its zero clamp), which moves "
            "Prometheus's quantile; specwatch uses the exact deltas between the first and last poll in "
            "the window (docs/architecture.md, window semantics), so a difference in that row is Prometheus's extrapolation.",
        )
        for w in ("1m", "5m"):
            for label, scen_names, evs in [("simulator scenarios", list(data), None)] + (
                [("real vLLM 0.32 CPU fixtures", ["real-vllm-cpu"], real_evals)] if real_evals else []
            ):
                diffs = {"p50": [], "p99": []}
                mismatches = compared = 0
                for q, key in ((0.5, "p50"), (0.99, "p99")):
                    expr = (
                        f"histogram_quantile({q}, sum by (scenario, route, le) "
                        f"(rate(specwatch_itl_seconds_bucket[{w}])))"
                    )
                    if evs is None:
                        result = prom.query_range(expr, epoch, end, payloads.POLL)
                        values = {
                            (s["metric"]["scenario"], s["metric"]["route"], round(float(t), 3)): float(v)
                            for s in result
                            for t, v in s["values"]
                        }
                        pairs = [(n, e) for n in scen_names for e in data[n]["evals"] if e["window"] == w]
                    else:
                        values = {}
                        for t in sorted({e["t"] for e in evs}):
                            for s in prom.query(expr, t):
                                values[(s["metric"]["scenario"], s["metric"]["route"], round(t, 3))] = float(
                                    s["value"][1]
                                )
                        pairs = [("real-vllm-cpu", e) for e in evs if e["window"] == w]
                    for n, e in pairs:
                        mine = e[key]
                        theirs = values.get((n, e["route"], round(e["t"], 3)))
                        if theirs is not None and not math.isfinite(theirs):
                            theirs = None
                        if (mine is None) != (theirs is None):
                            mismatches += 1
                        elif mine is not None:
                            diffs[key].append(abs(mine - theirs))
                            if key == "p50":
                                compared += 1
                m50 = max(diffs["p50"], default=math.nan)
                m99 = max(diffs["p99"], default=math.nan)
                ok = compared > 0 and m50 <= 1e-9 and m99 <= 1e-9 and mismatches == 0
                acc.add(label, w, compared, f"{m50:.1e}", f"{m99:.1e}", mismatches, "≤ 1e-9", verdict_mark(ok))
                out["accuracy"][f"{label} {w}"] = {
                    "compared": compared,
                    "max_abs_p50": m50,
                    "max_abs_p99": m99,
                    "presence_mismatches": mismatches,
                    "met": ok,
                }
        tables.append(acc)
    return tables, out


def _score(
    series, kind: str, truth: list[tuple[float, str]], crossings: list[dict], epoch: float
) -> tuple[int, int, float]:
    """(false changes, changes within 10 min after a true crossing, share of scored time in the wrong
    disable-or-not state)."""
    targets = []
    for c in crossings:
        tc = epoch + c["at"]
        targets.append((tc, c["to"] if kind == "verdict" else (c["to"] == "disable")))
    n_false = n_transitional = 0
    start = truth[0][0] if truth else 0.0
    for t, _v in _transitions(series, ignore=("insufficient_data", None) if kind == "verdict" else ()):
        if any(tc <= t <= tc + 600 for tc, _ in targets):
            n_transitional += 1
        elif t >= start + WINDOW_5M:  # before: warm-up (windows filling, simulated batch ramping up)
            n_false += 1
    truth_at = dict(truth)
    start = truth[0][0] if truth else 0.0
    scored = wrong = 0
    for t, v in series:
        if t < start + WINDOW_5M or any(tc <= t <= tc + GRACE for tc, _ in targets) or t not in truth_at:
            continue
        if kind == "verdict" and v in ("insufficient_data", None):
            continue
        said_off = (v == "disable") if kind == "verdict" else bool(v)
        scored += 1
        wrong += said_off != (truth_at[t] == "disable")
    return n_false, n_transitional, (wrong / scored if scored else 0.0)


def _stable_specwatch(rec: Path, output: str | None) -> list[dict]:
    """specwatch's verdicts over the stable recording: the replay benchmark's output when present."""
    from .common import cache_dir

    with open(rec, "rb") as fh:
        polls = sum(1 for _ in fh)
    cached = cache_dir() / f"replay-out-specwatch-{polls}.jsonl"
    if not output and cached.exists() and cached.stat().st_mtime > rec.stat().st_mtime:
        output = str(cached)
    if output and Path(output).exists():
        evals = []
        with open(output, encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                evals.append(
                    {
                        "t": r["t"],
                        "route": r["route"],
                        "window": r["window"],
                        "verdict": r["verdict"],
                        "margin": None
                        if r["acceptance_rate"] is None or r["breakeven_acceptance_rate"] is None
                        else r["acceptance_rate"] - r["breakeven_acceptance_rate"],
                    }
                )
        return evals
    from specwatch.config import load
    from specwatch.sidecar.replay import replay

    from .replay_proc import replay_config

    with open(rec, encoding="utf-8") as fh:
        return [
            {
                "t": r["t"],
                "route": r["route"],
                "window": r["window"],
                "verdict": r["verdict"],
                "margin": None
                if r["acceptance_rate"] is None or r["breakeven_acceptance_rate"] is None
                else r["acceptance_rate"] - r["breakeven_acceptance_rate"],
            }
            for r in replay(load(str(replay_config())), fh)
        ]
